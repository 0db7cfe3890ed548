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


def test_hsdp_groups_split_the_data_parallel_group_by_node():
    shard, reps = hsdp_groups(Group(32, 8, 4, 4), 4)
    assert (shard.size, shard.per_node, shard.nodes) == (8, 8, 1)
    assert (reps.size, reps.per_node, reps.nodes) == (4, 1, 4)
    shard, reps = hsdp_groups(Group(256, 8, 32, 32), 64)          # 4-rank shards, two per node
    assert (shard.size, shard.nodes, reps.size, reps.per_node, reps.nodes) == (4, 1, 64, 2, 32)
    assert hsdp_groups(Group(32, 8, 4, 4), 1)[1].size == 1
    assert hsdp_groups(Group(32, 8, 4, 4), 3)[0].size == 32      # uneven: left whole


def test_hsdp_holds_more_state_per_gpu_and_moves_its_gathers_into_the_node():
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
    assert s_hsdp.tokens_per_s_per_gpu == pytest.approx(s_fsdp.tokens_per_s_per_gpu, rel=0.05)
    text, _ = export("torchtitan", L8B, cluster, hsdp)
    assert "data_parallel_replicate_degree = 4" in text and "data_parallel_shard_degree = 8" in text


@pytest.mark.parametrize("change, words", [
    ({"dp_replicate": 3}, "must divide dp=32"),
    ({"dp_replicate": 4, "zero": 1}, "already a replica"),
    ({"dp_replicate": 4, "framework": "megatron", "zero": 1, "compile": False}, "megatron has no such knob"),
])
def test_dp_replicate_outside_fsdp2_sharding_is_refused_by_name(change, words):
    with pytest.raises(ConfigError, match=words):
        check_layout(L8B, ClusterSpec(H100, nodes=4), replace(FSDP, **change))
