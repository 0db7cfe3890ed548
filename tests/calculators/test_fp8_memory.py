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
    a B200: counting its activations in bf16 called it out of memory (over the 95% of the GPU a
    Megatron layout may fill)."""
    rows = [r for r in load()[0] if r.source.startswith("megatron-bridge-") and r.model.name == "qwen3-30b-a3b"
            and r.par.precision == "fp8" and r.cluster.gpu.name in ("GB200", "B200") and r.par.mbs == 4]
    assert rows
    for r in rows:
        s = score(r)
        assert s.fits, r.line
        as_bf16 = estimate_memory(r.model, r.cluster, replace(r.par, precision="bf16"))
        assert not as_bf16.fits and as_bf16.total_gib > s.memory_gib, r.line


def test_the_fp8_copy_is_megatrons_only():
    gpu = GPU_PRESETS["H100-80GB"]
    cluster = ClusterSpec(gpu, nodes=1, gpus_per_node=8)
    for framework in ("fsdp2", "deepspeed", "nanotron"):
        par = replace(MEGATRON, framework=framework, zero=1)
        assert gemm_input_bytes(replace(par, precision="fp8")) == 2
        assert estimate_memory(LLAMA, cluster, replace(par, precision="fp8")).total_gib == pytest.approx(
            estimate_memory(LLAMA, cluster, par).total_gib), framework


def _linear_params(model, tp):
    """One layer's weight matrices on one GPU of a tensor-parallel group, counted from the shape:
    q, k, v, o and the SwiGLU's gate, up and down (Llama's TE linears)."""
    h, q, kv = model.hidden, model.q_dim, model.kv_heads * model.head_dim
    return (h * (q + 2 * kv) + q * h + 3 * h * model.ffn) / tp


def _weights_gib(gpu, par, model=LLAMA):
    cluster = ClusterSpec(GPU_PRESETS[gpu], nodes=1, gpus_per_node=8)
    return estimate_memory(model, cluster, par).worst.weights_gib


def test_bf16_weights_under_fp8_add_transformer_engines_cached_fp8_copy():
    """Megatron without --fp8-param-gather keeps bf16 weights, and each Transformer Engine linear
    caches the FP8 weight its first micro-batch casts (data and, on Hopper, its transpose: 2 bytes
    a parameter; 1 on Blackwell) and keeps it from step to step; the router, norms and embeddings have none."""
    par = replace(MEGATRON, dp=2, tp=4, sp=True, zero=0)
    linears = LLAMA.layers * _linear_params(LLAMA, 4) / 2 ** 30
    for gpu, copy in (("H100-80GB", 2), ("B200", 1)):
        bf16 = _weights_gib(gpu, par)
        assert _weights_gib(gpu, replace(par, precision="fp8")) == pytest.approx(bf16 + copy * linears)
    moe = replace(MEGATRON, ep=8, zero=1, precision="fp8")
    cluster = ClusterSpec(GPU_PRESETS["H100-80GB"], nodes=1, gpus_per_node=8)
    routed = estimate_memory(QWEN, cluster, replace(moe, fp8_weights="bf16")).worst.weights_gib - \
        estimate_memory(QWEN, cluster, moe).worst.weights_gib
    e = QWEN.moe
    per_layer = _linear_params(replace(QWEN, ffn=0), 1) + 3 * QWEN.hidden * e.expert_ffn * e.experts / 8
    assert routed == pytest.approx(2 * QWEN.layers * per_layer / 2 ** 30)


def test_fp8_parameters_take_the_quantized_bytes():
    """--fp8-param-gather (fp8_weights fp8, the default from ZeRO 1 on): the weights are Transformer
    Engine's quantized tensors: 2 bytes on Hopper (data and transpose) as bf16's, 1 on Blackwell
    under per-tensor scaling, 2 + 2/32 under MXFP8 (row- and column-wise data and their scales)."""
    par = replace(MEGATRON, dp=2, tp=4, sp=True, zero=1)
    linears = LLAMA.layers * _linear_params(LLAMA, 4) / 2 ** 30
    fp8 = replace(par, precision="fp8")
    assert _weights_gib("H100-80GB", fp8) == pytest.approx(_weights_gib("H100-80GB", par))
    assert _weights_gib("B200", fp8) == pytest.approx(_weights_gib("B200", par) - linears)
    assert _weights_gib("B200", replace(fp8, fp8_recipe="tensorwise")) == pytest.approx(_weights_gib("B200", fp8))
    assert _weights_gib("B200", replace(fp8, fp8_recipe="mxfp8")) == pytest.approx(
        _weights_gib("B200", par) + linears / 16)
    # Megatron-FSDP shards them as it shards the weights
    z3 = replace(fp8, zero=3)
    assert _weights_gib("B200", z3) == pytest.approx(_weights_gib("B200", replace(par, zero=3)) - linears / 2)


def test_fp8_weight_settings_megatron_refuses():
    from calculators.specs.errors import ConfigError
    from calculators.specs.parallel import check_layout
    h100 = ClusterSpec(GPU_PRESETS["H100-80GB"], nodes=1, gpus_per_node=8)
    fp8 = replace(MEGATRON, precision="fp8")
    for par, words in ((replace(fp8, zero=0, fp8_weights="fp8"), "distributed optimizer"),
                       (replace(fp8, zero=1, fp8_recipe="mxfp8"), "Blackwell"),
                       (replace(fp8, zero=3, fp8_weights="bf16"), "Megatron-FSDP"),
                       (replace(fp8, framework="fsdp2", zero=3, fp8_weights="fp8"), "torchao")):
        with pytest.raises(ConfigError, match=words):
            check_layout(LLAMA, h100, par)
    # under bf16 training they mean nothing and change nothing
    assert _weights_gib("H100-80GB", replace(MEGATRON, fp8_weights="bf16", fp8_recipe="mxfp8")) == \
        _weights_gib("H100-80GB", MEGATRON)


def test_the_megatron_export_writes_the_fp8_weights_it_counted():
    """The command the export writes runs what the estimate counted: FP8 parameters
    (--fp8-param-gather) from ZeRO 1 on, bf16 weights with TE's cached copy at ZeRO 0, and the
    recipe (MXFP8 in E4M3 throughout, as Megatron-Bridge's bf16_with_mxfp8_mixed runs it)."""
    from calculators.planning.export import export
    b200 = ClusterSpec(GPU_PRESETS["B200"], nodes=1, gpus_per_node=8)
    fp8 = replace(MEGATRON, precision="fp8", zero=1)
    text = export("megatron", LLAMA, b200, fp8)[0]
    assert "--fp8-format hybrid" in text and "--fp8-recipe delayed" in text and "--fp8-param-gather" in text
    assert "--fp8-param-gather" not in export("megatron", LLAMA, b200, replace(fp8, fp8_weights="bf16"))[0]
    assert "--fp8-param-gather" not in export("megatron", LLAMA, b200, replace(fp8, zero=0))[0]
    mx = export("megatron", LLAMA, b200, replace(fp8, fp8_recipe="mxfp8"))[0]
    assert "--fp8-format e4m3" in mx and "--fp8-recipe mxfp8" in mx


def test_megatron_fsdp_keeps_per_tensor_fp8_parameters_without_their_transpose():
    """Megatron-FSDP makes an FP8 weight's transpose when it gathers the layer for backward and
    frees it with the layer: 1 byte a parameter on Hopper too; MXFP8 keeps both layouts."""
    par = replace(MEGATRON, dp=2, tp=4, sp=True, zero=2)
    linears = LLAMA.layers * _linear_params(LLAMA, 4) / 2 ** 30
    fp8 = replace(par, precision="fp8")
    assert _weights_gib("H100-80GB", fp8) == pytest.approx(_weights_gib("H100-80GB", par) - linears)
    assert _weights_gib("B200", replace(fp8, fp8_recipe="mxfp8")) == pytest.approx(
        _weights_gib("B200", par) + linears / 16)
    assert _weights_gib("H100-80GB", replace(fp8, fp8_recipe="blockwise")) == pytest.approx(
        _weights_gib("H100-80GB", par) + linears * 8 / 128 ** 2)


def test_the_planner_plans_the_fp8_weights_asked():
    """bf16 weights with their cached copy are planned at ZeRO 0 or 1 (not refused at the
    structure's ZeRO 3), FP8 parameters from ZeRO 1 on; one value each; labels name them."""
    from calculators.planning.explain import label
    from calculators.planning.planner import plan
    from calculators.specs.errors import ConfigError
    h100 = ClusterSpec(GPU_PRESETS["H100-80GB"], nodes=1, gpus_per_node=8)
    cached = plan(LLAMA, h100, 4096, 64, {"precision": "fp8", "fp8_weights": "bf16"}).plans
    assert cached and all(p.par.zero <= 1 for p in cached) and max(p.par.dp for p in cached) > 1
    assert "fp8_weights=bf16" in label(cached[0].par)
    params = plan(LLAMA, h100, 4096, 64, {"precision": "fp8", "fp8_weights": "fp8"}).plans
    assert params and all(p.par.zero >= 1 for p in params)
    assert params[0].step.tokens_per_s_per_gpu >= cached[0].step.tokens_per_s_per_gpu * 0.99
    with pytest.raises(ConfigError, match="fp8_recipe takes one value"):
        plan(LLAMA, h100, 4096, 64, {"precision": "fp8", "fp8_recipe": ["tensorwise", "delayed"]})
    assert "fp8=" not in label(replace(MEGATRON, fp8_recipe="mxfp8"))       # a bf16 plan names no FP8 recipe


def test_mxfp8_parameters_gather_through_the_gradient_buffer():
    from calculators.planning.export import export
    b200 = ClusterSpec(GPU_PRESETS["B200"], nodes=1, gpus_per_node=8)
    mx = replace(MEGATRON, precision="fp8", zero=1, fp8_recipe="mxfp8")
    assert "--reuse-grad-buf-for-mxfp8-param-ag" in export("megatron", LLAMA, b200, mx)[0]
    assert "--reuse-grad-buf-for-mxfp8-param-ag" not in export("megatron", LLAMA, b200, replace(mx, zero=3))[0]
