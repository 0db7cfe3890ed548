"""Step time: the contract's numbers agree with each other and move the right way."""
import json
import math
import re
from dataclasses import replace

import pytest

from calculators.time import flops as fl
from calculators.time.compute import gemm_terms, gemm_time, layer_time
from calculators.specs.errors import ConfigError
from calculators.specs.frameworks import grad_bucket_bytes
from calculators.specs.hardware import ClusterSpec, gpu_from_name
from calculators.specs.parallel import ParallelConfig, check_layout
from calculators.specs.presets import model_from_name
from calculators.time.profiles import default_profile, load_profile, profile_from_dict, save_profile
from calculators.scenario import evaluate
from calculators.time.step import closed_step_time, estimate_step, stage_costs

H100 = gpu_from_name("H100-80GB")
PROF = default_profile("H100-80GB")
L8B = model_from_name("llama3-8b")


def _step(**kw):
    nodes = kw.pop("nodes", 1)
    par = ParallelConfig(**{"gbs": 64, "seq": 4096, **kw})
    return estimate_step(L8B, ClusterSpec(H100, nodes=nodes), par)


def test_outputs_agree_with_each_other():
    s = _step(dp=2, tp=2, pp=2, sp=True, zero=1, recompute="selective")
    tokens = 64 * 4096
    assert s.tokens_per_s_per_gpu == pytest.approx(tokens / s.time_s / 8)
    assert s.mfu == pytest.approx(s.tokens_per_s_per_gpu * fl.model_flops_per_token(L8B, 4096) / 989.4e12)
    assert s.hfu > s.mfu
    assert s.tflops_per_gpu == pytest.approx(s.mfu * 989.4)
    # the breakdown accounts for the step on the slowest rank (hidden communication excluded)
    b = s.breakdown
    shown = sum(v for k, v in b.items() if not k.endswith("_hidden"))
    assert shown == pytest.approx(s.time_s)
    assert min(b.values()) >= 0
    assert 0 < s.mfu < PROF.gemm_fraction


def test_more_microbatches_shrink_the_bubble():
    few, many = _step(dp=2, pp=4, gbs=8), _step(dp=2, pp=4, gbs=128)
    # (p-1)/m = 3/4 with equal stages; the last stage (logits) is the busiest, so it idles less
    assert 0.5 < few.bubble_fraction <= 0.75
    assert many.bubble_fraction < few.bubble_fraction / 8
    assert many.tokens_per_s_per_gpu > few.tokens_per_s_per_gpu
    inter = _step(dp=2, pp=4, vpp=2, schedule="interleaved", gbs=8)
    assert inter.bubble_fraction < few.bubble_fraction


def test_recompute_costs_time_and_fp8_speeds_gemms_at_the_cost_of_its_casts():
    base, full = _step(dp=8), _step(dp=8, recompute="full")
    assert full.time_s > base.time_s * 1.2 and full.breakdown["recompute"] > 0
    par = ParallelConfig(mbs=1, seq=4096, gbs=8)
    bf16 = layer_time(L8B, par, False, H100, PROF)
    fp8 = layer_time(L8B, replace(par, precision="fp8"), False, H100, PROF)
    # the GEMMs run on the FP8 cores; attention stays in bf16; the casts add memory-bound passes
    # (elementwise.fp8_casts), far less than the GEMMs save
    assert fp8.gemm < 0.6 * bf16.gemm and fp8.attention == bf16.attention
    assert bf16.memory_bound < fp8.memory_bound < bf16.memory_bound + 0.2 * (bf16.gemm - fp8.gemm)


def test_gemm_time_is_its_math_plus_streaming_its_operands():
    """A GEMM takes its FLOPs at gemm_fraction of the peak (less where its smallest dimension is
    small) plus its operands' and result's bytes at hbm_fraction of HBM: a large square one is
    math-bound; a TP shard's 128-wide reduction dimension spends longer writing its output than a
    large GEMM's rate would take for its math."""
    hbm = 3.35e12 * PROF.hbm_fraction
    s = 8192
    big = 2 * s**3 / gemm_time(s, s, s, H100, PROF)
    math_s = 2 * s**3 / (989.4e12 * PROF.gemm_fraction * s / (s + PROF.gemm_half_dim))
    assert big == pytest.approx(2 * s**3 / (math_s + 2 * 3 * s * s / hbm))
    assert big > 0.9 * 989.4e12 * PROF.gemm_fraction
    small = 2 * s * 512 * s / gemm_time(s, 512, s, H100, PROF)
    assert big > 1.1 * small
    m, n, k = 65536, 2048, 128
    math_s, hbm_s = gemm_terms(m, n, k, H100, PROF)
    assert hbm_s == pytest.approx(2 * (m * k + k * n + m * n) / hbm)
    assert hbm_s > 1.5 * 2 * m * n * k / (989.4e12 * PROF.gemm_fraction)    # more than its math at full rate
    assert gemm_time(m, n, k, H100, PROF, count=3) == pytest.approx(3 * (math_s + hbm_s))


