"""Memory per GPU: model states against a real model and AdamW, layouts, stage splits, properties."""
from dataclasses import replace

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from calculators.specs.frameworks import bytes_per_param
from calculators.specs.hardware import ClusterSpec, gpu_from_name
from calculators.memory.estimate import GIB, estimate_memory, peak_memory, pipeline_stages, stage_layers
from calculators.specs.models import ModelSpec, MoESpec
from calculators.specs.errors import ConfigError
from calculators.specs.parallel import RECOMPUTE, ParallelConfig
from calculators.specs.presets import model_from_name
from tests.calculators.reference_block import ReferenceLayer

H100 = gpu_from_name("H100-80GB")


def one_gpu(model, **par):
    return estimate_memory(model, ClusterSpec(H100, 1, 1), ParallelConfig(**par))


def test_model_states_equal_a_real_model_with_adamw():
    """bf16 weights and grads, fp32 master copy, AdamW moments: DeepSpeed's ZeRO-0 layout."""
    spec = ModelSpec(layers=3, hidden=64, heads=4, kv_heads=2, ffn=160, vocab=97)
    torch.manual_seed(0)
    layers = [ReferenceLayer(spec) for _ in range(spec.layers)]
    model = torch.nn.ModuleDict({"layers": torch.nn.ModuleList(layers),
                                 "embed": torch.nn.Embedding(spec.vocab, spec.hidden, dtype=torch.bfloat16),
                                 "norm": torch.nn.Linear(spec.hidden, 1, bias=False, dtype=torch.bfloat16),
                                 "out": torch.nn.Linear(spec.hidden, spec.vocab, bias=False, dtype=torch.bfloat16)})
    params = list(model.parameters())
    for p in params:
        torch.nn.init.normal_(p)
        p.grad = torch.zeros_like(p)
    master = [p.detach().float().requires_grad_() for p in params]
    for m in master:
        m.grad = torch.ones_like(m)
    opt = torch.optim.AdamW(master)
    opt.step()
    nbytes = lambda ts: sum(t.numel() * t.element_size() for t in ts)  # noqa: E731
    est = one_gpu(spec, framework="deepspeed", seq=8).stages[0]
    assert est.params == sum(p.numel() for p in params) == spec.total_params
    assert est.weights_gib * GIB == nbytes(params)
    assert est.grads_gib * GIB == nbytes(p.grad for p in params)
    assert est.master_gib * GIB == nbytes(master)
    assert est.optimizer_gib * GIB == nbytes(v for s in opt.state.values() for k, v in s.items() if k != "step")


