"""The planner's knobs beyond the layout's sizes: the MoE dispatcher and expert kernels, bf16
gradients and moments, the master weights, activation offloading, and the one micro-batch per step
that FSDP2 and DDP can fit where smaller ones do not: each planned only where the constraints allow
it, and taken where it is faster or fits."""
from dataclasses import replace

import pytest

from calculators.memory.estimate import estimate_memory
from calculators.planning.export import export
from calculators.planning.planner import plan
from calculators.specs.errors import ConfigError
from calculators.specs.hardware import ClusterSpec, gpu_from_name
from calculators.specs.parallel import ParallelConfig
from calculators.specs.presets import model_from_name

H100 = gpu_from_name("H100-80GB")


def test_moe_dispatcher_plans_and_exports():
    """Qwen3-235B on 32 nodes: allowing DeepEP gives the planner a faster best plan (its EP
    traffic crosses the network once per node), exported as Megatron's flex dispatcher; other
    frameworks' exports say they run the all-to-all."""
    qwen = model_from_name("qwen3-235b-a22b")
    cluster = ClusterSpec(H100, nodes=32, gpus_per_node=8)
    need = {"tp": 2, "pp": 8, "ep": 32, "etp": 1, "schedule": "interleaved", "vpp": 4}
    a2a = plan(qwen, cluster, 4096, 2048, need).plans[0]
    deep = plan(qwen, cluster, 4096, 2048, {**need, "dispatcher": ["alltoall", "deepep"]}).plans[0]
    assert a2a.par.dispatcher == "alltoall" and deep.par.dispatcher == "deepep"
    assert deep.step.time_s < 0.8 * a2a.step.time_s
    meg, _ = export("megatron", qwen, cluster, deep.par)
    assert "--moe-token-dispatcher-type flex" in meg and "--moe-flex-dispatcher-backend deepep" in meg
    assert "--moe-token-dispatcher-type alltoall" in export("megatron", qwen, cluster, a2a.par)[0]
    _, notes = export("torchtitan", qwen, cluster, deep.par)
    assert any('moe_comm_backend = "deepep"' in n for n in notes)
    _, notes = export("deepspeed", qwen, cluster, deep.par)
    assert any("not DeepEP" in n for n in notes)
    hybrid = export("megatron", qwen, cluster, replace(deep.par, dispatcher="hybridep", dispatch_sms=16))[0]
    assert "--moe-flex-dispatcher-backend hybridep" in hybrid and "--moe-flex-dispatcher-num-sms 16" in hybrid
    with pytest.raises(ConfigError, match="dispatcher"):
        plan(qwen, cluster, 4096, 2048, {"dispatcher": "nvshmem"})


def test_fused_experts_are_planned_only_where_allowed():
    """In FP8 Megatron walks a GPU's experts one by one (host.expert_loop_host); a fused grouped MLP
    is never slower in the model, so a plan takes it where `experts` allows it, and the Megatron
    export says it is a config setting, not a flag."""
    qwen = model_from_name("qwen3-30b-a3b")
    cluster = ClusterSpec(gpu_from_name("B200"), nodes=2)
    need = {"precision": "fp8", "ep": 8, "tp": 1, "pp": 1}
    looped = plan(qwen, cluster, 4096, 512, need).plans[0]
    fused = plan(qwen, cluster, 4096, 512, {**need, "experts": ["", "fused"]}).plans[0]
    assert looped.par.experts == "" and fused.par.experts == "fused" and "experts=fused" in fused.label()
    assert fused.step.time_s < looped.step.time_s
    _, notes = export("megatron", qwen, cluster, fused.par)
    assert any("use_transformer_engine_op_fuser" in n for n in notes)
    with pytest.raises(ConfigError, match="experts"):
        plan(qwen, cluster, 4096, 512, {"experts": "grouped"})