def test_tp_across_nodes_is_slower_than_inside():
    inside = _step(nodes=2, tp=8, dp=2, sp=True)
    across = _step(nodes=2, tp=16 // 2, dp=2, sp=True)
    assert inside.time_s == pytest.approx(across.time_s)
    wide = estimate_step(model_from_name("llama3-70b"), ClusterSpec(H100, nodes=2),
                         ParallelConfig(tp=16, dp=1, sp=True, gbs=16, seq=4096))
    narrow = estimate_step(model_from_name("llama3-70b"), ClusterSpec(H100, nodes=2),
                           ParallelConfig(tp=8, pp=2, sp=True, gbs=16, seq=4096))
    assert wide.breakdown["tp_exposed"] > 3 * narrow.breakdown["tp_exposed"]


def test_profiles_load_from_files_and_report_bad_keys(tmp_path):
    path = tmp_path / "cluster.json"
    save_profile(replace(PROF, name="mine", fabric_gbps=100), path)
    assert load_profile(path).fabric_gbps == 100
    assert profile_from_dict({"gemm_fraction": 0.5}).gemm_fraction == 0.5
    with pytest.raises(ConfigError, match="unknown key 'gemm'"):
        profile_from_dict({"gemm": 0.5})
    with pytest.raises(ConfigError, match="overlap.dp"):
        profile_from_dict({"overlap": {"dp": 2}})
    partial = tmp_path / "partial.json"                 # a file of a few knobs keeps its GPU's others
    partial.write_text('{"host_ms_per_layer": 2.0}')
    b200 = load_profile(partial, default_profile("B200"))
    assert b200.host_ms_per_layer == 2.0 and b200.attention_fraction == default_profile("B200").attention_fraction
    on_b200 = {"model": {"preset": "llama3-8b"}, "parallel": {"dp": 8, "gbs": 64}}
    assert evaluate({**on_b200, "hardware": {"gpu": "B200", "profile": str(partial)}})["step"]["time_s"] == \
        evaluate({**on_b200, "hardware": {"gpu": "B200", "profile": {"host_ms_per_layer": 2.0}}})["step"]["time_s"]
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ConfigError, match="not valid JSON"):
        load_profile(bad)
    # a scenario can name a file or override knobs inline; slower kernels, slower step
    sc = {"model": {"preset": "llama3-8b"}, "hardware": {"gpu": "H100-80GB"}, "parallel": {"dp": 8, "gbs": 64}}
    fast = evaluate(sc)["step"]["time_s"]
    slow = evaluate({**sc, "hardware": {"gpu": "H100-80GB", "profile": {"gemm_fraction": 0.25}}})["step"]["time_s"]
    from_file = evaluate({**sc, "hardware": {"gpu": "H100-80GB", "profile": str(path)}})["step"]["time_s"]
    assert slow > 1.5 * fast and from_file == pytest.approx(fast)
    json.dumps(evaluate(sc))                                   # the answer is plain JSON


def test_moe_dense_gradients_reduce_over_all_data_ranks():
    """Mixtral on 8 GPUs with ep=8: each expert lives on one GPU (no expert sync), but attention,
    norms, router and embeddings are replicated on all 8 and their gradients all-reduce over 8."""
    from calculators.time.comm import Group, collective_time
    from calculators.memory.estimate import kind_params
    mix = model_from_name("mixtral-8x7b")
    par = ParallelConfig(dp=8, ep=8, zero=0, gbs=64, seq=4096)
    cluster = ClusterSpec(H100, nodes=1)
    dense_per_layer, _ = kind_params(mix, par, True)
    dense = mix.layers * dense_per_layer + 2 * mix.vocab * mix.hidden        # untied input and output embeddings
    buckets = math.ceil(4 * dense / grad_bucket_bytes(par.framework, 0, 8, 4))     # each pays the latency
    expected = buckets * collective_time("all_reduce", 4 * dense / buckets, Group(8, 8, 1), cluster, PROF)
    b = estimate_step(mix, cluster, par).breakdown
    assert b["dp_exposed"] + b["dp_hidden"] == pytest.approx(expected)
    assert expected > 0.01                       # 1.6B replicated parameters: tens of ms on NVLink


def test_zero3_gathers_are_shown_even_when_hidden():
    b = _step(dp=8, zero=3).breakdown
    assert b["dp_exposed"] + b["dp_hidden"] > _step(dp=8, zero=1).breakdown["dp_hidden"] > 0


def test_small_microbatches_on_wide_tp_are_host_bound():
    """A layer's forward and backward cannot finish before the host has issued them: at tp 8 and
    mbs 1 the 8B model's GPU work per layer is under profile.host_ms_per_layer, so the step costs
    at least layers x host per micro-batch, the wait is its own breakdown entry, and a larger
    micro-batch gets the GPU's speed back; without the floor the wait vanishes."""
    m = 32
    host = PROF.host_ms_per_layer * 1e-3
    small = _step(tp=8, sp=True, mbs=1, gbs=m)
    assert small.time_s >= m * L8B.layers * host
    assert small.breakdown["host_bound"] > 0.1 * small.time_s
    big = _step(tp=8, sp=True, mbs=8, gbs=8 * m)
    assert big.breakdown["host_bound"] == 0
    assert big.tokens_per_s_per_gpu > 1.3 * small.tokens_per_s_per_gpu
    par = ParallelConfig(tp=8, sp=True, mbs=1, gbs=m, seq=4096)
    free = estimate_step(L8B, ClusterSpec(H100, nodes=1), par, replace(PROF, host_ms_per_layer=0.0))
    assert free.breakdown["host_bound"] == 0 and free.time_s < small.time_s
    shown = sum(v for k, v in small.breakdown.items() if not k.endswith("_hidden"))
    assert shown == pytest.approx(small.time_s)
    with pytest.raises(ConfigError, match="host_ms_per_layer"):
        profile_from_dict({"host_ms_per_layer": -1})


