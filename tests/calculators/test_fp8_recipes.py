"""FP8 as each stack runs it beyond the GEMMs: the output layer stays bf16, torchao's recipes under
fsdp2 differ in what they cast, gather and run in FP8, and FP8 weights are gathered in FP8."""
from dataclasses import replace

import pytest

from calculators.scenario import answer
from calculators.specs.fp8 import (TORCHAO_CASTS, fp8_recipe, fp8_weight_grad, param_gather_bytes,
                                   tp_gather_bytes, torchao_rescale_bytes)
from calculators.specs.errors import ConfigError
from calculators.specs.hardware import ClusterSpec, gpu_from_name
from calculators.specs.overlap import async_tp_gathers
from calculators.specs.parallel import ParallelConfig, check_layout
from calculators.specs.presets import model_from_name
from calculators.time.comm import group
from calculators.time.compute import layer_time, output_layer_time
from calculators.time.dpsync import gather_bytes
from calculators.time.elementwise import fp8_casts
from calculators.time.layercomm import layer_comm
from calculators.time.profiles import default_profile
from calculators.time.step import estimate_step

H100 = gpu_from_name("H100-80GB")
PROF = default_profile("H100-80GB")
L8B = model_from_name("llama3-8b")
TITAN = ParallelConfig(framework="fsdp2", dp=8, zero=3, mbs=1, gbs=64, seq=8192, precision="fp8", compile=True,
                       recompute="op_sac")


def test_the_output_gemm_stays_bf16_under_fp8():
    """Megatron's output layer is its own ColumnParallelLinear and torchtitan filters "output" out
    of its float8 conversion: the LM head costs the same in FP8 as in bf16."""
    for framework in ("megatron", "fsdp2"):
        par = replace(TITAN, framework=framework, zero=1, recompute="none")
        assert output_layer_time(L8B, par, H100, PROF) == output_layer_time(L8B, replace(par, precision="bf16"),
                                                                            H100, PROF)


def test_recipe_defaults_and_what_each_recipe_gathers():
    assert fp8_recipe(TITAN) == "tensorwise" and fp8_recipe(replace(TITAN, framework="megatron")) == "delayed"
    # torchao's float8 TP quantizes before gathering under tensorwise only; rowwise and MX gather bf16
    tp = replace(TITAN, tp=8, dp=1, sp=True)
    assert tp_gather_bytes(tp) == 1.0
    for recipe in ("rowwise", "rowwise_with_gw_hp", "mxfp8"):
        assert tp_gather_bytes(replace(tp, fp8_recipe=recipe)) == 2.0
        assert param_gather_bytes(replace(TITAN, fp8_recipe=recipe)) == (2.0, 2.0)
    # FSDP's float8 all-gather (tensorwise): the linears' weights in 1 byte, the experts' in bf16
    assert param_gather_bytes(TITAN) == (1.0, 2.0)
    # Megatron gathers FP8 parameters in FP8, but MXFP8's through bf16; bf16 weights gather bf16
    mega = replace(TITAN, framework="megatron", zero=1, recompute="none", compile=False)
    assert param_gather_bytes(mega) == (1.0, 1.0)
    assert param_gather_bytes(replace(mega, fp8_recipe="mxfp8")) == (2.0, 2.0)
    assert param_gather_bytes(replace(mega, fp8_weights="bf16")) == (2.0, 2.0)
    assert param_gather_bytes(replace(mega, precision="bf16")) == (2.0, 2.0)
    # per parameter of a rank, the norms and the embedding stay bf16
    d, e = gather_bytes(L8B, TITAN, L8B.layers, 0, 8.03e9, 0.0)
    assert 1.0 < d < 1.2 and e == 2.0


