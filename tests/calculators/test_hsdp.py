"""HSDP (dp_replicate): FSDP2 shards over one replica's dp / dp_replicate ranks, checked against the
shards PyTorch's own fully_shard makes on a 2-D mesh (fake process group), and the collectives it
runs instead: gathers and reduce-scatters inside the shard group, the gradient shard all-reduced
across the replicas."""
from dataclasses import replace

import pytest
import torch
import torch.distributed as dist
import torch.nn as nn

from calculators.memory.estimate import estimate_memory
from calculators.planning.export import export
from calculators.specs.errors import ConfigError
from calculators.specs.hardware import ClusterSpec, gpu_from_name
from calculators.specs.parallel import ParallelConfig, check_layout, zero_shards
from calculators.specs.presets import model_from_name
from calculators.time.comm import Group, hsdp_groups
from calculators.time.step import estimate_step

H100 = gpu_from_name("H100-80GB")
L8B = model_from_name("llama3-8b")
FSDP = ParallelConfig(framework="fsdp2", dp=32, zero=3, mbs=1, gbs=32, seq=8192, compile=True, recompute="full")


def test_each_rank_holds_what_fully_shard_gives_it_on_a_replicate_by_shard_mesh():
    """fully_shard on a (dp_replicate, dp_shard) mesh shards each weight over dp_shard ranks only:
    one rank's local share of every parameter, its gradient and its Adam moments is 1 / dp_shard,
    which is zero_shards' dense shard."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.testing._internal.distributed.fake_pg import FakeStore
    if dist.is_initialized():
        dist.destroy_process_group()
    dist.init_process_group("fake", store=FakeStore(), rank=5, world_size=16)
    try:
        for replicas in (1, 2, 4):
            mesh = init_device_mesh("cpu", (replicas, 16 // replicas), mesh_dim_names=("replicate", "shard"))
            net = nn.Sequential(nn.Linear(64, 256, bias=False), nn.Linear(256, 64, bias=False))
            for layer in net:
                fully_shard(layer, mesh=mesh)
            fully_shard(net, mesh=mesh)
            net(torch.randn(2, 64)).sum().backward()
            opt = torch.optim.AdamW(net.parameters())
            opt.step()
            par = ParallelConfig(framework="fsdp2", dp=16, dp_replicate=replicas, zero=3, gbs=16)
            for p in net.parameters():
                share = p.to_local().numel() / p.numel()
                assert share == pytest.approx(1 / zero_shards(par)[0])
                assert p.grad.to_local().numel() / p.numel() == share
                assert opt.state[p]["exp_avg"].to_local().numel() / p.numel() == share
    finally:
        dist.destroy_process_group()


def test_fully_shard_reduces_every_micro_batch_and_hsdp_all_reduces_each_time():
    """What dp_sync charges FSDP2 for: one reduce-scatter per FSDP unit per micro-batch, and under
    HSDP one all-reduce across the replicas after each (PyTorch's collectives counted on a fake
    process group, three micro-batches of gradient accumulation with the sync left on, as torchtitan
    runs it), at ZeRO 3 and at ZeRO 2 (reshard_after_forward False) alike."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.testing._internal.distributed.fake_pg import FakeStore
    from calculators.time.dpsync import reduces_every_micro_batch
    scatter = "reduce_scatter_single" if hasattr(dist, "reduce_scatter_single") else "reduce_scatter_tensor"
    counts = {"all_reduce": 0, scatter: 0}
    originals = {name: getattr(dist, name) for name in counts}

    def counting(name):
        def call(*args, **kwargs):
            counts[name] += 1
            return originals[name](*args, **kwargs)
        return call
    if dist.is_initialized():
        dist.destroy_process_group()
    dist.init_process_group("fake", store=FakeStore(), rank=5, world_size=16)
    try:
        for name in counts:
            setattr(dist, name, counting(name))
        for replicas, reshard in ((4, True), (4, False), (1, True)):
            mesh = init_device_mesh("cpu", (replicas, 16 // replicas), mesh_dim_names=("replicate", "shard")) \
                if replicas > 1 else init_device_mesh("cpu", (16,), mesh_dim_names=("shard",))
            net = nn.Sequential(nn.Linear(64, 256, bias=False), nn.Linear(256, 64, bias=False))
            for layer in net:
                fully_shard(layer, mesh=mesh, reshard_after_forward=reshard)
            fully_shard(net, mesh=mesh, reshard_after_forward=reshard)
            for name in counts:
                counts[name] = 0
            for _ in range(3):
                net(torch.randn(2, 64)).sum().backward()
            assert counts[scatter] == 3 * 2
            assert counts["all_reduce"] == (3 * 2 if replicas > 1 else 0)
    finally:
        for name, fn in originals.items():
            setattr(dist, name, fn)
        dist.destroy_process_group()
    for zero in (2, 3):
        assert reduces_every_micro_batch(replace(FSDP, zero=zero))
        assert not reduces_every_micro_batch(replace(FSDP, zero=zero, pp=2))


def test_dp_sync_adds_the_replicas_all_reduce_and_keeps_the_gathers_in_the_shard_group():
    from calculators.time.comm import collective_time
    from calculators.time.dpsync import dp_sync
    from calculators.time.profiles import default_profile
    cluster, prof = ClusterSpec(H100, nodes=4), default_profile("H100-80GB")
    whole = Group(32, 8, 4, 4)
    params, compute = 2e9, 0.0                     # no compute: everything the collectives take is exposed
    fsdp = dp_sync(params, 0, compute, 1, FSDP, cluster, prof, whole, Group(1, 1, 1), 4.0, (1, 0), 1)
    hsdp = dp_sync(params, 0, compute, 1, replace(FSDP, dp_replicate=4), cluster, prof, whole, Group(1, 1, 1),
                   4.0, (1, 0), 1)
    shard, reps = hsdp_groups(whole, 4)
    expected = (2 * collective_time("all_gather", 2 * params, shard, cluster, prof)   # forward and backward
                + collective_time("reduce_scatter", 4 * params, shard, cluster, prof)
                + collective_time("all_reduce", 4 * params / 8, reps, cluster, prof))
    assert hsdp[1] == pytest.approx(expected)
    assert fsdp[1] != pytest.approx(hsdp[1])
    # ZeRO 2 without a pipeline: each of m micro-batches reduces; with m = 4 and no compute, 4 times
    z2 = replace(FSDP, zero=2, dp_replicate=4)
    one = dp_sync(params, 0, compute, 1, z2, cluster, prof, whole, Group(1, 1, 1), 4.0, (1, 0), 1)
    four = dp_sync(params, 0, compute, 4, z2, cluster, prof, whole, Group(1, 1, 1), 4.0, (1, 0), 1)
    assert four[0] == pytest.approx(one[0]) and four[1] == pytest.approx(one[1] + 3 * one[0])


def test_hsdp_groups_split_the_data_parallel_group_by_node():
    shard, reps = hsdp_groups(Group(32, 8, 4, 4), 4)
    assert (shard.size, shard.per_node, shard.nodes) == (8, 8, 1)
    assert (reps.size, reps.per_node, reps.nodes) == (4, 1, 4)
    shard, reps = hsdp_groups(Group(256, 8, 32, 32), 64)          # 4-rank shards, two per node
    assert (shard.size, shard.nodes, reps.size, reps.per_node, reps.nodes) == (4, 1, 64, 2, 32)
    assert hsdp_groups(Group(32, 8, 4, 4), 1)[1].size == 1
    assert hsdp_groups(Group(32, 8, 4, 4), 3)[0].size == 32      # uneven: left whole


def test_hsdp_holds_more_state_per_gpu_and_exports_its_degrees():
    cluster = ClusterSpec(H100, nodes=4)
    fsdp, hsdp = FSDP, replace(FSDP, dp_replicate=4)
    m_fsdp, m_hsdp = (estimate_memory(L8B, cluster, p) for p in (fsdp, hsdp))
    assert m_hsdp.total_gib > m_fsdp.total_gib
    # the sharded states on 8 ranks, not 32: fp32 weights (4 bytes a parameter), the moments (8), the
    # gradients (4) where the step holds all of them (FSDP2 creates them in backward, frees them after)
    for role, nbytes in (("params_gib", 4), ("optimizer_gib", 8), ("grads_full_gib", 4)):
        grew = (m_hsdp.as_dict()[role] - m_fsdp.as_dict()[role]) * 2**30
        assert grew == pytest.approx(nbytes * L8B.total_params * (1 / 8 - 1 / 32), rel=1e-6), role
    # the step: the same compute; within 5% here (gathers inside a node, the gradient all-reduced across)
    s_fsdp, s_hsdp = (estimate_step(L8B, cluster, p) for p in (fsdp, hsdp))
    assert s_fsdp.breakdown["compute"] == pytest.approx(s_hsdp.breakdown["compute"])
    assert s_hsdp.breakdown["optimizer"] == pytest.approx(4 * s_fsdp.breakdown["optimizer"])  # its shard of 8, not 32
    assert s_hsdp.tokens_per_s_per_gpu == pytest.approx(s_fsdp.tokens_per_s_per_gpu, rel=0.05)
    text, _ = export("torchtitan", L8B, cluster, hsdp)
    assert "data_parallel_replicate_degree = 4" in text and "data_parallel_shard_degree = 8" in text


def test_experts_must_split_over_the_replicas_too():
    mixtral = model_from_name("mixtral-8x7b")
    par = replace(FSDP, dp_replicate=32, etp=2)               # the experts' 16 data-parallel ranks
    with pytest.raises(ConfigError, match="experts' data-parallel ranks"):
        check_layout(mixtral, ClusterSpec(H100, nodes=4), par)


@pytest.mark.parametrize("change, words", [
    ({"dp_replicate": 3}, "must divide dp=32"),
    ({"dp_replicate": 4, "zero": 1}, "already a replica"),
    ({"dp_replicate": 4, "framework": "megatron", "zero": 1, "compile": False}, "megatron has no such knob"),
])
def test_dp_replicate_outside_fsdp2_sharding_is_refused_by_name(change, words):
    with pytest.raises(ConfigError, match=words):
        check_layout(L8B, ClusterSpec(H100, nodes=4), replace(FSDP, **change))


def test_the_planner_takes_hsdp_where_it_pays_and_not_where_it_does_not():
    """At 8,192 GPUs FSDP's gathers over every rank wait on their latency, and the planner's fastest
    FSDP2 layout shards within groups of nodes; at 128 GPUs it shards over all of them."""
    from calculators.planning.planner import plan
    large = ClusterSpec(H100, nodes=1024)
    result = plan(L8B, large, seq=8192, gbs=8192, constraints={"framework": "fsdp2"})
    best = result.plans[0].par
    assert best.dp_replicate > 1 and "hsdp" in result.plans[0].label()
    check_layout(L8B, large, best)                               # a layout PyTorch can build
    assert best.dp * best.cp % best.dp_replicate == 0
    flat = estimate_step(L8B, large, replace(best, dp_replicate=1)).time_s
    assert result.plans[0].step.time_s < flat
    small = plan(L8B, ClusterSpec(H100, nodes=16), seq=8192, gbs=128, constraints={"framework": "fsdp2"})
    assert small.plans[0].par.dp_replicate == 1