def test_gradient_buckets_and_zero1_gathers_pay_latency_each():
    """nanotron reduces gradients in 25 MB buckets and its ZeRO-1 gathers the updated weights
    tensor by tensor: on 256 GPUs every one of those collectives pays its latency (an all-gather
    across 32 nodes: 31 inter-node steps), so the sync costs more than one collective of the same
    bytes, and ZeRO-1's gathers cost at least one latency per tensor (146 for the 1.34B model)."""
    from calculators.time.comm import collective_time, group
    from calculators.memory.estimate import kind_params
    m = model_from_name("nanotron-1.34b")
    cluster = ClusterSpec(H100, nodes=32)
    z0, z1 = (ParallelConfig(dp=256, zero=z, mbs=1, gbs=256, seq=4096, framework="nanotron") for z in (0, 1))
    dense = m.layers * kind_params(m, z0, False)[0] + m.vocab * m.hidden
    one = collective_time("all_reduce", 4 * dense, group("dp", z0, cluster), cluster, PROF)
    b0, b1 = (estimate_step(m, cluster, z, PROF).breakdown for z in (z0, z1))
    assert b0["dp_exposed"] + b0["dp_hidden"] > one + 100 * 2 * 31 * PROF.latency_us["inter"] * 1e-6
    tensors = m.layers * (7 + 2) + 2            # q k v o gate up down and 2 norms per layer; embedding, norm
    assert b1["dp_exposed"] > tensors * 31 * PROF.latency_us["inter"] * 1e-6


def test_tp_overlap_hides_all_but_one_ring_step():
    """Megatron/TE's tp_comm_overlap pipelines each all-gather and reduce-scatter with its GEMM in
    tp ring steps: at most (tp-1)/tp of the TP traffic hides, and never more than the layer's
    GEMMs last; it needs sequence parallelism. Off, in a framework that overlaps nothing
    (torchtitan's DTensor TP), nothing hides (overlap["tp"] = 0)."""
    from calculators.time.layercomm import tp_hidden as _tp_hidden
    base = dict(tp=8, sp=True, mbs=2, gbs=64)
    off, on = _step(**base, framework="fsdp2"), _step(**base, tp_overlap=True)
    assert off.breakdown.get("tp_hidden", 0) == 0 and on.breakdown["tp_hidden"] > 0
    total = off.breakdown["tp_exposed"]                   # the same collectives, all exposed
    assert on.breakdown["tp_exposed"] == pytest.approx(total - on.breakdown["tp_hidden"])
    assert on.breakdown["tp_exposed"] >= total / 8 * (1 - 1e-9)
    assert on.time_s < _step(**base).time_s
    par = ParallelConfig(tp=8, sp=True, tp_overlap=True)
    assert _tp_hidden(par, 1.0, 10.0, PROF) == pytest.approx(7 / 8)      # GEMMs long: one step of 8 shows
    assert _tp_hidden(par, 1.0, 0.25, PROF) == pytest.approx(0.25)       # GEMMs short: they bound it
    with pytest.raises(ConfigError, match="tp_overlap"):
        evaluate({"model": {"preset": "llama3-8b"}, "hardware": {"gpu": "H100-80GB", "nodes": 1},
                  "parallel": {"tp": 8, "tp_overlap": True, "gbs": 8}})


