"""The eager stacks' element-wise work against our H200 (calls 22 and 23,
benchmarks/sessions/eager_blocks.py): the GPU time of every kernel of a block's forward and
backward that is not a GEMM or attention, against EAGER's (or, compiled, FUSED's) bytes at the
streaming rate times EAGER_STACK_PACE."""
import json
import pathlib

import pytest

from calculators.specs.hardware import gpu_from_name
from calculators.specs.models import ModelSpec
from calculators.specs.parallel import ParallelConfig
from calculators.time.compute import memory_time
from calculators.time.elementwise import layer_bytes
from calculators.time.profiles import default_profile
from tests.calculators.reference_eager import TitanBlock, TitanBlockComposite, elementwise_bytes

DATA = pathlib.Path(__file__).parents[2] / "validation" / "data" / "h100_harness"
SHAPES = {"llama3-8b": (4096, 32, 8, 14336, 128), "llama3.2-1b": (2048, 32, 8, 8192, 64)}
FITTED = ("llama3-8b", 8192)


def _ratios(name, fused_norm=False):
    """{(block, model, seq): (measured / predicted forward, backward)}; `fused_norm`: torchtitan's
    block costed as PyTorch 2.8 and later run it (elementwise="eager-fused-norm")."""
    gpu = gpu_from_name("H200-141GB")
    prof = default_profile(gpu.name)
    out = {}
    for r in map(json.loads, (DATA / name).read_text().splitlines()):
        if "block" not in r:
            continue
        h, heads, kv, ffn, d = SHAPES[r["model"]]
        model = ModelSpec(layers=1, hidden=h, heads=heads, kv_heads=kv, head_dim=d, ffn=ffn, vocab=1024)
        framework = "deepspeed" if r["block"] == "HFBlock" else "fsdp2"
        # bf16 weights, as the blocks ran (zero 3: no autocast over fp32 weights)
        par = ParallelConfig(dp=1, seq=r["seq"], mbs=1, framework=framework, compile=r.get("compiled", False), zero=3,
                             elementwise="eager-fused-norm" if fused_norm and r["block"] == "TitanBlock" else "")
        work = layer_bytes(model, par, False, r["seq"])
        fwd, bwd = (memory_time(*work[way], gpu, prof) for way in ("forward", "backward"))
        out[r["block"], r["model"], r["seq"]] = (r["fwd_rest_s"] / fwd, (r["rest_s"] - r["fwd_rest_s"]) / bwd)
    return out


def test_the_block_timed_is_the_block_counted():
    """TitanBlockComposite, what the GPU ran for PyTorch 2.7's torchtitan, moves what nn.RMSNorm's
    composite form moves on a CPU, op for op: the bytes EAGER["fsdp2"] holds."""
    for shape in ((1024, 8, 2, 2816, 64, 1, 256), (2048, 16, 4, 5632, 128, 2, 128)):
        assert elementwise_bytes(TitanBlockComposite, *shape) == elementwise_bytes(TitanBlock, *shape)


def test_the_eager_pace_holds_on_shapes_it_was_not_fitted_on():
    ratios = _ratios("eager_blocks_h200.jsonl")
    assert len(ratios) == 9
    for (block, model, seq), (fwd, bwd) in ratios.items():
        if block == "TitanBlock":
            # PyTorch 2.8 and later: the fused norm, about half of what EAGER counts (not modelled)
            assert 0.35 < fwd < 0.65 and 0.35 < bwd < 0.65, (block, model, seq, fwd, bwd)
        elif block == "TitanBlockComposite":
            # PyTorch 2.7 and earlier, what EAGER counts: slower than a stream, not paced (see
            # EAGER_STACK_PACE: the calculators cannot tell the two PyTorch versions apart)
            assert 1.15 < fwd < 1.3 and 1.03 < bwd < 1.15, (block, model, seq, fwd, bwd)
        else:
            bound = 0.02 if (model, seq) == FITTED else 0.05
            assert fwd == pytest.approx(1.0, abs=bound) and bwd == pytest.approx(1.0, abs=bound), (model, seq)


def test_pytorch_2_8s_eager_torchtitan_moves_what_its_table_counts():
    """The TitanBlock rows ran PyTorch 2.11's fused nn.RMSNorm: its table (EAGER_FUSED_NORM, from
    the trace alone, nothing fitted) at the streaming rate within 7% of their time."""
    ratios = {k: v for k, v in _ratios("eager_blocks_h200.jsonl", fused_norm=True).items() if k[0] == "TitanBlock"}
    assert len(ratios) == 3
    for key, (fwd, bwd) in ratios.items():
        assert 1.0 <= fwd < 1.07 and 1.0 <= bwd < 1.07, (key, fwd, bwd)


def test_compiled_blocks_move_about_what_fused_counts():
    """Inductor's kernels: within 25% of FUSED's bytes at the streaming rate, but torchtitan's
    forward, whose complex-number RoPE Inductor leaves to an eager kernel, 30% over (not costed)."""
    ratios = _ratios("eager_blocks_compiled_h200.jsonl")
    assert len(ratios) == 3
    for (block, model, seq), (fwd, bwd) in ratios.items():
        assert 0.75 < bwd < 1.05, (block, model, seq, bwd)
        assert (1.25 < fwd < 1.35) if block == "TitanBlock" else (0.8 < fwd < 0.9), (block, model, seq, fwd)
