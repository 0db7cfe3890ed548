"""What FP8 changes in the activation memory, by stack: Transformer Engine (Megatron) keeps each
linear's input as the FP8 copy it cast (1 byte), torchao's float8 is counted in bf16;
and which norms Megatron's "layernorm" recompute reruns."""
from dataclasses import replace

import pytest

from calculators.memory.activations import gemm_input_bytes, layer_activations, module_freed, saved_per_layer
from calculators.memory.estimate import estimate_memory
from calculators.specs.hardware import GPU_PRESETS, ClusterSpec
from calculators.specs.parallel import ParallelConfig
from calculators.specs.presets import model_from_name
from validation.stacks import load, score

LLAMA = model_from_name("llama3-8b")
QWEN = model_from_name("qwen3-30b-a3b")
DSV3 = model_from_name("deepseek-v3")
MEGATRON = ParallelConfig(dp=8, mbs=2, gbs=64, seq=4096, framework="megatron")


def _fp8_saving(model, par, moe_layer):
    bf16 = layer_activations(model, par, moe_layer).total
    return bf16 - layer_activations(model, replace(par, precision="fp8"), moe_layer).total


def test_te_fp8_keeps_one_byte_of_each_linear_input_only_that_linear_keeps():
    """A dense layer: the ln_out of the fused norm-linears before qkv and fc1 (T x h each) and
    fc2's input (T x ffn) drop from 2 bytes to 1; the attention output stays bf16 (the fused
    attention keeps it, and the output projection keeps that tensor, not a copy)."""
    T = MEGATRON.mbs * MEGATRON.seq
    assert gemm_input_bytes(replace(MEGATRON, precision="fp8")) == 1 and gemm_input_bytes(MEGATRON) == 2
    assert _fp8_saving(LLAMA, MEGATRON, False) == pytest.approx(T * (2 * LLAMA.hidden + LLAMA.ffn))
    with_tp = replace(MEGATRON, dp=2, tp=4, sp=True)       # norms hold T/tp tokens, fc2's input T x ffn/tp
    assert _fp8_saving(LLAMA, with_tp, False) == pytest.approx(T * (2 * LLAMA.hidden + LLAMA.ffn) / 4)


def test_te_fp8_in_a_moe_layer_keeps_the_dispatched_tokens_and_fc2_inputs_in_fp8():
    """A MoE layer: qkv's ln_out (T x h), the K x T dispatched tokens fc1 keeps (x h) and the
    K x T fc2 inputs (x expert ffn); the pre-MLP norm's output stays bf16 (the router keeps it)."""
    par = replace(MEGATRON, ep=8)
    T, e = par.mbs * par.seq, QWEN.moe
    assert _fp8_saving(QWEN, par, True) == pytest.approx(T * QWEN.hidden + e.top_k * T * (QWEN.hidden + e.expert_ffn))


def test_torchao_float8_is_counted_in_bf16_as_its_runs_measure():
    """torchao's float8 is counted in bf16: the published torchtitan runs use as much
    memory in FP8 as in bf16 (within 2%, each table's own rows), and so does the model."""
    fsdp = ParallelConfig(dp=8, mbs=1, gbs=8, seq=8192, framework="fsdp2", zero=3, compile=True, recompute="op_sac")
    assert _fp8_saving(LLAMA, fsdp, False) == 0
    runs = [r for r in load()[0] if r.par.framework == "fsdp2" and r.memory_gib and r.source.startswith("torchao")]
    tables = {(r.source, r.cluster.gpu.name, r.model.name) for r in runs}
    assert len(tables) >= 4
    for table in tables:
        mine = [r for r in runs if (r.source, r.cluster.gpu.name, r.model.name) == table]
        bf16 = [r.memory_gib for r in mine if r.par.precision == "bf16"]
        fp8 = [r.memory_gib for r in mine if r.par.precision == "fp8"]
        assert len(bf16) == 1 and fp8 and max(abs(m / bf16[0] - 1) for m in fp8) < 0.02, table


def test_layernorm_recompute_reruns_only_the_norms_megatron_keeps_separate():
    """Megatron fuses a dense GQA layer's norms into the linears after them, so "layernorm" frees
    nothing there; a MoE layer's pre-MLP norm and MLA's input norm are modules of their own.
    Other frameworks' lists take both norms."""
    assert module_freed(LLAMA, MEGATRON, False)["layernorm"] == 0
    moe = replace(MEGATRON, ep=8)
    T = moe.mbs * moe.seq
    assert module_freed(QWEN, moe, True)["layernorm"] == pytest.approx(T * (2 * QWEN.hidden + 4))
    assert module_freed(DSV3, moe, True)["layernorm"] == pytest.approx(2 * T * (2 * DSV3.hidden + 4))
    assert module_freed(LLAMA, replace(MEGATRON, framework="deepspeed"), False)["layernorm"] > 0
    # under FP8 the linears reading a recomputed norm keep its output, so the whole output is freed
    fp8 = replace(moe, precision="fp8")
    assert module_freed(QWEN, fp8, True)["layernorm"] == module_freed(QWEN, moe, True)["layernorm"]
    for r in ("layernorm", "moe_act", "moe_act+layernorm"):
        assert saved_per_layer(QWEN, replace(fp8, recompute=r), True) < saved_per_layer(QWEN, fp8, True)


def test_moe_act_under_fp8_frees_the_one_byte_fc2_input():
    fp8 = replace(MEGATRON, ep=8, precision="fp8")
    T, e = fp8.mbs * fp8.seq, QWEN.moe
    assert module_freed(QWEN, fp8, True)["moe_act"] == pytest.approx(e.top_k * T * e.expert_ffn)


def test_nvidias_fp8_recipes_fit_where_a_bf16_count_did_not():
    """Megatron-Bridge's Qwen3-30B-A3B FP8 recipe (mbs 4, no recompute, 8 GPUs) runs on a GB200 and
    a B200: counting its activations in bf16 put it over the GPU's memory."""
    rows = [r for r in load()[0] if r.source.startswith("megatron-bridge-") and r.model.name == "qwen3-30b-a3b"
            and r.par.precision == "fp8" and r.cluster.gpu.name in ("GB200", "B200") and r.par.mbs == 4]
    assert rows
    for r in rows:
        s = score(r)
        assert s.memory_gib < r.cluster.gpu.memory_gib, r.line
        as_bf16 = estimate_memory(r.model, r.cluster, replace(r.par, precision="bf16")).total_gib
        assert as_bf16 > r.cluster.gpu.memory_gib > s.memory_gib


def test_the_fp8_copy_is_megatrons_only():
    gpu = GPU_PRESETS["H100-80GB"]
    cluster = ClusterSpec(gpu, nodes=1, gpus_per_node=8)
    for framework in ("fsdp2", "deepspeed", "nanotron"):
        par = replace(MEGATRON, framework=framework, zero=1)
        assert gemm_input_bytes(replace(par, precision="fp8")) == 2
        assert estimate_memory(LLAMA, cluster, replace(par, precision="fp8")).total_gib == pytest.approx(
            estimate_memory(LLAMA, cluster, par).total_gib), framework
