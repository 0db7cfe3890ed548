"""Autocast over fp32 weights (fsdp2 at ZeRO 0/1: DDP, or one GPU) against PyTorch itself: the
element-wise bytes and kernels torchtitan's block adds under torch.autocast over fp32 weights, over
the same block in bf16, counted op by op on fake tensors, against native_passes.autocast_extras (the
gradients' casts back to fp32, 6 bytes a parameter backward, are the optimizer's and left out)."""
import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from calculators.specs.models import ModelSpec
from calculators.specs.parallel import ParallelConfig
from calculators.time.elementwise import layer_bytes
from calculators.time.native_passes import AUTOCAST_WEIGHT_CAST
from tests.calculators.reference_eager import TitanBlock, TitanBlockFusedNorm, _Bytes, elementwise_bytes


def _autocast_bytes(block_cls, h, heads, kv, ffn, head_dim, batch, seq):
    with torch.device("meta"):
        block = block_cls(h, heads, kv, ffn, head_dim)
    with FakeTensorMode(allow_non_fake_inputs=True):
        params = {n: torch.empty(p.shape, dtype=torch.float32, requires_grad=True) for n, p in block.named_parameters()}
        x = torch.randn(batch, seq, h, dtype=torch.float32, requires_grad=True)
        tables = block.tables(seq)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            with _Bytes() as fwd:
                y = torch.func.functional_call(block, params, (x, tables))
        grad = torch.ones_like(y)
        with _Bytes() as bwd:
            y.backward(grad)
    traced = {"forward": (fwd.bytes, fwd.kernels), "backward": (bwd.bytes, bwd.kernels)}
    return traced, sum(p.numel() for p in block.parameters())


@pytest.mark.parametrize("shape", [(1024, 8, 2, 2816, 64, 1, 256), (2048, 16, 4, 5632, 128, 2, 128),
                                   (768, 12, 4, 2048, 64, 1, 512)])
@pytest.mark.parametrize("block,kind", [(TitanBlock, "eager"), (TitanBlockFusedNorm, "eager-fused-norm")])
def test_autocast_adds_what_pytorch_moves(shape, block, kind):
    h, heads, kv, ffn, head_dim, batch, seq = shape
    model = ModelSpec(layers=1, hidden=h, heads=heads, kv_heads=kv, head_dim=head_dim, ffn=ffn, vocab=64)
    autocast = ParallelConfig(mbs=batch, seq=seq, framework="fsdp2", zero=0, dp=1, elementwise=kind)
    bf16 = ParallelConfig(mbs=batch, seq=seq, framework="fsdp2", zero=2, dp=1, elementwise=kind)
    added = {way: tuple(a - b for a, b in zip(layer_bytes(model, autocast, False, batch * seq)[way],
                                               layer_bytes(model, bf16, False, batch * seq)[way]))
             for way in ("forward", "backward")}
    traced, params = _autocast_bytes(block, h, heads, kv, ffn, head_dim, batch, seq)
    plain = elementwise_bytes(block, h, heads, kv, ffn, head_dim, batch, seq)
    linear = params - 2 * h                          # the norms' weights are the trace's, not the linears'
    for way in ("forward", "backward"):
        # the weights' casts (forward: the calculators cast the linears' weights; backward: the
        # gradients' casts, the optimizer's) apart from the per-token part, each held on its own
        casts = AUTOCAST_WEIGHT_CAST * params
        per_token = traced[way][0] - plain[way][0] - casts
        counted = added[way][0] - (AUTOCAST_WEIGHT_CAST * linear if way == "forward" else 0)
        assert counted == pytest.approx(per_token, rel=0.01), (way, counted, per_token)
        assert added[way][1] == traced[way][1] - plain[way][1], way
    # compiled: the weights' casts alone, one kernel a linear (Inductor's _to_copy kernels, call 25)
    compiled = [layer_bytes(model, ParallelConfig(mbs=batch, seq=seq, framework="fsdp2", zero=z, dp=1, compile=True),
                            False, batch * seq)["forward"] for z in (0, 2)]
    assert compiled[0][0] - compiled[1][0] == pytest.approx(AUTOCAST_WEIGHT_CAST * linear, rel=1e-6)
    assert compiled[0][1] - compiled[1][1] == len(model.layer_matmuls(False))


def test_a_pipeline_casts_its_weights_once_a_step():
    """One autocast region around a pipeline's schedule caches each weight's cast for the step: per
    micro-batch, a share of it (benchmarks/train.py runs its pipelines so)."""
    model = ModelSpec(layers=4, hidden=512, heads=8, kv_heads=2, head_dim=64, ffn=1024, vocab=64)
    linear = sum(mm.fan_in * mm.fan_out * mm.stored for mm in model.layer_matmuls(False))
    for pp, m in ((1, 8), (2, 8), (2, 4)):
        casts = [layer_bytes(model, ParallelConfig(dp=1, pp=pp, mbs=1, gbs=m, seq=128, framework="fsdp2", zero=z,
                                                   compile=True), False, 128)["forward"][0] for z in (0, 2)]
        assert casts[0] - casts[1] == pytest.approx(AUTOCAST_WEIGHT_CAST * linear / (m if pp > 1 else 1)), (pp, m)
