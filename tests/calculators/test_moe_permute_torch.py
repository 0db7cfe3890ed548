"""An eager MoE layer's token permutation, as torchtitan's token dispatcher runs it (the moe
suite's benchmarks.moe.eager_permute, which our GPU runs timed), counted by PyTorch itself: the
ops its forward and backward dispatch on fake tensors and the bytes each one reads and writes,
against calculators.time.elementwise's eager_permute_parts. What those bytes
cost on a GPU (the accumulating scatter's rate) is held by tests/validation against our H100 and
H200 measurements; this holds the sequence."""
import types

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode

from benchmarks.moe import eager_permute
from calculators.specs.parallel import ParallelConfig
from calculators.specs.presets import model_from_name
from calculators.time.elementwise import eager_permute_parts, layer_bytes


_SKIP = ("aten::empty_like", "aten::expand", "aten::view", "aten::detach", "aten::ones_like")
_FILLS = ("aten::zeros", "aten::zeros_like", "aten::new_zeros")


class _FloatBytes(TorchDispatchMode):
    """Each op's floating-point inputs and outputs in bytes (index tensors are a token's worth per
    copy, cached across the hidden dimension, and left out), by op name."""

    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types_, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = func._schema.name
        if not func.is_view and not name.startswith("prim::") and name not in _SKIP:
            # an in-place op's first argument and a fill's template are written, not read
            read = () if name in _FILLS else (args[1:], kwargs) if name.endswith("_") else (args, kwargs)
            leaves = torch.utils._pytree.tree_leaves((read, out))
            n = sum(t.numel() * t.element_size() for t in leaves
                    if isinstance(t, torch.Tensor) and t.is_floating_point())
            self.ops.append((name, n))
        return out


@pytest.mark.parametrize("ep, score_grad", [(1, False), (8, False), (1, True), (8, True)])
def test_torchtitans_permutation_moves_the_counted_bytes(ep, score_grad):
    """With fixed scores, as our GPU timings ran it, and with the scores trained through it, as
    training runs it (their gradient is the output gradient times the copies, summed over h)."""
    T, h, K, E = 256, 512, 8, 64
    with FakeTensorMode():
        x = torch.randn(T, h, dtype=torch.bfloat16, requires_grad=True)
        src = torch.arange(T * K) // K
        idx = src[:, None].expand(-1, h)
        score = torch.rand(T * K, requires_grad=score_grad)
        reorder = torch.arange(T * K).view(ep, E // ep, -1).transpose(0, 1).reshape(-1) if ep > 1 else None
        with _FloatBytes() as fwd:
            y = eager_permute(x, idx, score, reorder)
        with _FloatBytes() as bwd:
            y.backward(torch.ones_like(y))
    names = [n for n, _ in fwd.ops]
    assert names[0] == "aten::gather" and names[-1] == "aten::scatter_add"
    assert [n for n in names if n in ("aten::_to_copy", "aten::mul")] == \
        ["aten::_to_copy", "aten::mul", "aten::_to_copy"]          # the fp32 round trip: three kernels
    spec = types.SimpleNamespace(hidden=h, moe=types.SimpleNamespace(top_k=K))
    for way, ops in (("forward", fwd.ops), ("backward", bwd.ops)):
        plain, scatter = eager_permute_parts(spec, T, ep, way, score_grad)
        traced = sum(n for _, n in ops)
        # the calculators count the gather's reads per copy (4 bytes per copied element) where the
        # trace counts the input once (its other reads hit the L2): within 10%
        assert traced == pytest.approx(plain + scatter, rel=0.10), (ep, score_grad, way, ops)


def test_an_eager_moe_layer_permutes_at_the_eager_cost_and_a_compiled_one_at_the_fused():
    qwen = model_from_name("qwen3-30b-a3b")
    T = 4096
    eager = layer_bytes(qwen, ParallelConfig(dp=8, ep=8, seq=T, gbs=8, framework="fsdp2", zero=3), True, T)
    compiled = layer_bytes(qwen, ParallelConfig(dp=8, ep=8, seq=T, gbs=8, framework="fsdp2", compile=True, zero=3),
                           True, T)
    megatron = layer_bytes(qwen, ParallelConfig(dp=8, ep=8, seq=T, gbs=8, framework="megatron"), True, T)
    dense = layer_bytes(qwen, ParallelConfig(dp=8, ep=8, seq=T, gbs=8, framework="fsdp2", zero=3), False, T)
    plain, scatter = eager_permute_parts(qwen, T, 8, "forward")
    assert eager["forward"][0] - dense["forward"][0] > plain + 4 * scatter
    assert compiled["forward"][0] == megatron["forward"][0]
    assert eager["backward"][0] - dense["backward"][0] > plain + 16 * T * 8 * qwen.hidden   # + the scores' gradient
