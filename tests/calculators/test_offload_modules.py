"""Megatron's fine-grained activation offloading (`parallel.offload_modules` "expert_fc1+moe_act"):
what each module keeps in host memory, how it combines with recompute, what Megatron refuses,
its copies' time and the flags the export writes."""
from dataclasses import replace

import pytest

from calculators.memory.estimate import estimate_memory
from calculators.memory.offload import kept_on_gpu, offload_bytes, offloaded
from calculators.planning.export import export
from calculators.specs.errors import ConfigError
from calculators.specs.hardware import GPU_PRESETS, ClusterSpec
from calculators.specs.parallel import ParallelConfig, check_layout
from calculators.specs.presets import model_from_name
from calculators.specs.recompute import offload_modules
from calculators.time.step import estimate_step
from validation.stacks import load, score

QWEN = model_from_name("qwen3-30b-a3b")
LLAMA = model_from_name("llama3-8b")
DSV3 = model_from_name("deepseek-v3")
CLUSTER = ClusterSpec(GPU_PRESETS["H100-80GB"], nodes=2, gpus_per_node=8)
PAR = ParallelConfig(dp=16, ep=16, mbs=2, gbs=64, seq=4096, framework="megatron")


def _moved(model, par, moe_layer, mods):
    with_ = replace(par, offload_modules=mods)
    return kept_on_gpu(model, par, moe_layer) - kept_on_gpu(model, with_, moe_layer)


def test_the_list_is_megatrons_modules_each_once():
    assert offload_modules("moe_act+expert_fc1") == ("expert_fc1", "moe_act")      # Megatron's order
    for bad in ("expert_fc1+expert_fc1", "fused_group_mlp", "moe", "<b>", "expert_fc1,moe_act"):
        assert offload_modules(bad) == ()
        with pytest.raises(ConfigError, match="offload_modules must be Megatron's offload modules"):
            ParallelConfig(offload_modules=bad)


def test_the_experts_modules_move_the_dispatched_tokens_and_the_first_gemms_output():
    """expert_fc1: the K x T tokens the first expert GEMM keeps (bf16, 1 byte under FP8);
    moe_act: that GEMM's SwiGLU output (gate and up, bf16), kept by the activation whether it is
    recomputed or not. A dense layer has neither."""
    T, e = PAR.mbs * PAR.seq, QWEN.moe
    fc1 = e.top_k * T * QWEN.hidden
    act = e.top_k * T * 2 * e.expert_ffn
    assert _moved(QWEN, PAR, True, "expert_fc1") == pytest.approx(2 * fc1)
    # under FP8 the GPU keeps the 1-byte copy; offloaded, the GEMM keeps its bf16 input to copy it,
    # but under MXFP8 (experts.py: set_save_original_input)
    fp8 = replace(PAR, precision="fp8", offload_modules="expert_fc1")
    assert offload_bytes(QWEN, fp8, True) == pytest.approx((fc1, 2 * fc1))
    b200 = replace(fp8, fp8_recipe="mxfp8")
    assert offload_bytes(QWEN, b200, True) == pytest.approx((fc1, fc1))
    assert _moved(QWEN, PAR, True, "moe_act") == pytest.approx(2 * act)
    recomputed = replace(PAR, recompute="moe_act+layernorm")
    assert _moved(QWEN, recomputed, True, "expert_fc1+moe_act") == pytest.approx(2 * fc1 + 2 * act)
    assert _moved(LLAMA, replace(PAR, ep=1), False, "expert_fc1+moe_act") == 0