def test_column_parallel_backward_gathers_again_and_hides_behind_its_gemms():
    """Megatron's and nanotron's column-parallel linears keep their input sharded and all-gather
    it again in backward beside the input-gradient GEMM, then reduce-scatter that gradient beside
    the weight-gradient GEMM: the backward moves 4 all-gathers and 2 reduce-scatters per layer, of
    which each column group hides min(collective, its GEMM); torchtitan's and DeepSpeed's TP wait
    on their 2 and 2. Inside a node the overlap wins time; across nodes the extra all-gathers
    cost more than their GEMMs can hide."""
    from calculators.memory.activations import tokens
    from calculators.time.comm import collective_time, group
    from calculators.time.layercomm import layer_comm as _layer_comm
    for nodes, tp in ((1, 8), (2, 16)):
        cluster = ClusterSpec(H100, nodes=nodes)
        par = ParallelConfig(tp=tp, sp=True, mbs=2, gbs=64, seq=4096, dp=8 * nodes // tp)
        act = 2 * tokens(par) * L8B.hidden
        ag, rs = (collective_time(op, act, group("tp", par, cluster), cluster, PROF)
                  for op in ("all_gather", "reduce_scatter"))
        lt = layer_time(L8B, par, False, H100, PROF)
        assert len(lt.column_gemms) == 2 and all(c > 0 for c in lt.column_gemms)
        fwd, bwd, hf, hb = _layer_comm(L8B, par, cluster, PROF, False, lt)["tp"]
        assert fwd == pytest.approx(2 * (ag + rs)) and bwd == pytest.approx(4 * ag + 2 * rs) and hf == 0
        assert bwd * hb == pytest.approx(sum(min(ag, c) + min(rs, c) for c in lt.column_gemms))
        plain = replace(par, framework="fsdp2")
        plain_lt = layer_time(L8B, plain, False, H100, PROF)
        fwd2, bwd2, _, hb2 = _layer_comm(L8B, plain, cluster, PROF, False, plain_lt)["tp"]
        assert bwd2 == pytest.approx(2 * (ag + rs)) and hb2 == 0
        exposed, exposed_plain = bwd * (1 - hb), bwd2
        assert (exposed < exposed_plain) if nodes == 1 else (exposed > exposed_plain)


def test_fp8_tp_gathers_go_in_fp8_and_async_tp_pipelines_the_forward_only():
    """With FP8, Transformer Engine (Megatron) and torchao's float8 TP (torchtitan) quantize before
    sequence parallelism's all-gathers: those move a byte an element (MXFP8 a scale per 32 more),
    the reduce-scatters stay bf16; bf16 and DeepSpeed gather bf16. torchtitan's async TP hides the
    forward's collectives and a recomputed forward's; the backward's wait as without it, where
    Megatron's pipeline too."""
    from calculators.memory.activations import tokens
    from calculators.specs.fp8 import tp_gather_bytes
    from calculators.time.comm import collective_time, group
    from calculators.time.layercomm import layer_comm as _layer_comm
    cluster = ClusterSpec(H100, nodes=1)
    base = ParallelConfig(tp=8, sp=True, mbs=2, gbs=64, seq=4096, dp=1, precision="fp8")
    assert tp_gather_bytes(base) == 1.0 and tp_gather_bytes(replace(base, fp8_recipe="mxfp8")) == 1 + 1 / 32
    assert tp_gather_bytes(replace(base, framework="fsdp2")) == 1.0
    assert tp_gather_bytes(replace(base, precision="bf16")) == 2.0
    assert tp_gather_bytes(replace(base, framework="deepspeed", sp=False)) == 2.0
    act, g = 2 * tokens(base) * L8B.hidden, group("tp", base, cluster)
    ag, rs = collective_time("all_gather", act / 2, g, cluster, PROF), collective_time("reduce_scatter", act, g,
                                                                                      cluster, PROF)
    lt = layer_time(L8B, base, False, H100, PROF)
    assert _layer_comm(L8B, base, cluster, PROF, False, lt)["tp"][0] == pytest.approx(2 * (ag + rs))
    for recompute, again in (("none", 0.0), ("full", 1.0)):
        titan = replace(base, framework="fsdp2", tp_overlap=True, recompute=recompute)
        mega = replace(base, tp_overlap=True, recompute=recompute)
        _, _, hf, hb = _layer_comm(L8B, titan, cluster, PROF, False, layer_time(L8B, titan, False, H100, PROF))["tp"]
        _, _, mf, mb = _layer_comm(L8B, mega, cluster, PROF, False, layer_time(L8B, mega, False, H100, PROF))["tp"]
        assert hf > 0 and hb == pytest.approx((again * hf + PROF.overlap["tp"]) / (1 + again)) and mb == mf
        assert hb < mb
    # torchtitan's op-level SAC saves no all-gather's output: the backward gathers the inputs again
    sac = replace(base, framework="fsdp2", recompute="op_sac")
    sac_lt = layer_time(L8B, sac, False, H100, PROF)
    plain_titan = replace(sac, recompute="none")
    _, b_sac, _, _ = _layer_comm(L8B, sac, cluster, PROF, False, sac_lt)["tp"]
    _, b_none, _, _ = _layer_comm(L8B, plain_titan, cluster, PROF, False, sac_lt)["tp"]
    assert b_sac == pytest.approx(b_none + 2 * ag)
    # Megatron without tp_overlap: the backward all-gathers its saved input shard again, in FP8 too
    plain = replace(base, recompute="none")
    _, bwd, _, _ = _layer_comm(L8B, plain, cluster, PROF, False, lt)["tp"]
    assert bwd == pytest.approx(4 * ag + 2 * rs)
    # DeepSpeed has no TP pipelining: tp_overlap changes nothing, and check_layout says so
    ds = replace(base, framework="deepspeed", precision="bf16", zero=1)
    ds_lt = layer_time(L8B, ds, False, H100, PROF)
    assert _layer_comm(L8B, replace(ds, tp_overlap=True), cluster, PROF, False, ds_lt)["tp"] == \
        _layer_comm(L8B, ds, cluster, PROF, False, ds_lt)["tp"]
    assert any("tp_overlap" in w for w in check_layout(L8B, cluster, replace(ds, tp_overlap=True)))


def test_megatron_interleaved_sends_do_not_hold_their_sender():
    """Megatron's training arguments default overlap_p2p_comm to true and switch it off for every
    schedule but the interleaved one: there the sends run beside compute, elsewhere (and in
    nanotron) the sender waits for them."""
    from calculators.specs.overlap import p2p_overlapped
    from calculators.time.step import stage_costs
    assert p2p_overlapped("megatron", "interleaved") and not p2p_overlapped("megatron", "1f1b")
    assert not p2p_overlapped("nanotron", "interleaved")
    cluster = ClusterSpec(H100, nodes=2)
    par = ParallelConfig(dp=2, tp=2, pp=4, vpp=2, sp=True, mbs=1, gbs=32, seq=4096, schedule="interleaved",
                         attention="fa2")                  # the same kernel (Megatron's default is cuDNN)
    from calculators.specs.frameworks import gemm_scale
    gpu_only = replace(PROF, host_ms_per_layer=0.0)      # nanotron's host differs too (host_scale)
    # and its GEMMs' rate in a step (gemm_scale): the same rate for both here
    nanotron_gpu = replace(gpu_only, gemm_fraction=gpu_only.gemm_fraction / gemm_scale("nanotron"))
    base = stage_costs(L8B, cluster, replace(par, framework="megatron"), gpu_only)
    blocked = stage_costs(L8B, cluster, replace(par, framework="nanotron"), nanotron_gpu)
    assert base.p2p > 0 and blocked.f[0] == pytest.approx(base.f[0] + base.p2p)


def test_nanotrons_host_floor_rises_only_where_its_pipeline_or_tp_crosses_nodes():
    """frameworks.host_scale: nanotron's host needs tp_per_node ** b times its one-node issue
    time per layer (b = NANOTRON_CROSS_NODE_PP_HOST) when its pipeline crosses nodes with TP, and
    tp_nodes times when a TP group spans nodes (the two multiply); one node, no TP, or another
    framework: as profiled."""
    from calculators.specs.frameworks import NANOTRON_CROSS_NODE_PP_HOST as beta
    from calculators.specs.frameworks import host_scale
    from calculators.time.step import stage_costs
    assert host_scale("nanotron", 4, 1, True) == pytest.approx(4 ** beta)
    assert host_scale("nanotron", 8, 2, True) == pytest.approx(8 ** beta * 2)    # TP 16 over 2 nodes
    assert 1 < host_scale("nanotron", 2, 1, True) < host_scale("nanotron", 4, 1, True) \
        < host_scale("nanotron", 8, 1, True)
    assert host_scale("nanotron", 8, 2, False) == 2
    assert host_scale("nanotron", 1, 1, True) == host_scale("nanotron", 4, 1, False) == 1
    assert host_scale("megatron", 8, 4, True) == 1
    nano = dict(dp=1, tp=4, pp=4, sp=True, mbs=1, gbs=64, seq=4096, framework="nanotron")
    small = model_from_name("nanotron-1.34b")
    inside = stage_costs(small, ClusterSpec(H100, nodes=2), ParallelConfig(**nano), PROF)   # pp over 2 nodes
    one = stage_costs(small, ClusterSpec(H100, nodes=1, gpus_per_node=16), ParallelConfig(**nano), PROF)
    host = PROF.host_ms_per_layer * 1e-3
    f, b, w = inside.layer[(False, "none")]
    assert f + b + w == pytest.approx(host * 4 ** beta)           # the floor binds at mbs 1
    assert sum(one.layer[(False, "none")]) == pytest.approx(host)
    mega = stage_costs(small, ClusterSpec(H100, nodes=2), ParallelConfig(**{**nano, "framework": "megatron"}), PROF)
    assert sum(mega.layer[(False, "none")]) < f + b + w


def test_uneven_virtual_stages_cost_their_own_layers():
    """An uneven split of interleaved stages (Megatron's pipeline layout): every stage costs its
    own layers, not the mean of its rank's; stage i runs on rank i % p."""
    from calculators.time.step import stage_costs
    cluster = ClusterSpec(H100, nodes=2)
    split = (3, 4, 4, 4, 4, 4, 4, 5)
    par = ParallelConfig(dp=2, tp=2, pp=4, vpp=2, sp=True, gbs=32, seq=4096, schedule="interleaved", split=split)
    gpu_only = replace(PROF, host_ms_per_layer=0.0)
    c = stage_costs(L8B, cluster, par, gpu_only)
    f1 = c.f[1] / 4
    assert [f / f1 for f in c.f[1:-1]] == pytest.approx([4] * 6)
    assert [w / f1 for w in c.w[:-1]] == pytest.approx([n * c.w[1] / 4 / f1 for n in split[:-1]])
    assert c.f[0] > 3 * f1 and c.f[0] < 4 * f1        # three layers and the embedding
    assert c.layers[0] == tuple(range(0, 3)) + tuple(range(15, 19))
    even = stage_costs(L8B, cluster, replace(par, split=()), gpu_only)
    assert sum(c.w) == pytest.approx(sum(even.w)) and max(c.w) > max(even.w)


@pytest.mark.parametrize("model,kw", [
    (L8B, dict(dp=4, tp=2, pp=1, sp=True)),
    (L8B, dict(dp=2, tp=2, pp=2, sp=True, schedule="zb", recompute_ranks=("full", "none"), recompute="full")),
    (model_from_name("qwen3-30b-a3b"), dict(dp=2, tp=1, pp=4, ep=2, schedule="dualpipe", gbs=32)),
    (model_from_name("nanotron-1.34b"), dict(dp=2, tp=1, pp=4, vpp=2, schedule="interleaved", framework="nanotron"))])
def test_the_planners_closed_score_is_the_estimates_and_shares_costs_across_zero(model, kw):
    """The planner scores with closed_step_time and reuses one layout's stage costs for its other
    ZeRO stages and batch sizes: both must give exactly estimate_step's closed-form time."""
    cluster = ClusterSpec(H100, nodes=1)
    base = ParallelConfig(**{"gbs": 64, "seq": 4096, **kw})
    shared = stage_costs(model, cluster, base, PROF)
    for zero in (0, 1, 2, 3):
        for gbs in (base.gbs, 2 * base.gbs):
            par = replace(base, zero=zero, gbs=gbs)
            assert stage_costs(model, cluster, par, PROF) == shared
            expected = estimate_step(model, cluster, par, PROF, pipeline="closed").time_s
            assert closed_step_time(model, cluster, par, PROF, shared) == expected
            assert closed_step_time(model, cluster, par, PROF) == expected


def test_dualpipe_hides_expert_traffic_only_as_far_as_the_paired_compute_lasts():
    """Qwen3-30B-A3B with EP 32 over 4 nodes: the all-to-all moves more than a layer computes,
    so under DualPipe most of it stays exposed; DeepEP's lighter traffic hides but for what
    outlasts the compute each all-to-all is paired with (layercomm.paired_hidden) and the share
    its kernels' SMs take from that compute (profile.dispatch_sm_share)."""
    qwen = model_from_name("qwen3-30b-a3b")
    cluster = ClusterSpec(H100, nodes=8)
    par = ParallelConfig(dp=32, pp=2, ep=32, gbs=512, seq=4096, schedule="dualpipe")
    check_layout(qwen, cluster, par)
    heavy = estimate_step(qwen, cluster, par, PROF).breakdown
    assert heavy["ep_exposed"] > heavy["ep_hidden"] > 0
    light = estimate_step(qwen, cluster, replace(par, dispatcher="deepep"), PROF).breakdown
    share = PROF.dispatch_sm_share
    assert share / (1 - share) < light["ep_exposed"] / light["ep_hidden"] < 0.4
    one_f_one_b = estimate_step(qwen, cluster, replace(par, schedule="1f1b"), PROF).breakdown
    assert one_f_one_b.get("ep_hidden", 0.0) == 0.0                 # profile.overlap["ep"] is 0


def test_summing_micro_batch_gradients_and_the_loss_cost_their_memory_passes():
    """frameworks.grad_accumulation_bytes: nanotron adds every micro-batch's bf16 gradients into
    fp32 buffers (10 bytes per parameter), Megatron's fused GEMM does it (0), PyTorch's
    AccumulateGrad from the second micro-batch on; kernels.loss_bytes_per_logit: nanotron's
    unfused fp32 cross-entropy, 38 + 14 bytes per logit. Both land in the stage costs as memory-
    bound time at the profile's HBM rate."""
    from calculators.time.compute import memory_time, output_layer_time
    from calculators.specs.frameworks import grad_accumulation_bytes
    from calculators.specs.kernels import loss_bytes_per_logit
    from calculators.memory.estimate import kind_params
    assert grad_accumulation_bytes("nanotron", 1, 1) == grad_accumulation_bytes("nanotron", 0, 8) == 10
    assert grad_accumulation_bytes("megatron", 1, 8) == 0
    assert grad_accumulation_bytes("fsdp2", 0, 1) == 6 and grad_accumulation_bytes("fsdp2", 0, 4) == 6 + 12 * 3 / 4
    assert grad_accumulation_bytes("fsdp2", 3, 4) == 6 and grad_accumulation_bytes("deepspeed", 1, 1) == 0
    assert loss_bytes_per_logit("nanotron") == ((38, 6), (14, 2))

    from calculators.specs.frameworks import gemm_scale
    gpu_only = replace(PROF, host_ms_per_layer=0.0)
    small, cluster = model_from_name("nanotron-1.34b"), ClusterSpec(H100, nodes=1)
    nano = ParallelConfig(dp=8, tp=1, mbs=1, gbs=64, seq=4096, framework="nanotron")
    mega = replace(nano, framework="megatron", attention="fa2")     # the same attention kernel
    # the same GEMM rate in a step for both (nanotron's is gemm_scale of the GPU's)
    rates = {"nanotron": replace(gpu_only, gemm_fraction=gpu_only.gemm_fraction / gemm_scale("nanotron")),
             "megatron": gpu_only}
    (fn, bn, wn), (fm, bm, wm) = (stage_costs(small, cluster, par, rates[par.framework]).layer[(False, "none")]
                                  for par in (nano, mega))
    assert (fn, bn) == (fm, bm)
    assert wn - wm == pytest.approx(memory_time(10 * sum(kind_params(small, nano, False)), 1, H100, gpu_only))
    logits = 4096 * small.vocab
    (of_n, ob_n, _), (of_m, ob_m, _) = (output_layer_time(small, par, H100, gpu_only) for par in (nano, mega))
    hbm = H100.hbm_tbps * 1e12 * gpu_only.hbm_fraction
    assert of_n - of_m == pytest.approx((38 - 8) * logits / hbm)
    assert ob_n - ob_m == pytest.approx((14 - 8) * logits / hbm)


def test_routing_imbalance_and_megatrons_expert_parallel_overlap():
    """The busiest expert rank sets the pace: an imbalance of 1.5 costs its experts' GEMMs and its
    dispatch half again. Megatron's overlap_moe_expert_parallel_comm hides the dispatch under
    another micro-batch's compute, as DualPipe does."""
    qwen = model_from_name("qwen3-30b-a3b")
    cluster = ClusterSpec(H100, nodes=4)
    par = ParallelConfig(dp=32, ep=8, gbs=256, seq=4096, dispatcher="deepep")
    base = estimate_step(qwen, cluster, par, PROF)
    skewed = estimate_step(qwen, cluster, replace(par, moe_imbalance=1.5), PROF)
    assert skewed.breakdown["ep_exposed"] == pytest.approx(1.5 * base.breakdown["ep_exposed"])
    assert skewed.time_s > base.time_s
    overlapped = estimate_step(qwen, cluster, replace(par, ep_overlap=True), PROF)
    # all of it hidden but for the compute its kernels' SMs take (profile.dispatch_sm_share) and the
    # first forward and last backward of the m = 8 micro-batches, which run alone (paired_share)
    alone = 1 - (1 - PROF.dispatch_sm_share) * 7 / 8
    assert overlapped.breakdown.get("ep_exposed", 0.0) < (alone + 0.1) * base.breakdown["ep_exposed"]
    assert overlapped.time_s < base.time_s


def test_megatron_pairs_micro_batches_only_after_the_warmup():
    """Megatron's combined 1F1B (overlap_moe_expert_parallel_comm) runs the first forward and the
    last backward alone without PP, and each rank's warmup forwards (and as many cooldown
    backwards) alone with interleaved PP: (pp - rank - 1) * 2 + (vpp - 1) * pp + 1 of its m * vpp
    chunks, pp - 1 + (vpp - 1) * pp + 1 on average. More micro-batches hide more; with PP it
    needs the interleaved schedule, as Megatron asserts."""
    from calculators.time.layercomm import paired_share
    assert paired_share(ParallelConfig(dp=8, gbs=32, ep_overlap=True)) == pytest.approx(3 / 4)
    assert paired_share(ParallelConfig(dp=8, gbs=8, ep_overlap=True)) == 0.0         # one micro-batch
    inter = ParallelConfig(dp=4, pp=4, vpp=2, schedule="interleaved", gbs=64, ep_overlap=True)
    assert inter.microbatches == 16
    assert paired_share(inter) == pytest.approx(1 - (3 + 4 + 1) / 32)
    qwen = model_from_name("qwen3-30b-a3b")
    cluster = ClusterSpec(H100, nodes=4)
    par = ParallelConfig(dp=32, ep=8, gbs=256, seq=4096, dispatcher="deepep", ep_overlap=True)
    few, many = (estimate_step(qwen, cluster, replace(par, gbs=g), PROF).breakdown for g in (64, 1024))
    assert few["ep_exposed"] / (few["ep_exposed"] + few["ep_hidden"]) > \
        many["ep_exposed"] / (many["ep_exposed"] + many["ep_hidden"])
    with pytest.raises(ConfigError, match="ep_overlap with pp=2 needs interleaved stages"):
        check_layout(qwen, cluster, ParallelConfig(dp=16, pp=2, ep=8, gbs=256, seq=4096, ep_overlap=True))
    for recompute in ("full", "layer:2", "moe_act+moe"):
        with pytest.raises(ConfigError, match=f"recompute {re.escape(recompute)}"):
            check_layout(qwen, cluster, replace(par, recompute=recompute))
    with pytest.raises(ConfigError, match="needs ep > 1"):
        check_layout(qwen, cluster, replace(par, ep=1))
    check_layout(qwen, cluster, replace(par, recompute="moe_act+layernorm"))


def test_deepep_kernels_take_the_sms_the_overlapped_compute_would_use():
    """DeepEP's dispatch and combine run on 20 SMs (its default; DeepSeek-V3's report uses as many
    for DualPipe's communication): the compute beside them has the rest, so an overlapped
    dispatch hides (1 - 20/132) of its time on H100, and all of it with no SMs taken."""
    qwen = model_from_name("qwen3-30b-a3b")
    cluster = ClusterSpec(H100, nodes=4)
    par = ParallelConfig(dp=32, ep=8, gbs=256, seq=4096, dispatcher="deepep", ep_overlap=True)
    assert PROF.dispatch_sm_share == pytest.approx(20 / 132)
    assert default_profile("B200").dispatch_sm_share == pytest.approx(20 / 148)
    free = replace(PROF, dispatch_sm_share=0.0)
    taken, unlimited = (stage_costs(qwen, cluster, par, p).parts[(True, "none")][1]["ep"] for p in (PROF, free))
    assert taken[2] == pytest.approx(unlimited[2] * (1 - 20 / 132))
    assert estimate_step(qwen, cluster, par, PROF).time_s > estimate_step(qwen, cluster, par, free).time_s
    a2a = replace(par, dispatcher="alltoall")           # NCCL's all-to-all: its SMs are not modelled
    assert stage_costs(qwen, cluster, a2a, PROF).parts[(True, "none")][1]["ep"][2] == \
        stage_costs(qwen, cluster, a2a, free).parts[(True, "none")][1]["ep"][2]


def test_megatrons_per_expert_loop_costs_host_time_in_fp8_only():
    """Transformer Engine's GroupedLinear waits for the tokens per expert on the host, then walks
    the local experts one by one (host.expert_loop_host): in FP8 each of the E/ep local experts adds
    EXPERT_LOOP_FP8_MS per MoE layer and micro-batch, a third in the forward, shown as host time.
    Fused experts (one kernel for all: torchtitan's, Megatron's cuteDSL grouped MLP), BF16 and
    dense layers pay none; a full recompute issues the forward's share again."""
    from calculators.time.host import EXPERT_LOOP_FP8_MS, expert_loop_host
    qwen = model_from_name("qwen3-30b-a3b")
    cluster = ClusterSpec(H100, nodes=1)
    par = ParallelConfig(dp=8, ep=8, gbs=64, seq=4096, precision="fp8", dispatcher="deepep")
    per_layer = EXPERT_LOOP_FP8_MS * 1e-3 * 128 / 8
    assert expert_loop_host(qwen, par, True) == pytest.approx((per_layer / 3, 2 * per_layer / 3))
    assert expert_loop_host(qwen, replace(par, ep=4), True)[0] == pytest.approx(2 * per_layer / 3)
    for recompute, again in (("full", 1), ("layer:2", 0.5), ("moe_act+layernorm", 0), ("layernorm+moe", 1)):
        assert expert_loop_host(qwen, replace(par, recompute=recompute), True)[1] == \
            pytest.approx(2 * per_layer / 3 + again * per_layer / 3), recompute
    for other in (replace(par, experts="fused"), replace(par, precision="bf16"), replace(par, framework="fsdp2")):
        assert expert_loop_host(qwen, other, True) == (0.0, 0.0)
    assert expert_loop_host(qwen, par, False) == (0.0, 0.0) == expert_loop_host(L8B, par, True)
    # Hugging Face MoE blocks (deepspeed) loop over their experts in Python too
    assert expert_loop_host(qwen, replace(par, framework="deepspeed"), True) == expert_loop_host(qwen, par, True)
    looped, fused = (estimate_step(qwen, cluster, p, PROF) for p in (par, replace(par, experts="fused")))
    added = qwen.moe_layers * par.microbatches * per_layer
    assert looped.time_s - fused.time_s == pytest.approx(added, rel=0.05)
    assert looped.breakdown["host_bound"] - fused.breakdown["host_bound"] == pytest.approx(added, rel=1e-6)
    with pytest.raises(ConfigError, match="experts"):
        ParallelConfig(experts="grouped")


def test_megatron_syncs_each_interleaved_chunk_after_its_last_backward():
    """Megatron's interleaved schedule starts a model chunk's gradient sync when that chunk's last
    micro-batch backward ends (grad_sync_func per chunk), so all but the last chunk's sync hides
    behind the other chunks' cooldown backwards; elsewhere only behind the last micro-batch's."""
    from calculators.specs.overlap import grad_sync_windows
    assert grad_sync_windows("megatron", "interleaved", 8, 4) == (1, 9, 17, 25)
    assert grad_sync_windows("megatron", "1f1b", 8, 1) == (1,) == grad_sync_windows("fsdp2", "interleaved", 8, 1)
    assert grad_sync_windows("nanotron", "interleaved", 8, 4) == (4,)
    cluster = ClusterSpec(H100, nodes=16)
    par = ParallelConfig(dp=16, tp=8, pp=1, sp=True, tp_overlap=True, mbs=1, gbs=256, seq=4096)
    l70 = model_from_name("llama3-70b")
    flat = estimate_step(l70, cluster, replace(par, pp=4, dp=4, gbs=64, vpp=1))
    chunks = estimate_step(l70, cluster, replace(par, pp=4, dp=4, gbs=64, vpp=5, schedule="interleaved"))
    synced = lambda s: s.breakdown["dp_exposed"] + s.breakdown["dp_hidden"]      # noqa: E731
    assert synced(chunks) == pytest.approx(synced(flat), rel=0.05)          # the same gradients...
    assert chunks.breakdown["dp_exposed"] < 0.5 * flat.breakdown["dp_exposed"]    # ...mostly hidden


def test_paired_all_to_alls_hide_behind_the_compute_megatron_puts_beside_each():
    """layercomm.paired_hidden: with every piece of compute at least as long as one all-to-all, all of
    it hides; with no compute, none; an all-to-all twice its neighbour shows the difference."""
    from calculators.time.compute import LayerTime
    from calculators.time.layercomm import paired_hidden

    def layer(attention_f, mlp_f):        # backward twice the forward, for attention and MLP alike
        return LayerTime(forward=attention_f + mlp_f, backward_input=attention_f + mlp_f,
                         backward_weight=attention_f + mlp_f, gemm=0, attention=0, memory_bound=0,
                         recompute=0, mlp=(mlp_f, 2 * mlp_f))
    assert paired_hidden(layer(1.0, 1.0), 2.0) == 1.0          # each all-to-all 1.0 beside >= 1.0
    assert paired_hidden(layer(0.0, 0.0), 2.0) == 0.0
    # attention 0.5 forward, 1.0 backward; MLP 1.0 and 2.0; all-to-alls of 1.0: the backward's
    # combine outlasts the attention forward by 0.5, the rest hides
    assert paired_hidden(layer(0.5, 1.0), 2.0) == pytest.approx(1 - 0.5 / 4)


def test_experts_see_the_tokens_gathered_over_their_tensor_parallel_group():
    """An expert-TP group spreads each expert's ffn over etp GPUs and gathers the tokens of its
    ranks: without sequence parallelism (tp 1) the etp data-parallel ranks' T each, so a GPU's
    expert GEMMs do the same work whatever etp is; they once kept T tokens and divided the ffn by
    etp, which put MFU over 100% (tp 1, etp 8: 155%)."""
    from calculators.specs.parallel import routed_tokens
    mixtral = model_from_name("mixtral-8x7b")
    base = ParallelConfig(dp=8, tp=1, ep=1, gbs=64, seq=4096, zero=1)
    assert routed_tokens(replace(base, etp=8), 4096) == 8 * 4096
    assert routed_tokens(ParallelConfig(dp=4, tp=2, sp=True, etp=2, gbs=64), 4096) == 4096
    assert routed_tokens(ParallelConfig(dp=4, tp=2, sp=True, etp=1, gbs=64), 4096) == 2048
    cluster = ClusterSpec(gpu_from_name("H100-80GB"), nodes=1)
    one, eight = (estimate_step(mixtral, cluster, replace(base, etp=e)) for e in (1, 8))
    assert eight.mfu < 0.6 and eight.time_s > 0.6 * one.time_s