def test_bf16_gradients_are_planned_only_where_allowed():
    """Keeping and reducing gradients in bf16 (grad_dtype) is a numerics choice: a plan keeps the
    framework's fp32 unless the constraints allow bf16, and then takes it (less memory, fewer bytes)."""
    llama = model_from_name("llama3-8b")
    cluster = ClusterSpec(gpu_from_name("H100-80GB"), nodes=2)
    need = {"tp": 1, "pp": 1, "cp": 1}
    kept = plan(llama, cluster, 4096, 256, need).plans[0]
    halved = plan(llama, cluster, 4096, 256, {**need, "grad_dtype": ["", "bf16"]}).plans[0]
    assert kept.par.grad_dtype == "" and halved.par.grad_dtype == "bf16" and "grads=bf16" in halved.label()
    with pytest.raises(ConfigError, match="grad_dtype"):
        plan(llama, cluster, 4096, 256, {"grad_dtype": "fp16"})
    both = plan(llama, cluster, 4096, 256, {**need, "grad_dtype": "bf16", "moment_dtype": ["", "bf16"]}).plans[0]
    assert both.par.moment_dtype == "bf16" and "moments=bf16" in both.label()
    # a framework that keeps fp32 moments plans with them where the list allows it
    fsdp = plan(llama, cluster, 4096, 256, {**need, "framework": "fsdp2", "moment_dtype": ["", "bf16"]}).plans[0]
    assert fsdp.par.moment_dtype == ""
    # masters as remainders (or none) likewise, Megatron only
    lean = plan(llama, cluster, 4096, 256, {**need, "master_dtype": ["fp32", "16bit", "remainder"]}).plans[0]
    assert lean.par.master_dtype == "remainder" and "master=remainder" in lean.label()
    masters = [estimate_memory(llama, cluster, p.par).worst.master_gib for p in (kept, lean)]
    assert masters[1] == pytest.approx(masters[0] / 2)
    fsdp = plan(llama, cluster, 4096, 256, {**need, "framework": "fsdp2", "master_dtype": ["", "remainder"]}).plans[0]
    assert fsdp.par.master_dtype == ""
    with pytest.raises(ConfigError, match="master_dtype"):
        plan(llama, cluster, 4096, 256, {"master_dtype": "fp16"})


def test_offloading_is_planned_where_allowed_instead_of_recompute():
    """Megatron's activation offloading (offload_layers) trades host-link time for memory; a plan
    tries the allowed counts (fewest first) where the layout would otherwise need recompute, and
    keeps whichever is faster. On GB200, whose NVLink-C2C copies 193 GB/s, offloading beats full
    recompute for Llama 3 70B under FSDP with 2 sequences of 8k."""
    llama = model_from_name("llama3-70b")
    cluster = ClusterSpec(gpu_from_name("GB200"), nodes=1, gpus_per_node=64)
    need = {"tp": 1, "pp": 1, "cp": 1, "zero": 3, "mbs": 2, "precision": "fp8"}
    recomputed = plan(llama, cluster, 8192, 128, need).plans[0]
    assert recomputed.par.offload_layers == 0 and recomputed.par.recompute != "none"
    offloaded = plan(llama, cluster, 8192, 128, {**need, "offload_layers": [0, 40, 60, 79]}).plans[0]
    assert offloaded.par.offload_layers in (60, 79) and offloaded.par.recompute == "none"
    assert offloaded.step.time_s < recomputed.step.time_s and "offload=" in offloaded.label()
    with pytest.raises(ConfigError, match="offload_layers"):
        plan(llama, cluster, 8192, 128, {"offload_layers": -1})