def test_attention_modules_and_what_they_share():
    """core_attn moves q, k and v; the attention output it keeps is attn_proj's input too, so only
    the two together free it; the fused norm-linear's input and output go with qkv_linear; a dense
    layer's norms are fused (attn_norm, mlp_norm: nothing). Tensors under 1M elements stay (the
    log-sum-exp of 8k tokens x 32 heads, the norms' rstd)."""
    par = replace(PAR, ep=1)
    T, h = par.mbs * par.seq, LLAMA.hidden
    qkv = T * (LLAMA.q_dim + 2 * LLAMA.kv_dim)
    assert T * LLAMA.heads < 2 ** 20
    assert _moved(LLAMA, par, False, "core_attn") == pytest.approx(2 * qkv)
    assert _moved(LLAMA, par, False, "core_attn+attn_proj") - _moved(LLAMA, par, False, "core_attn") == \
        pytest.approx(2 * T * LLAMA.q_dim)
    assert _moved(LLAMA, par, False, "qkv_linear") == pytest.approx(T * 4 * h)
    assert _moved(LLAMA, par, False, "attn_norm+mlp_norm") == 0
    # the attention core recomputed (Megatron's selective) runs outside the offloading: only the
    # output, which attn_proj alone then keeps, moves
    sel = replace(par, recompute="selective")
    assert _moved(LLAMA, sel, False, "core_attn+attn_proj") == pytest.approx(2 * T * LLAMA.q_dim)
    assert any("core_attn" in w for w in check_layout(LLAMA, CLUSTER, replace(sel, offload_modules="core_attn")))
    # MLA: with mla_up_proj recomputed, q, k and v are discarded after the core: the lse (1M
    # elements: 8k tokens x 128 heads) moves, q, k and v are copied but freed anyway
    mla = replace(PAR, recompute="mla_up_proj")
    assert T * DSV3.heads == 2 ** 20
    assert _moved(DSV3, mla, True, "core_attn") == pytest.approx(4 * T * DSV3.heads)
    assert offload_bytes(DSV3, replace(mla, offload_modules="core_attn"), True)[1] > 4 * T * DSV3.heads
    assert _moved(DSV3, PAR, True, "attn_norm") == pytest.approx(2 * T * DSV3.hidden)
    # the MLA norm's output, which layernorm recompute frees already, is not freed twice
    ln = replace(PAR, recompute="layernorm")
    assert _moved(DSV3, ln, True, "qkv_linear") == pytest.approx(_moved(DSV3, PAR, True, "qkv_linear")
                                                                 - 2 * T * DSV3.hidden)


def test_nothing_moves_under_full_recompute_and_the_gpu_holds_one_layer_back():
    full = replace(PAR, recompute="full", offload_modules="expert_fc1+moe_act")
    assert offloaded(QWEN, full, True) == 0
    assert any("frees nothing" in w for w in check_layout(QWEN, CLUSTER, full))
    assert offloaded(QWEN, replace(full, recompute="layer:2"), True) == 0
    assert kept_on_gpu(QWEN, replace(full, recompute="layer:2"), True) < kept_on_gpu(
        QWEN, replace(full, recompute="layer:2", offload_modules=""), True)      # the layer that keeps all
    par = replace(PAR, pp=2, dp=8, ep=8, gbs=64)            # 4 micro-batches: rank 0 holds 2 in flight
    plain = estimate_memory(QWEN, CLUSTER, par).stages[0]
    moved = estimate_memory(QWEN, CLUSTER, replace(par, offload_modules="expert_fc1+moe_act")).stages[0]
    one = offloaded(QWEN, replace(par, offload_modules="expert_fc1+moe_act"), True)
    # each of the 2 x 24 layer-micro-batches in flight keeps `one` less; the layer in backward
    # brings its own back
    assert (plain.activations_gib - moved.activations_gib) * 2 ** 30 == pytest.approx((2 * 24 - 1) * one)


def test_what_megatron_refuses():
    for par, words in ((replace(PAR, offload_modules="attn_proj"), "offload core_attn with it"),
                       (replace(PAR, offload_modules="moe_act", recompute="moe"), "reruns whole"),
                       (replace(PAR, offload_modules="moe_act", offload_layers=2), "not both"),
                       (replace(PAR, offload_modules="moe_act", framework="fsdp2", zero=3), "has none")):
        with pytest.raises(ConfigError, match=words):
            check_layout(QWEN, CLUSTER, par)
    assert any("offload nothing" in w for w in check_layout(LLAMA, CLUSTER, replace(PAR, ep=1,
                                                                                    offload_modules="moe_act")))