def test_rowwise_casts_more_and_rescales_and_gw_hp_keeps_the_weight_gradient_in_bf16():
    """torchao's roofline counts: rowwise casts each operand along both dimensions and its weights
    after the bf16 gather; its slow-accumulation backward GEMMs are rescaled after cuBLAS."""
    T = 8192
    casts = {r: fp8_casts(L8B, replace(TITAN, fp8_recipe=r), False, T) for r in TORCHAO_CASTS}
    total = {r: c["forward"][0] + c["backward"][0] for r, c in casts.items()}
    assert total["rowwise"] == max(total.values()) and total["rowwise"] > total["tensorwise"]
    assert torchao_rescale_bytes(replace(TITAN, fp8_recipe="rowwise")) == (4.0, 4.0)
    assert torchao_rescale_bytes(replace(TITAN, fp8_recipe="rowwise", compile=False)) == (12.0, 12.0)
    # rowwise_with_gw_hp: its input gradient has axis-wise scales both sides (the tensorwise weight
    # scale repeated), so it is rescaled too; its weight gradient is a bf16 GEMM
    assert torchao_rescale_bytes(replace(TITAN, fp8_recipe="rowwise_with_gw_hp")) == (4.0, 0.0)
    assert torchao_rescale_bytes(TITAN) == (0.0, 0.0)
    # eager moves more than compiled, recipe by recipe
    for r in TORCHAO_CASTS:
        eager = fp8_casts(L8B, replace(TITAN, fp8_recipe=r, compile=False), False, T)
        assert eager["forward"][0] + eager["backward"][0] >= total[r]
    hp = replace(TITAN, fp8_recipe="rowwise_with_gw_hp")
    assert not fp8_weight_grad(hp) and fp8_weight_grad(TITAN)
    w_hp = layer_time(L8B, hp, False, H100, PROF).backward_weight
    assert w_hp == pytest.approx(layer_time(L8B, replace(TITAN, precision="bf16"), False, H100, PROF).backward_weight)
    assert w_hp > layer_time(L8B, TITAN, False, H100, PROF).backward_weight
    # the step: rowwise is slower than tensorwise, and faster than bf16 on a large GEMM shape
    steps = {r: estimate_step(L8B, ClusterSpec(H100, nodes=1), replace(TITAN, fp8_recipe=r)).tokens_per_s_per_gpu
             for r in ("tensorwise", "rowwise")}
    bf16 = estimate_step(L8B, ClusterSpec(H100, nodes=1), replace(TITAN, precision="bf16")).tokens_per_s_per_gpu
    assert steps["tensorwise"] > steps["rowwise"] > bf16


def test_async_tp_fuses_the_gathers_only_where_a_matmul_takes_them():
    """Inductor fuses an all-gather with the matmuls reading it directly: under rowwise the gathered
    bf16 input is quantized first, so only the reduce-scatters pipeline and less hides."""
    cluster = ClusterSpec(H100, nodes=1)
    tp = replace(TITAN, tp=8, dp=1, sp=True, tp_overlap=True, recompute="none")
    row = replace(tp, fp8_recipe="rowwise")
    assert async_tp_gathers(tp) and not async_tp_gathers(row)
    assert async_tp_gathers(replace(row, framework="megatron", fp8_recipe=""))
    hidden = {}
    for name, par in (("tensorwise", tp), ("rowwise", row)):
        hidden[name] = layer_comm(L8B, par, cluster, PROF, False, layer_time(L8B, par, False, H100, PROF))["tp"][2]
    assert 0 < hidden["rowwise"] < hidden["tensorwise"]
    assert group("tp", row, cluster).size == 8


@pytest.mark.parametrize("framework, recipe, gpu, words", [
    ("fsdp2", "delayed", "H100-80GB", "torchao's float8 recipes"),
    ("fsdp2", "blockwise", "H100-80GB", "torchao's float8 recipes"),
    ("megatron", "rowwise", "H100-80GB", "is torchao's"),
    ("fsdp2", "mxfp8", "H100-80GB", "needs Blackwell"),
    ("deepspeed", "rowwise", "H100-80GB", "deepspeed runs neither"),
])
def test_recipes_a_framework_does_not_run_are_refused_by_name(framework, recipe, gpu, words):
    par = replace(TITAN, framework=framework, fp8_recipe=recipe, zero=3 if framework != "megatron" else 1,
                  recompute="none", compile=framework == "fsdp2")
    with pytest.raises(ConfigError) as err:
        check_layout(L8B, ClusterSpec(gpu_from_name(gpu), nodes=1), par)
    assert words in str(err.value) and "fp8_recipe" in str(err.value)