def test_fsdp2_plans_the_one_micro_batch_that_fits_where_smaller_ones_do_not():
    """Under FSDP2 one micro-batch per step holds fewer gradients at the peak (estimate.late_grads),
    so a larger micro-batch can fit where the smallest does not: the planner tries it."""
    model = model_from_name("llama2-7b")
    cluster = ClusterSpec(gpu_from_name("H200-141GB"), nodes=1, gpus_per_node=1)
    small = estimate_memory(model, cluster, ParallelConfig(dp=1, zero=0, mbs=1, gbs=2, seq=8192, framework="fsdp2",
                                                           recompute="full"))
    assert not small.fits
    result = plan(model, cluster, 8192, 2, {"framework": "fsdp2"})
    assert result.plans and result.plans[0].par.mbs == 2 and result.plans[0].par.microbatches == 1
    assert estimate_memory(model, cluster, result.plans[0].par).fits

    # DDP (fsdp2 unsharded over 8 replicas) likewise: its parameters' .grad come as the activations go
    # (beside its buckets), so the step's one micro-batch holds less than two of half the size
    cluster = ClusterSpec(gpu_from_name("H200-141GB"), nodes=1)
    ddp = plan(model_from_name("llama3-8b"), cluster, 4096, 32,
               {"framework": "fsdp2", "zero": 1, "tp": 1, "pp": 1, "cp": 1, "recompute": "full"})
    assert {p.par.mbs for p in ddp.plans} >= {4} and all(p.par.mbs in (1, 4) for p in ddp.plans)
    two = replace(ddp.plans[0].par, mbs=2)
    assert estimate_memory(model_from_name("llama3-8b"), cluster, two).total_gib > max(p.memory_gib for p in ddp.plans)


@pytest.mark.parametrize("framework", ["megatron", "fsdp2", "deepspeed", "nanotron"])
def test_the_planners_shared_stage_costs_are_each_layouts_own(framework):
    """The planner computes stage costs once for layouts that differ only in ZeRO stage and HSDP
    degree; FSDP2's ZeRO 2/3 and DeepSpeed's ZeRO 3 copy around their collectives and FSDP2's
    ZeRO 0/1 sums fp32 gradients, and FSDP2 gathers torchao's float8 weights only where a replica
    shards them, so a key that dropped the ZeRO stage or the HSDP degree scored them with another's
    costs. Every stage and degree the framework runs gets exactly its own stage_costs."""
    from calculators.planning.planner import _Search
    from calculators.time.profiles import default_profile
    from calculators.time.step import stage_costs
    model, cluster = model_from_name("llama3-8b"), ClusterSpec(H100, nodes=2, gpus_per_node=8)
    profile = default_profile(H100.name)
    search = _Search(model, cluster, profile, 4096, 64, {"framework": framework, "precision": ["bf16", "fp8"]})
    checked = 0
    for precision in ("bf16", "fp8"):
        for zero in (3, 2, 1, 0):                      # the most sharded first: it fills the cache
            for replicas in (1, 2, 16):                # 16: shards of one rank, whose weights FSDP never gathers
                try:
                    par = ParallelConfig(framework=framework, dp=16, zero=zero, dp_replicate=replicas, mbs=1, gbs=64,
                                         seq=4096, recompute="full", precision=precision)
                    own = stage_costs(model, cluster, par, profile)
                except ConfigError:
                    continue                           # a stage or HSDP the framework does not run
                shared = search.stage_costs(par)
                assert (shared.f, shared.b, shared.w) == (own.f, own.b, own.w), (precision, zero, replicas)
                checked += 1
    assert checked >= 8