def test_the_copies_cost_time_where_the_host_link_cannot_keep_up_and_the_export_says_them():
    """The copies run beside the layer's compute at the host link: over an H100's PCIe they show
    in the step, over a GB200's NVLink-C2C (193 GB/s) less."""
    mods = "expert_fc1+moe_act"
    times = {}
    for gpu in ("H100-80GB", "GB200"):
        cluster = ClusterSpec(GPU_PRESETS[gpu], nodes=4, gpus_per_node=4)
        par = replace(PAR, mbs=4)
        times[gpu] = [estimate_step(QWEN, cluster, replace(par, offload_modules=m)).time_s for m in ("", mods)]
        assert times[gpu][1] >= times[gpu][0]
    assert times["H100-80GB"][1] / times["H100-80GB"][0] > times["GB200"][1] / times["GB200"][0]
    text = export("megatron", QWEN, CLUSTER, replace(PAR, offload_modules="moe_act+expert_fc1"))[0]
    assert "--fine-grained-activation-offloading" in text and "--offload-modules expert_fc1 moe_act" in text


def test_the_modelzoo_mxfp8_run_that_needed_offloading_comes_within_its_gpu():
    """Megatron-MoE-ModelZoo's Qwen3-235B MXFP8 run on GB200 (mbs 3, pp 4 x vpp 6) needs
    --offload-modules expert_fc1 moe_act, its README says: without it the estimate holds over
    250 GiB a GPU, with it within the 95% of the GPU's 185 GiB that the fit rule allows."""
    rows = [r for r in load()[0] if r.source == "megatron-moe-modelzoo-qwen3-gb200" and r.par.offload_modules]
    assert len(rows) == 1
    r = rows[0]
    assert r.par.offload_modules == "expert_fc1+moe_act"
    s = score(r)
    assert s.fits and s.memory_gib < r.cluster.gpu.memory_gib
    assert not score(replace(r, par=replace(r.par, offload_modules=""))).fits
    assert estimate_memory(r.model, r.cluster, replace(r.par, offload_modules="")).total_gib > 250


def test_the_planner_plans_the_offload_asked_and_refuses_a_bad_list():
    from calculators.planning.planner import plan
    plans = plan(QWEN, CLUSTER, 4096, 256, {"offload_modules": "expert_fc1+moe_act", "recompute": ["none"]}).plans
    assert plans and all(p.par.offload_modules == "expert_fc1+moe_act" for p in plans)
    for bad in ("moe", ["expert_fc1", "moe_act"], [{}]):
        with pytest.raises(ConfigError, match="offload_modules"):
            plan(QWEN, CLUSTER, 4096, 256, {"offload_modules": bad})


def test_a_group_right_after_another_waits_for_its_reload():
    """Megatron brings a group back once the group after it has finished its backward and waits
    for it as its own starts: expert_fc1's reload, right after moe_act's backward, is waited for;
    moe_act's hides behind the compute before it (the experts' second GEMM)."""
    from calculators.memory.offload import offload_parts, reload_split
    par = replace(PAR, offload_modules="expert_fc1+moe_act")
    parts = offload_parts(QWEN, par, True)
    assert list(parts) == ["expert_fc1", "moe_act"]
    assert reload_split(parts) == (parts["moe_act"][1], parts["expert_fc1"][1])
    alone = offload_parts(QWEN, replace(PAR, offload_modules="expert_fc1"), True)
    assert reload_split(alone) == (alone["expert_fc1"][1], 0.0)
    # the step waits for it: more time than the same bytes hidden would cost
    cluster = ClusterSpec(GPU_PRESETS["H100-80GB"], nodes=4, gpus_per_node=4)
    times = [estimate_step(QWEN, cluster, replace(PAR, mbs=4, offload_modules=m)).time_s
             for m in ("", "moe_act", "expert_fc1+moe_act")]
    assert times[0] <= times[1] < times[2]