def test_torchao_recipes_reach_the_scenario_answer():
    base = {"model": {"preset": "llama3-8b"}, "hardware": {"gpu": "H100-80GB", "nodes": 1},
            "parallel": {"framework": "fsdp2", "dp": 8, "zero": 3, "mbs": 1, "gbs": 64, "seq": 8192,
                         "precision": "fp8", "compile": True, "recompute": "op_sac"}}
    tok = {}
    for recipe in ("", "tensorwise", "rowwise", "rowwise_with_gw_hp"):
        got = answer({**base, "parallel": {**base["parallel"], "fp8_recipe": recipe}})
        assert "error" not in got, got
        tok[recipe] = got["step"]["tokens_per_s_per_gpu"]
    assert tok[""] == tok["tensorwise"] > tok["rowwise"]
    bad = answer({**base, "parallel": {**base["parallel"], "fp8_recipe": "delayed"}})
    assert "fp8_recipe delayed" in bad.get("error", "") and "rowwise" in bad["error"]


def test_moe_experts_cast_as_torchaos_grouped_gemm_and_fsdp_decides_the_float8_gather():
    """The experts' grouped GEMMs run torchao's rowwise float8 (or MXFP8) grouped GEMM with fast
    accumulation whatever the linears' recipe: no rescale, and their weight gradient in FP8 under
    rowwise_with_gw_hp too. Without FSDP sharding the tensorwise weights are cast whole each time."""
    from calculators.specs.fp8 import float8_all_gather, torchao_casts
    qwen = model_from_name("qwen3-30b-a3b")
    moe = replace(TITAN, ep=8, recompute="none")
    assert torchao_casts(moe, True) == torchao_casts(replace(moe, fp8_recipe="rowwise"), True)
    assert torchao_casts(replace(moe, fp8_recipe="mxfp8"), True) == torchao_casts(replace(moe, fp8_recipe="mxfp8"),
                                                                                    False)
    rowwise = fp8_casts(qwen, replace(moe, fp8_recipe="rowwise"), True, 8192)["backward"][0]
    tensorwise = fp8_casts(qwen, moe, True, 8192)["backward"][0]
    assert tensorwise < rowwise < 2 * tensorwise          # the experts cast alike; only the linears differ
    # rowwise_with_gw_hp: the linears' weight gradients in bf16, the experts' in FP8
    hp = replace(moe, fp8_recipe="rowwise_with_gw_hp")
    w_hp, w_fp8 = (layer_time(qwen, p, True, H100, PROF).backward_weight for p in (hp, moe))
    w_bf16 = layer_time(qwen, replace(moe, precision="bf16"), True, H100, PROF).backward_weight
    assert w_fp8 < w_hp < w_bf16
    # the float8 all-gather needs FSDP's sharding; without it the weights are cast whole
    assert float8_all_gather(TITAN) and not float8_all_gather(replace(TITAN, dp=1, tp=8, sp=True))
    assert not float8_all_gather(replace(TITAN, zero=0))
    assert torchao_casts(replace(TITAN, zero=0), False)["w"] == (5, 3) and torchao_casts(TITAN, False)["w"] == (0, 2)
    assert param_gather_bytes(replace(TITAN, zero=0)) == (2.0, 2.0)


def test_the_torchtitan_export_names_the_recipe_it_was_costed_with():
    from calculators.planning.export import export
    text, _ = export("torchtitan", L8B, ClusterSpec(H100, nodes=1), replace(TITAN, fp8_recipe="rowwise"))
    assert 'converters = ["quantize.linear.float8"]' in text and 'recipe_name = "rowwise"' in text
    assert 'filter_fqns = ["output"]' in text and "enable_fsdp_float8_all_gather" not in text
    tensorwise, _ = export("torchtitan", L8B, ClusterSpec(H100, nodes=1), TITAN)
    assert "enable_fsdp_float8_all_gather = true" in tensorwise
    qwen = model_from_name("qwen3-30b-a3b")
    text, _ = export("torchtitan", qwen, ClusterSpec(gpu_from_name("B200"), nodes=1),
                     replace(TITAN, ep=8, fp8_recipe="mxfp8"))
    assert '"quantize.linear.mx", "quantize.grouped_mm.mx"' in text and 'recipe_name = "mxfp8_cublas"' in text
    assert '"output", "router.gate"' in text and 'fqns = ["experts"]' in text