def test_ddp_keeps_its_buckets_beside_each_parameters_grad():
    """PyTorch's DDP (fsdp2 at ZeRO 0/1 over two or more replicas) keeps a flat bucket per group of
    gradients from step to step, and with its default gradient_as_bucket_view=False each
    parameter's .grad is a tensor of its own: the estimate holds both once the backward ends, the
    buckets alone from init (step_timeline), and FSDP2 at ZeRO 3 neither."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Linear(64, 64))
        ddp = DistributedDataParallel(model)
        buckets = []

        def hook(_, bucket):
            buckets.append((bucket.buffer().data_ptr(), bucket.buffer().numel() * bucket.buffer().element_size()))
            done = torch.futures.Future()
            done.set_result(bucket.buffer())
            return done
        ddp.register_comm_hook(None, hook)
        seen = []
        for _ in range(3):                     # the first step's buckets are rebuilt once, in grad order
            buckets.clear()
            ddp(torch.randn(4, 64)).sum().backward()
            grads = [p.grad for p in model.parameters()]
            assert not any(b <= g.data_ptr() < b + n for g in grads for b, n in buckets)   # .grad of their own
            assert sum(n for _, n in buckets) == sum(g.numel() * g.element_size() for g in grads)
            seen.append(buckets[0][0])
            model.zero_grad(set_to_none=True)
        assert seen[1] == seen[2]               # the same bucket kept from step to step
    finally:
        dist.destroy_process_group()
    for zero, dp, twice in ((1, 8, True), (0, 8, True), (1, 1, False), (3, 8, False)):
        c = ClusterSpec(gpu_from_name("H100-80GB"), nodes=1, gpus_per_node=dp)
        par = ParallelConfig(dp=dp, zero=zero, gbs=16, seq=4096, framework="fsdp2")
        w = estimate_memory(model_from_name("llama3-8b"), c, par).worst
        held = bytes_per_param("fsdp2", zero, dp)["grads"]
        grads = (held[0] + held[1] / dp) * w.params / GIB
        assert w.grads_full_gib == pytest.approx(2 * grads if twice else grads)


@pytest.mark.parametrize("framework,zero,d,expected", [
    ("megatron", 0, 8, 18), ("megatron", 1, 8, 6 + 12 / 8),      # Megatron-LM distributed optimizer docs
    ("deepspeed", 1, 64, 4 + 12 / 64), ("deepspeed", 2, 64, 2 + 14 / 64), ("deepspeed", 3, 64, 16 / 64),
    ("fsdp2", 3, 8, 16 / 8), ("nanotron", 0, 8, 20), ("nanotron", 1, 8, 10 + 14 / 8),
    ("nanotron", 0, 1, 18),                                      # no DDP, so no bf16 grad buckets
])
def test_bytes_per_param(framework, zero, d, expected):
    layout = bytes_per_param(framework, zero, d)
    assert sum(rep + sh / d for rep, sh in layout.values()) == pytest.approx(expected)


def test_gradients_kept_and_reduced_in_bf16_or_fp32():
    """parallel.grad_dtype: Megatron's main grads are fp32 by default (Megatron-LM turns on
    accumulate_allreduce_grads_in_fp32 with --bf16) and bf16 with --grad-reduce-in-bf16, as NVIDIA's
    performance recipes run: 2 bytes a parameter less, and half the bytes on the wire. DeepSpeed's
    are bf16 unless fp32 accumulation is asked for. FSDP2's sharded gradients stay in its fp32
    parameters' dtype; only its reduce-scatter changes. nanotron's layout is fitted: no choice."""
    from calculators.planning.export import export
    from calculators.specs.frameworks import grad_reduce_bytes
    from calculators.specs.parallel import check_layout
    from calculators.time.profiles import default_profile
    from calculators.time.step import estimate_step
    assert sum(bytes_per_param("megatron", 0, 8, "bf16")["grads"]) == 2
    assert sum(rep + sh / 8 for rep, sh in bytes_per_param("megatron", 1, 8, "bf16").values()) == 4 + 12 / 8
    assert sum(bytes_per_param("deepspeed", 0, 8, "fp32")["grads"]) == 4
    assert bytes_per_param("fsdp2", 3, 8, "bf16") == bytes_per_param("fsdp2", 3, 8)
    m, c = model_from_name("llama3-8b"), ClusterSpec(H100, 4, 8)
    par = ParallelConfig(dp=32, zero=1, gbs=256, seq=4096)
    fp32, bf16 = (estimate_memory(m, c, replace(par, grad_dtype=g)).worst for g in ("", "bf16"))
    assert fp32.grads_gib == pytest.approx(2 * bf16.grads_gib)
    assert fp32.optimizer_gib == bf16.optimizer_gib
    assert grad_reduce_bytes(par) == 4 and grad_reduce_bytes(replace(par, grad_dtype="bf16")) == 2
    assert grad_reduce_bytes(replace(par, framework="deepspeed")) == 2
    prof = default_profile("H100-80GB")
    a, b = (estimate_step(m, c, replace(par, grad_dtype=g), prof).breakdown for g in ("", "bf16"))
    assert b["dp_exposed"] + b["dp_hidden"] < 0.7 * (a["dp_exposed"] + a["dp_hidden"])
    script, _ = export("megatron", m, c, replace(par, grad_dtype="bf16"))
    assert "--grad-reduce-in-bf16" in script and "--grad-reduce-in-bf16" not in export("megatron", m, c, par)[0]
    with pytest.raises(ConfigError, match="nanotron's gradient layout"):
        check_layout(m, c, replace(par, framework="nanotron", grad_dtype="bf16"))
    with pytest.raises(ConfigError, match="grad_dtype must be one of"):
        ParallelConfig(grad_dtype="fp16")



def test_adam_moments_in_bf16():
    """parallel.moment_dtype bf16 is Megatron's precision-aware optimizer (--exp-avg-dtype bf16
    --exp-avg-sq-dtype bf16): m and v in 2 bytes each, sharded as ZeRO shards them, and the
    optimizer step moves 8 bytes a parameter less. Other frameworks keep fp32 moments."""
    from calculators.planning.export import export
    from calculators.specs.frameworks import optimizer_bytes
    from calculators.specs.parallel import check_layout
    assert bytes_per_param("megatron", 1, 8, moments="bf16")["optimizer"] == (0, 4)
    m, c = model_from_name("llama3-8b"), ClusterSpec(H100, 1, 8)
    par = ParallelConfig(dp=8, zero=1, gbs=8, seq=4096)
    fp32, bf16 = (estimate_memory(m, c, replace(par, moment_dtype=d, master_dtype="fp32")).worst for d in ("", "bf16"))
    assert fp32.optimizer_gib == pytest.approx(2 * bf16.optimizer_gib) and fp32.master_gib == bf16.master_gib
    assert optimizer_bytes(par) == 30
    assert optimizer_bytes(replace(par, moment_dtype="bf16", grad_dtype="bf16", master_dtype="fp32")) == 20
    assert optimizer_bytes(replace(par, framework="fsdp2", zero=3, grad_dtype="bf16")) == 30
    assert "--exp-avg-dtype bf16" in export("megatron", m, c, replace(par, moment_dtype="bf16"))[0]
    with pytest.raises(ConfigError, match="fsdp2 keeps Adam's moments in fp32"):
        check_layout(m, c, replace(par, framework="fsdp2", zero=3, moment_dtype="bf16"))
    with pytest.raises(ConfigError, match="runs only with its distributed optimizer"):   # Megatron refuses it
        check_layout(m, c, replace(par, zero=0, moment_dtype="bf16"))


def test_master_weights_as_remainders_or_none():
    """Megatron's precision-aware optimizer over its distributed optimizer keeps only the 16 bits an
    fp32 master has beyond its bf16 weight (Transformer Engine's FusedAdam, store_param_remainders):
    2 bytes, not 4, in bf16 and FP8 delayed-scaling training; Megatron-FSDP keeps fp32 masters.
    NeMo 1.x's Apex DistributedFusedAdam keeps remainders too, or no master at all with a bf16 state
    (master_dtype none). The optimizer step reads and writes the remainder with the weight."""
    from calculators.planning.export import export
    from calculators.specs.frameworks import master_dtype, optimizer_bytes
    from calculators.specs.parallel import check_layout
    m, c = model_from_name("llama3-8b"), ClusterSpec(H100, 1, 8)
    par = ParallelConfig(dp=8, zero=1, gbs=8, seq=4096)
    assert master_dtype(par) == "fp32" and master_dtype(replace(par, moment_dtype="bf16")) == "remainder"
    assert master_dtype(replace(par, moment_dtype="bf16", precision="fp8")) == "remainder"   # delayed scaling
    for recipe in ("tensorwise", "blockwise"):      # Megatron keeps fp32 masters under the other recipes
        assert master_dtype(replace(par, moment_dtype="bf16", precision="fp8", fp8_recipe=recipe)) == "fp32"
    assert master_dtype(replace(par, moment_dtype="bf16", zero=3)) == "fp32"                   # Megatron-FSDP
    masters = {d: estimate_memory(m, c, replace(par, master_dtype=d)).worst.master_gib
               for d in ("fp32", "remainder", "16bit", "none")}
    assert masters["fp32"] == pytest.approx(2 * masters["remainder"]) == pytest.approx(2 * masters["16bit"])
    assert masters["none"] == 0
    assert masters["fp32"] == pytest.approx(4 * m.total_params / 8 / GIB)
    assert [optimizer_bytes(replace(par, master_dtype=d)) for d in ("fp32", "remainder", "16bit", "none")] == \
        [30, 28, 26, 24]
    assert "--main-params-dtype fp16" in export("megatron", m, c, replace(par, master_dtype="16bit"))[0]
    assert "--use-precision-aware-optimizer" in export("megatron", m, c, replace(par, master_dtype="remainder"))[0]
    with pytest.raises(ConfigError, match="master_dtype remainder is Megatron's"):
        check_layout(m, c, replace(par, framework="fsdp2", zero=3, master_dtype="remainder"))


def test_zero_shards_over_dp_times_cp_and_tp_divides_weights():
    m = model_from_name("llama3-8b")
    c = ClusterSpec(H100, 2, 8)
    a = estimate_memory(m, c, ParallelConfig(dp=8, cp=2, zero=1, gbs=8, seq=8192)).worst
    assert a.optimizer_gib == pytest.approx(8 * m.total_params / 16 / GIB)
    b = estimate_memory(m, c, ParallelConfig(dp=2, tp=8, sp=True, gbs=2)).worst
    assert b.params == pytest.approx((m.total_params - 32 * 2 * 4096 - 4096) / 8 + 32 * 2 * 4096 + 4096, rel=1e-9)


def test_stage_splits():
    m = model_from_name("nanotron-1.34b")
    assert [len(s) for s in stage_layers(m, ParallelConfig(pp=4, framework="nanotron"))] == [5, 5, 5, 1]
    # nanotron's cost split is one stage per rank; DualPipeV's 2p chunks take the even split
    dual = ParallelConfig(pp=4, framework="nanotron", schedule="dualpipe")
    assert [len(s) for s in pipeline_stages(m, dual)] == [2] * 8 and len(stage_layers(m, dual)) == 4
    assert stage_layers(ModelSpec(layers=8, hidden=64, heads=4, ffn=64, vocab=10),
                        ParallelConfig(pp=2, vpp=2, schedule="interleaved")) == ((0, 1, 4, 5), (2, 3, 6, 7))
    # an uneven split of virtual stages: stage i on rank i % p, in layer order
    par = ParallelConfig(pp=2, vpp=2, schedule="interleaved", split=(1, 3, 3, 1))
    assert pipeline_stages(ModelSpec(layers=8, hidden=64, heads=4, ffn=64, vocab=10), par) == ((0,), (1, 2, 3), (4, 5, 6), (7,))
    assert stage_layers(ModelSpec(layers=8, hidden=64, heads=4, ffn=64, vocab=10), par) == ((0, 4, 5, 6), (1, 2, 3, 7))


def test_last_stage_holds_logits_and_first_stage_the_most_activations():
    m = model_from_name("llama3-8b")
    est = estimate_memory(m, ClusterSpec(H100, 1, 8), ParallelConfig(pp=8, gbs=64, seq=8192))
    acts = [s.activations_gib for s in est.stages]
    assert acts[0] == max(acts[:-1]) and acts[1] > acts[2]          # 1F1B: rank i holds p - i micro-batches
    assert est.stages[-1].weights_gib > est.stages[1].weights_gib     # output layer on the last stage


def test_moe_experts_divided_by_ep():
    m = model_from_name("mixtral-8x7b")
    c = ClusterSpec(H100, 1, 8)
    e1 = estimate_memory(m, c, ParallelConfig(dp=8, gbs=8, etp=1)).worst.params
    e8 = estimate_memory(m, c, ParallelConfig(dp=8, ep=8, etp=1, gbs=8)).worst.params
    expert = 32 * 8 * 3 * 4096 * 14336
    assert e1 - e8 == pytest.approx(expert * 7 / 8)


# ---- properties --------------------------------------------------------------------------------
DENSE = model_from_name("llama3-8b")
MOE = ModelSpec(layers=8, hidden=1024, heads=16, kv_heads=8, ffn=2048, vocab=32000,
                moe=MoESpec(experts=16, top_k=2, expert_ffn=1024))

layouts = st.fixed_dictionaries({
    "tp": st.sampled_from([1, 2, 4, 8]), "pp": st.sampled_from([1, 2, 4, 8]), "cp": st.sampled_from([1, 2, 4]),
    "dp": st.sampled_from([1, 2, 4, 8]), "ep": st.sampled_from([1, 2, 4]), "zero": st.integers(0, 3),
    "mbs": st.sampled_from([1, 2, 4]), "m": st.sampled_from([1, 4, 16]), "seq": st.sampled_from([2048, 8192]),
    "sp": st.booleans(), "flash": st.booleans(), "recompute": st.sampled_from(["none", "selective", "full"]),
    "schedule": st.sampled_from(["gpipe", "1f1b", "zb"]),
    "framework": st.sampled_from(["megatron", "fsdp2", "deepspeed", "nanotron"]),
    "moe": st.booleans()})


def _layout(d):
    model = MOE if d["moe"] else DENSE
    par = ParallelConfig(tp=d["tp"], pp=d["pp"], cp=d["cp"], dp=d["dp"], ep=d["ep"] if d["moe"] else 1,
                         etp=1, zero=d["zero"], sp=d["sp"], mbs=d["mbs"], gbs=d["dp"] * d["mbs"] * d["m"],
                         seq=d["seq"], recompute=d["recompute"], schedule=d["schedule"],
                         framework=d["framework"], flash=d["flash"])
    return model, ClusterSpec(H100, 1, par.world), par


def _total(d):
    return estimate_memory(*_layout(d)).total_gib


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(layouts, st.sampled_from(["tp", "pp", "cp", "dp", "ep"]))
def test_memory_never_rises_when_one_sharding_degree_rises(d, axis):
    """pp and layer counts divide (8 layers / 32 layers), so the 1F1B stages are even; with an
    uneven split a deeper pipeline can really hold more (p=3 of 80 layers: 27 x 3 > 40 x 2). GPipe
    keeps all m micro-batches alive, so going from p=1 (plain gradient accumulation, one at a time)
    to a GPipe pipeline really raises memory: the pp axis is checked on the 1F1B-family schedules,
    and with an even split (nanotron's split follows cost, unevenly, so it is checked as megatron).
    Expert parallelism under torchtitan's op-level SAC (fsdp2's "selective") is exempt: that policy
    saves the all-to-alls' outputs, which exist only with ep > 1, and with many micro-batches in
    flight they can outweigh the expert weights ep shards (16 GPipe micro-batches of 8k tokens:
    +4 GiB saved against -1.5 GiB of weights and their state). A second data-parallel replica turns
    unsharded fsdp2 into PyTorch's DDP, whose gradient buckets are new memory (estimate.ddp_buckets).
    Sharded fsdp2 going from no pipeline to one is exempt too: PyTorch's pipeline schedules keep a
    stage's gradients unsharded in fp32 until the last micro-batch (frameworks.pipeline_grad_bytes),
    more than the sharded gradients of the whole model once dp is past 2 stages' worth."""
    if axis == "pp" and d["framework"] == "fsdp2" and d["zero"] >= 2 and d["pp"] == 1:
        return
    if axis == "ep" and (not d["moe"] or (d["framework"] == "fsdp2" and d["recompute"] == "selective")):
        return
    if axis == "pp" and d["schedule"] == "gpipe":
        d["schedule"] = "1f1b"
    if axis == "pp" and d["framework"] == "nanotron":
        d["framework"] = "megatron"
    if axis == "dp" and d["zero"] == 0:
        d["zero"] = 1
    if axis in ("dp", "cp") and d["framework"] == "fsdp2" and d["zero"] <= 1 and d["dp"] * d["cp"] == 1:
        d["zero"] = 2           # a second replica makes unsharded fsdp2 PyTorch's DDP, whose buckets are new
    bigger = {**d, axis: d[axis] * 2}
    if axis == "dp":
        bigger["m"] = max(1, d["m"] // 2) if d["m"] > 1 else 1   # same global batch: fewer micro-batches
    try:
        small = _total(d)
    except ValueError:
        return                      # not a valid layout (ConfigError is a ValueError)
    try:
        large = _total(bigger)
    except ValueError:
        return
    assert large <= small * (1 + 1e-9)


@settings(max_examples=200, deadline=None)
@given(layouts)
def test_recompute_order(d):
    try:
        totals = [_total({**d, "recompute": r}) for r in ("none", "selective", "full")]
    except ValueError:
        return
    assert totals[0] >= totals[1] >= totals[2]


@settings(max_examples=200, deadline=None)
@given(layouts, st.sampled_from(["none", "mixed", "uneven", "interleaved", "dualpipe"]))
def test_the_planners_fit_test_is_every_stage_of_the_estimate(d, variant):
    """peak_memory (the planner's lean path) gives each rank estimate_memory's total."""
    try:
        model, cluster, par = _layout(d)
        if variant == "mixed" and par.pp > 1:
            modes = tuple(RECOMPUTE[r % 3] for r in range(par.pp))
            par = replace(par, recompute_ranks=modes, recompute=max(modes, key=RECOMPUTE.index))
        if variant == "uneven" and par.pp > 1 and par.schedule != "dualpipe":
            par = replace(par, split=(model.layers - par.pp + 1,) + (1,) * (par.pp - 1))
        if variant in ("interleaved", "dualpipe"):
            par = replace(par, schedule=variant, vpp=2 if variant == "interleaved" else 1)
        est = estimate_memory(model, cluster, par)
    except ValueError:
        return
    peak = peak_memory(model, cluster, par)
    assert peak.totals == pytest.approx([s.total_gib for s in est.stages], rel=1e-12)
    assert (peak.total_gib, peak.stage) == (pytest.approx(est.total_gib, rel=1e-12), est.worst.stage)


def test_dualpipe_keeps_both_ends_on_rank_zero():
    from calculators.specs.hardware import ClusterSpec, gpu_from_name
    from calculators.memory.estimate import estimate_memory
    from calculators.specs.parallel import ParallelConfig
    from calculators.specs.presets import model_from_name
    model = model_from_name("llama3-8b")
    cluster = ClusterSpec(gpu_from_name("H100-80GB"), nodes=1)
    dual = estimate_memory(model, cluster, ParallelConfig(pp=4, dp=2, gbs=32, schedule="dualpipe"))
    one = estimate_memory(model, cluster, ParallelConfig(pp=4, dp=2, gbs=32, schedule="1f1b"))
    # the output layer's weights sit with the embedding on rank 0 in DualPipeV's V
    assert dual.stages[0].params > dual.stages[3].params
    assert one.stages[3].params > one.stages[1].params


def test_recompute_per_rank_gives_each_stage_its_own_mode():
    """recompute_ranks: each pipeline rank's memory and time are those of the layout with its
    mode everywhere; the first ranks of 1F1B, which hold the most micro-batches, can recompute
    alone."""
    from dataclasses import replace
    from calculators.time.step import estimate_step, rank_busy, stage_costs
    from calculators.time.profiles import default_profile
    model = model_from_name("llama3-70b")
    cluster = ClusterSpec(gpu_from_name("H100-80GB"), nodes=4)
    base = ParallelConfig(tp=8, pp=4, dp=1, sp=True, gbs=32, seq=8192, zero=1)
    mixed = replace(base, recompute="full", recompute_ranks=("full", "selective", "none", "none"))
    per_mode = {m: estimate_memory(model, cluster, replace(base, recompute=m)).stages for m in RECOMPUTE}
    got = estimate_memory(model, cluster, mixed).stages
    prof = default_profile("H100-80GB")
    busy = {m: rank_busy("1f1b", 4, 1, stage_costs(model, cluster, replace(base, recompute=m), prof)) for m in RECOMPUTE}
    mixed_busy = rank_busy("1f1b", 4, 1, stage_costs(model, cluster, mixed, prof))
    for r, mode in enumerate(mixed.recompute_ranks):
        assert got[r].total_gib == pytest.approx(per_mode[mode][r].total_gib)
        assert mixed_busy[r] == pytest.approx(busy[mode][r])
    full = estimate_step(model, cluster, replace(base, recompute="full"))
    step = estimate_step(model, cluster, mixed)
    assert step.hfu < full.hfu and step.time_s <= full.time_s * 1.0001
    with pytest.raises(ConfigError, match="each of the pp=4 ranks"):
        estimate_memory(model, cluster, replace(mixed, recompute_ranks=("full", "none")))
    with pytest.raises(ConfigError, match="must list one recompute value per pipeline rank"):
        replace(mixed, recompute_ranks=("full", "bogus", "none", "none"))


def test_activations_offloaded_to_the_host():
    """parallel.offload_layers is Megatron's --cpu-offloading-num-layers (Transformer Engine's CPU
    offload): the saved tensors of that many layers wait in host memory between forward and
    backward, one layer in flight on the GPU; each layer's copy hides under the next layer's
    forward and the previous one's backward as far as the host link (GPUSpec.host_link_gbps:
    measured 51 GB/s over H100's PCIe, 193 over GB200's NVLink-C2C) allows. Megatron refuses it
    with PP, with recompute, and for as many layers as the model has."""
    from calculators.planning.export import export
    from calculators.specs.hardware import GPUSpec
    from calculators.specs.parallel import check_layout
    from calculators.time.profiles import default_profile
    from calculators.time.step import estimate_step
    m = model_from_name("llama3-70b")
    gb200 = ClusterSpec(gpu_from_name("GB200"), 1, 64)
    par = ParallelConfig(dp=64, zero=3, mbs=2, gbs=128, seq=8192)
    kept, half = (estimate_memory(m, gb200, replace(par, offload_layers=n)).worst for n in (0, 40))
    from calculators.memory.activations import saved_per_layer
    moved = 39 * saved_per_layer(m, par, False) / GIB           # 40 layers leave, one is in flight
    assert kept.activations_gib - half.activations_gib == pytest.approx(moved)
    assert half.weights_gib == kept.weights_gib
    prof = default_profile("GB200")
    none, some = (estimate_step(m, gb200, replace(par, offload_layers=n), prof) for n in (0, 40))
    assert some.time_s > none.time_s and some.breakdown["offload_hidden"] > some.breakdown["offload_exposed"] > 0
    slow = ClusterSpec(replace(gpu_from_name("GB200"), host_gbps=25.0), 1, 64)
    assert estimate_step(m, slow, replace(par, offload_layers=40), prof).breakdown["offload_exposed"] > \
        2 * some.breakdown["offload_exposed"]
    assert gpu_from_name("H100-80GB").host_link_gbps == 51.0 and gpu_from_name("GB200").host_link_gbps == 193.0
    assert "--cpu-offloading-num-layers 40" in export("megatron", m, gb200, replace(par, offload_layers=40))[0]
    for change, words in (({"pp": 2, "dp": 32}, "pipeline parallelism"), ({"recompute": "full"}, "recompute"),
                          ({"offload_layers": 80}, "below the model's 80"), ({"framework": "fsdp2"}, "fsdp2 has none")):
        with pytest.raises(ConfigError, match=words):
            check_layout(m, gb200, replace(par, **{"offload_layers": 40, **change}))
    with pytest.raises(ConfigError, match="host_gbps"):
        GPUSpec("x", 80, 900, 1800, 3, host_gbps=1e-9)


def test_fsdp2_under_a_pipeline_holds_unsharded_fp32_gradients_until_the_last_micro_batch():
    """PyTorch's pipeline schedules run every micro-batch's backward but the last without gradient
    sync, so FSDP2 accumulates each stage's unsharded gradients in its reduce dtype (fp32 by
    torchtitan's default, bf16 with grad_dtype bf16) instead of reduce-scattering them per
    micro-batch; with one micro-batch, or no pipeline, they stay sharded."""
    model = model_from_name("llama3-8b")
    cluster = ClusterSpec(H100, nodes=2)
    piped = ParallelConfig(dp=8, pp=2, zero=3, mbs=1, gbs=64, seq=4096, framework="fsdp2")
    stage = estimate_memory(model, cluster, piped).stages[0]
    assert stage.grads_gib == pytest.approx(4 * stage.params / GIB)
    # the last micro-batch's reduce-scatter frees them: between steps each GPU keeps its shard
    assert stage.grads_full_gib == pytest.approx(4 * stage.params / 8 / GIB)
    assert stage.resident_gib < stage.weights_gib + stage.grads_gib + stage.master_gib + stage.optimizer_gib
    bf16 = estimate_memory(model, cluster, replace(piped, grad_dtype="bf16")).stages[0]
    assert bf16.grads_gib == pytest.approx(2 * bf16.params / GIB)
    once = estimate_memory(model, cluster, replace(piped, gbs=8)).stages[0]     # one micro-batch
    assert once.grads_gib == pytest.approx(4 * once.params / 8 / GIB)
