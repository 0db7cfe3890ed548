"""The element-wise work gpt-oss's experts add under Megatron, counted by PyTorch itself: the ops
the sequences dispatch on fake tensors, forward and backward, and the bytes each reads and
writes, against calculators.time.elementwise's CLAMP and EXPERT_BIAS.

- the clamp of the GLU's input: its gate half clamped from above, its linear half on both sides,
  the two concatenated again (Megatron-Core's clamp_value path runs these eagerly before its
  compiled GLU);
- the second bias: per local expert, its rows plus the bias times each row's routing probability,
  concatenated (TEGroupedMLP's unpacked bias path); in fp32 and cast back where the probabilities
  are fp32.
The sequences are benchmarks.eager_ops', which a GPU session times too."""
import types

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from benchmarks.eager_ops import expert_bias as _bias, glu_clamp as _clamp
from calculators.specs.parallel import ParallelConfig
from calculators.specs.presets import model_from_name
from calculators.time.elementwise import CLAMP, EAGER_PACE, EXPERT_BIAS, glu_extras, layer_bytes
from tests.calculators.reference_eager import _Bytes        # bytes every non-matmul kernel reads and writes


def _traced(forward, *inputs):
    with _Bytes() as fwd:
        y = forward(*inputs)
    with _Bytes() as bwd:
        y.backward(torch.ones_like(y))
    return {"forward": (fwd.bytes, fwd.kernels), "backward": (bwd.bytes, bwd.kernels)}