def test_balance_split_is_the_best_split_by_brute_force():
    """balance_split's DP looks only at layer counts a rank has memory room for; over every split of
    Llama 3 8B's 32 layers on three 1F1B ranks, under a memory limit that binds (between the
    lightest and the heaviest rank of the even split), none that fits has a faster slowest stage."""
    from itertools import combinations
    from calculators.memory.estimate import estimate_memory
    from calculators.planning.split import balance_split
    from calculators.time.profiles import default_profile
    from calculators.time.step import stage_costs
    model, cluster = model_from_name("llama3-8b"), ClusterSpec(H100, nodes=1, gpus_per_node=3)
    profile = default_profile(H100.name)
    par = ParallelConfig(pp=3, mbs=2, gbs=96, seq=8192, recompute="none", schedule="1f1b")
    even = [s.total_gib for s in estimate_memory(model, cluster, par).stages]
    usable = (min(even) + max(even)) / 2

    def slowest(split):
        layout = replace(par, split=split)
        if max(s.total_gib for s in estimate_memory(model, cluster, layout).stages) > usable:
            return None
        costs = stage_costs(model, cluster, layout, profile)
        return max(f + b + w for f, b, w in zip(costs.f, costs.b, costs.w))
    times = [t for cut in combinations(range(1, 32), 2)
             if (t := slowest((cut[0], cut[1] - cut[0], 32 - cut[1]))) is not None]
    chosen = balance_split(model, cluster, par, profile, usable)
    assert chosen is not None and slowest(chosen) is not None
    assert slowest(chosen) <= min(times) * (1 + 1e-9) and len(times) < 465


def test_dualpipe_is_never_planned_without_a_pipeline():
    """At pp=1 nothing runs by the name "dualpipe": Megatron pairs micro-batches with ep_overlap (planned
    where allowed, with its own checks), torchtitan not at all; a layout that asks is warned, and its
    export says what runs."""
    from calculators.specs.parallel import check_layout
    model, cluster = model_from_name("mixtral-8x7b"), ClusterSpec(gpu_from_name("H100-80GB"), nodes=2, gpus_per_node=8)
    for fw in ("fsdp2", "megatron"):
        for schedules in (["1f1b", "dualpipe"], ["dualpipe"]):
            plans = plan(model, cluster, 4096, 64, {"pp": 1, "ep": 8, "mbs": 1, "recompute": ["full"],
                                                    "schedule": schedules, "framework": fw}, top=10).plans
            assert plans and {p.par.schedule for p in plans} == {"1f1b"}, (fw, schedules)
    par = ParallelConfig(framework="fsdp2", dp=16, ep=8, zero=3, gbs=64, seq=4096, recompute="full",
                         schedule="dualpipe")
    assert any("runs no such pairing" in w for w in check_layout(model, cluster, par))
    assert any("runs no such pairing" in n for n in export("torchtitan", model, cluster, par)[1])
    overlapped = replace(par, framework="megatron", schedule="1f1b", ep_overlap=True, recompute="selective")
    assert "--overlap-moe-expert-parallel-comm" in export("megatron", model, cluster, overlapped)[0]


def test_megatron_moe_plans_try_ep_overlap_where_megatron_runs_it():
    """Megatron's overlap_moe_expert_parallel_comm (the Bridge recipes' moe_a2a_overlap), where the user
    allows it, is tried beside each MoE layout where it is valid (EP, no full recompute or 'moe' module,
    interleaved under a pipeline); not by default; other frameworks have none and refuse it by name."""
    model, cluster = model_from_name("qwen3-30b-a3b"), ClusterSpec(gpu_from_name("H100-80GB"), nodes=4, gpus_per_node=8)
    both = {"framework": "megatron", "pp": 1, "ep_overlap": [False, True]}
    best = plan(model, cluster, 4096, 256, both, top=10).plans
    paired = [p for p in best if p.par.ep_overlap]
    assert paired and all(p.par.ep > 1 and p.par.recompute != "full" for p in paired)
    alone = plan(model, cluster, 4096, 256, {"framework": "megatron", "pp": 1}).plans
    assert best[0].step.time_s <= alone[0].step.time_s and not any(p.par.ep_overlap for p in alone)
    assert "--overlap-moe-expert-parallel-comm" in export("megatron", model, cluster, paired[0].par)[0]
    full = plan(model, cluster, 4096, 256, {**both, "recompute": "full"}).plans
    assert full and not any(p.par.ep_overlap for p in full)
    with pytest.raises(ConfigError, match="fsdp2 does not run ep_overlap"):
        plan(model, cluster, 4096, 256, {"framework": "fsdp2", "ep_overlap": True})