@pytest.mark.parametrize("probs", ["bf16", "fp32"])
def test_the_clamp_and_the_bias_move_the_counted_bytes(probs):
    """The bias's sum in the probabilities' dtype: bf16 as Megatron's router gives them by default,
    fp32 as DeepEP and HybridEP take them (then cast back to bf16)."""
    n, h, f, experts = 4096, 256, 128, 4
    with FakeTensorMode():
        clamp = _traced(_clamp, torch.randn(n, 2 * f, dtype=torch.bfloat16, requires_grad=True))
        bias = _traced(_bias, torch.randn(n, h, dtype=torch.bfloat16, requires_grad=True),
                       torch.randn(experts, h, dtype=torch.bfloat16, requires_grad=True),
                       torch.rand(n, 1, dtype=getattr(torch, {"bf16": "bfloat16", "fp32": "float32"}[probs]),
                                  requires_grad=True), [n // experts] * experts)
    for way in ("forward", "backward"):
        per, kernels = CLAMP[way]
        assert clamp[way][0] == pytest.approx(per * n * 2 * f, rel=0.01) and clamp[way][1] == kernels, clamp
        per, per_expert, more = EXPERT_BIAS[probs][way]
        assert bias[way][0] == pytest.approx(per * n * h, rel=0.01), bias
        assert bias[way][1] == per_expert * experts + more, bias


def test_megatron_costs_them_where_its_kernels_do_not_fuse_them():
    """gpt-oss under Megatron's grouped experts pays both; under Transformer Engine's fused grouped
    MLP (experts="fused") or torch.compile neither; a model without a clamp or biases neither."""
    model = model_from_name("gpt-oss-120b")
    par = ParallelConfig(dp=8, ep=8, mbs=1, gbs=8, seq=4096, framework="megatron")
    tokens = 4096
    nbytes, kernels = glu_extras(model, par, tokens, "forward")
    e = model.moe
    clamp, bf16, fp32 = (EAGER_PACE[k][0] for k in ("clamp", "bf16", "fp32"))
    assert nbytes == pytest.approx(CLAMP["forward"][0] * tokens * 2 * e.top_k * e.expert_ffn * clamp +
                                   EXPERT_BIAS["bf16"]["forward"][0] * tokens * e.top_k * model.hidden * bf16)
    assert kernels == CLAMP["forward"][1] + EXPERT_BIAS["bf16"]["forward"][1] * 16 + EXPERT_BIAS["bf16"]["forward"][2]
    from dataclasses import replace
    hybridep = glu_extras(model, replace(par, dispatcher="hybridep"), tokens, "forward")[0]
    assert hybridep - nbytes == pytest.approx((28 * fp32 - 12 * bf16) * tokens * e.top_k * model.hidden)
    assert glu_extras(model, replace(par, experts="fused"), tokens, "forward") == (0.0, 0)
    assert glu_extras(model, replace(par, framework="fsdp2", compile=True, zero=3), tokens, "forward") == (0.0, 0)
    plain = replace(model, glu_limit=0.0, bias=False)
    assert glu_extras(plain, par, tokens, "backward") == (0.0, 0)
    with_extras = layer_bytes(model, par, True, tokens)["forward"][0]
    assert with_extras - layer_bytes(plain, par, True, tokens)["forward"][0] == pytest.approx(nbytes, rel=0.02)
    assert glu_extras(types.SimpleNamespace(moe=None, glu_limit=7.0, bias=True, mlp="swiglu"), par, tokens,
                      "forward") == (0.0, 0)


def test_the_pace_reproduces_the_timed_sequences():
    """The same functions timed on our H200 (benchmarks/sessions/gpt_oss_passes.py): the calculators'
    time for each pass, traced bytes times EAGER_PACE at the H200's streaming rate or the kernels'
    floor, against the measured forward and backward (call 19). The bias over 16 local experts
    (1,024 rows each) waits on its launches (33 forward, 67 backward; its forward took 0.36 ms in one
    call and 0.53 in another): the host's pace, held only to the floor's being no slower."""
    import json
    import pathlib
    from calculators.specs.hardware import gpu_from_name
    from calculators.time.compute import memory_time
    from calculators.time.profiles import default_profile
    gpu = gpu_from_name("H200-141GB")
    prof = default_profile(gpu.name)
    data = pathlib.Path(__file__).parents[2] / "validation" / "data" / "h100_harness" / "gpt_oss_passes_h200.jsonl"
    checked = 0
    for r in map(json.loads, data.read_text().splitlines()):
        if r["part"] not in ("clamp", "bias"):
            continue
        n = r["shape"][0] * r["shape"][1]
        kind = "clamp" if r["part"] == "clamp" else {"bfloat16": "bf16", "float32": "fp32"}[r["probs"]]
        for i, (way, measured) in enumerate((("forward", r["fwd_s"]), ("backward", r["both_s"] - r["fwd_s"]))):
            if kind == "clamp":
                per, kernels = CLAMP[way]
            else:
                per, k_expert, more = EXPERT_BIAS[kind][way]
                kernels = k_expert * r["local"] + more
            predicted = memory_time(per * n * EAGER_PACE[kind][i], kernels, gpu, prof)
            if r["part"] == "bias" and r["local"] == 16:
                assert predicted < 1.15 * measured   # the host's launches set its pace, not the GPU's bytes
                continue
            assert predicted == pytest.approx(measured, rel=0.15), (r, way, predicted)
            checked += 1
    assert checked == 8


def test_the_paces_hold_on_shapes_they_were_not_fitted_on():
    """Call 20 (gpt_oss_passes.py held): EP 32 at micro-batch 4 (4 local experts of 16,384 rows) and
    EP 8 at micro-batch 2 (16 of 2,048; RoPE over 8,192 tokens). GPU-bound passes within 10%: the
    clamp, the bias over 4 experts, q's RoPE at 8,192 tokens (held out) and at 16,384 (the fitted
    shape, repeated). Over 16 experts the bias's backward still waits on its 67 launches (0.52 and
    0.74 of its time predicted) and k's RoPE on its 19: held to the floor's being no slower."""
    import json
    import pathlib
    from calculators.specs.hardware import gpu_from_name
    from calculators.time.compute import memory_time
    from calculators.time.elementwise import ROPE_UNFUSED
    from calculators.time.profiles import default_profile
    gpu = gpu_from_name("H200-141GB")
    prof = default_profile(gpu.name)
    data = pathlib.Path(__file__).parents[2] / "validation" / "data" / "h100_harness" / "gpt_oss_passes_held_h200.jsonl"
    checked = 0
    for r in map(json.loads, data.read_text().splitlines()):
        if r["part"] == "copy":
            continue
        for i, (way, measured) in enumerate((("forward", r["fwd_s"]), ("backward", r["both_s"] - r["fwd_s"]))):
            if r["part"] == "clamp":
                kind, (per, kernels), n = "clamp", CLAMP[way], r["shape"][0] * r["shape"][1]
            elif r["part"] == "bias":
                kind = {"bfloat16": "bf16", "float32": "fp32"}[r["probs"]]
                per, k_expert, more = EXPERT_BIAS[kind][way]
                kernels, n = k_expert * r["local"] + more, r["shape"][0] * r["shape"][1]
            else:
                s, b, h, d = r["shape"]
                per, table, kernels = ROPE_UNFUSED[way]
                kind, n = "rope", s * b * h * d + table * s * d / per
            predicted = memory_time(per * n * EAGER_PACE[kind][i], kernels, gpu, prof)
            if (r["part"] == "bias" and r["local"] == 16) or r.get("tensor") == "k":
                assert predicted < 1.1 * measured, (r, way)
                continue
            assert predicted == pytest.approx(measured, rel=0.1), (r, way, predicted)
            checked += 1
    assert checked == 12


def test_the_unfused_rope_moves_the_counted_bytes_and_takes_the_timed_time():
    """benchmarks.eager_ops.unfused_rope, Megatron's RoPE under YaRN: PyTorch's trace against
    ROPE_UNFUSED (bytes per element of the rotated tensor, and per position per rotary dim for the
    cos and sin tables), then its time on our H200 (call 19). q at 16,384 tokens is what the pace was
    taken from (within 10%, forward and backward); q at 4,096 tokens is the check, against its
    kernels' time under the profiler (its timed backward waits on the host in part); k, an eighth of
    q, waits on its launches (the calculators' floor is under its time)."""
    import json
    import pathlib
    from benchmarks.eager_ops import unfused_rope
    from calculators.specs.hardware import gpu_from_name
    from calculators.time.compute import memory_time
    from calculators.time.elementwise import ROPE_UNFUSED
    from calculators.time.profiles import default_profile
    seq, batch, heads, dim = 512, 2, 16, 64
    with FakeTensorMode():
        freqs = torch.randn(seq, 1, 1, dim)
        traced = _traced(lambda t: unfused_rope(t, freqs, 1.35),
                         torch.randn(seq, batch, heads, dim, dtype=torch.bfloat16, requires_grad=True))
    for way in ("forward", "backward"):
        per, table, kernels = ROPE_UNFUSED[way]
        expected = per * seq * batch * heads * dim + table * seq * dim
        assert traced[way][0] == pytest.approx(expected, rel=0.005), traced
        assert traced[way][1] == kernels
    gpu = gpu_from_name("H200-141GB")
    prof = default_profile(gpu.name)
    data = pathlib.Path(__file__).parents[2] / "validation" / "data" / "h100_harness"

    def predicted(shape, i):
        s, b, h, d = shape
        per, table, kernels = ROPE_UNFUSED[("forward", "backward")[i]]
        return memory_time((per * s * b * h * d + table * s * d) * EAGER_PACE["rope"][i], kernels, gpu, prof)
    timed = [r for r in map(json.loads, (data / "gpt_oss_passes_h200.jsonl").read_text().splitlines())
             if r["part"] == "rope"]
    profiled = {(r["case"], r["tensor"]): r["kernels_s"] for r in map(
        json.loads, (data / "gpt_oss_passes_profile_h200.jsonl").read_text().splitlines()) if r["part"] == "rope"}
    assert len(timed) == 4 and len(profiled) == 4
    for r in timed:
        both = sum(predicted(r["shape"], i) for i in (0, 1))
        if r["tensor"] == "k":
            assert both < r["both_s"]
        elif r["shape"][1] == 4:                                   # 16,384 tokens: the pace's own
            assert predicted(r["shape"], 0) == pytest.approx(r["fwd_s"], rel=0.1)
            assert predicted(r["shape"], 1) == pytest.approx(r["both_s"] - r["fwd_s"], rel=0.1)
        else:                                                      # 4,096 tokens: the check
            assert both == pytest.approx(profiled[r["case"], "q"], rel=0.1)


def test_megatron_runs_rope_unfused_only_under_yarn():
    from dataclasses import replace
    from calculators.time.elementwise import FUSED, ROPE_UNFUSED, rope_extras
    model = model_from_name("gpt-oss-120b")
    for tp in (1, 4):
        par = ParallelConfig(dp=8 // tp, tp=tp, ep=8 // tp, mbs=2, gbs=8, seq=4096, framework="megatron", sp=tp > 1)
        tokens = 2 * 4096
        nbytes, kernels = rope_extras(model, par, tokens, "forward")
        width = (model.q_dim + model.kv_dim) / tp
        per, table, k = ROPE_UNFUSED["forward"]
        pace = EAGER_PACE["rope"][0]
        # the tables are per position: 4,096 of them, whatever the micro-batch
        assert nbytes == pytest.approx(tokens * width * (per * pace - FUSED["forward"][0][1])
                                       + 2 * table * pace * 4096 * model.head_dim)
        assert kernels == 2 * k
    assert rope_extras(replace(model, yarn=False), par, tokens, "forward") == (0.0, 0)
    assert rope_extras(model, replace(par, framework="fsdp2", zero=3, compile=True, sp=False, tp=1, dp=8, ep=8),
                       tokens, "forward") == (0.0, 0)
    mla = replace(model_from_name("deepseek-v3"), yarn=True)            # MLA's rotary path is its own
    assert rope_extras(mla, ParallelConfig(dp=8, ep=8, seq=4096, framework="megatron"), 4096, "forward") == (0.0, 0)
    par = ParallelConfig(dp=8, ep=8, mbs=1, gbs=8, seq=4096, framework="megatron")
    with_rope = layer_bytes(model, par, True, 4096)["backward"]
    without = layer_bytes(replace(model, yarn=False), par, True, 4096)["backward"]
    assert with_rope[0] - without[0] == pytest.approx(rope_extras(model, par, 4096, "backward")[0])
    assert with_rope[1] - without[1] == 2 * ROPE_UNFUSED["backward"][2]
