"""Collectives: placement on the rank grid, the cost formulas, and the docstring's worked example."""
import pytest

from calculators.time.comm import (Group, bus_bandwidth, collective_time, dispatch_time, expert_group, experts_hit, group,
                             whole_cluster)
from calculators.specs.errors import ConfigError
from calculators.specs.hardware import ClusterSpec, gpu_from_name
from calculators.specs.parallel import ParallelConfig
from calculators.time.profiles import default_profile

H100 = gpu_from_name("H100-80GB")
PROF = default_profile("H100-80GB")
MiB = 2**20


def test_megatron_rank_order_puts_tp_inside_a_node_and_dp_pp_across():
    cluster = ClusterSpec(H100, nodes=16)
    par = ParallelConfig(tp=8, pp=4, dp=4, gbs=64)
    assert group("tp", par, cluster) == Group(8, 8, 1)
    assert group("dp", par, cluster) == Group(4, 1, 4)          # one GPU per node, 4 nodes
    assert group("pp", par, cluster) == Group(4, 1, 4)
    par = ParallelConfig(tp=2, dp=8, gbs=64)
    cluster = ClusterSpec(H100, nodes=2)
    assert group("dp", par, cluster) == Group(8, 4, 2)          # stride 2: 4 per node on 2 nodes
    assert group(("cp", "ep", "dp"), par, cluster) == Group(8, 4, 2)
    with pytest.raises(ConfigError, match="permutation"):
        group("tp", par, cluster, order=("tp", "dp", "pp"))


def test_expert_groups_fold_over_the_stage_as_megatron_does():
    """Experts sit on their own grid over one stage's tp*cp*dp ranks: expert TP, then EP, then the
    replicas. Qwen3-235B's recipe (tp 2, etp 1, ep 32, pp 8 on 256 GPUs): 32 consecutive ranks, all
    8 GPUs of 4 nodes, each expert held once; with etp = tp (Mixtral, tp 2, ep 8) EP members are tp
    apart, and the 2 replicas of an expert sit 16 ranks apart, on other nodes."""
    cluster = ClusterSpec(H100, nodes=32)
    qwen = ParallelConfig(tp=2, etp=1, ep=32, pp=8, dp=16, gbs=2048)
    assert expert_group("ep", qwen, cluster) == Group(32, 8, 4, sharing=32)
    assert expert_group("edp", qwen, cluster) == Group(1, 1, 1)
    mix = ParallelConfig(tp=2, ep=8, dp=16, gbs=64)
    assert expert_group("ep", mix, ClusterSpec(H100, nodes=4)) == Group(8, 4, 2, sharing=4)
    assert expert_group("edp", mix, ClusterSpec(H100, nodes=4)) == Group(2, 1, 2, sharing=4)
    staged = ParallelConfig(tp=1, ep=4, dp=4, pp=2, gbs=64)       # pp innermost: a stage's ranks are 2 apart
    assert expert_group("ep", staged, ClusterSpec(H100, nodes=1), order=("pp", "tp", "cp", "ep", "dp")) == \
        Group(4, 4, 1, sharing=1)
    with pytest.raises(ConfigError, match="'ep' or 'edp'"):
        expert_group("dp", mix, cluster)


def test_worked_example_of_the_docstring():
    cluster = ClusterSpec(H100, nodes=2)
    g = Group(16, 8, 2)
    assert collective_time("all_reduce", 256 * MiB, g, cluster, PROF) == pytest.approx(1.82e-3, rel=0.01)
    assert bus_bandwidth("all_reduce", 256 * MiB, g, cluster, PROF) == pytest.approx(276, rel=0.01)


def test_ring_formulas_on_one_node():
    cluster = ClusterSpec(H100, nodes=1)
    g, S, a = Group(8, 8, 1), 512 * MiB, PROF.latency_us["intra"] * 1e-6
    bw = lambda op: PROF.efficiency["intra"][op] * 450e9
    assert collective_time("all_gather", S, g, cluster, PROF) == pytest.approx(7 * a + 7 / 8 * S / bw("all_gather"))
    assert collective_time("all_reduce", S, g, cluster, PROF) == pytest.approx(14 * a + 2 * 7 / 8 * S / bw("all_reduce"))
    # tree all-reduce only shortens the latency term: 2 log2(8) = 6 steps instead of 14
    assert collective_time("all_reduce", S, g, cluster, PROF, "tree") == pytest.approx(6 * a + 2 * 7 / 8 * S / bw("all_reduce"))
    assert collective_time("all_reduce", 1024, g, cluster, PROF, "auto") < collective_time("all_reduce", 1024, g, cluster, PROF)
    assert collective_time("all_reduce", S, Group(1, 1, 1), cluster, PROF) == 0.0
    with pytest.raises(ConfigError, match="unknown collective"):
        collective_time("gather", S, g, cluster, PROF)


def test_mi300x_collectives_run_at_the_rates_rccl_measured():
    """8 MI300X, fully connected (7 links of 64 GB/s each way): RCCL's all-reduce reached 316.8 GB/s
    bus bandwidth at 8 GB (Azure's AI benchmarking guide), and with no reduction in the fabric the
    all-gather and reduce-scatter read the same; a send between two GPUs has one link, 64 GB/s."""
    mi300x = gpu_from_name("MI300X")
    cluster, prof, g = ClusterSpec(mi300x, nodes=1), default_profile("MI300X"), Group(8, 8, 1)
    for op in ("all_reduce", "all_gather", "reduce_scatter"):
        assert bus_bandwidth(op, 8 * 2**30, g, cluster, prof) == pytest.approx(316.8, rel=0.01)
    send = collective_time("p2p", 8 * 2**30, Group(2, 2, 1), cluster, prof)
    assert 8 * 2**30 / send / 1e9 == pytest.approx(0.8 * 64, rel=0.01)
    # H100's all-reduce reduces in the NVLink switch, so its all-gather reads about half of it
    h100 = ClusterSpec(H100, nodes=1)
    assert bus_bandwidth("all_reduce", 8 * 2**30, g, h100, PROF) > 1.7 * bus_bandwidth("all_gather", 8 * 2**30, g, h100, PROF)


def test_crossing_nodes_costs_more_and_the_fabric_cap_bites_with_node_count():
    from dataclasses import replace
    cluster = ClusterSpec(H100, nodes=64)
    one, two = whole_cluster(cluster, 1), whole_cluster(cluster, 2)
    for op in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all"):
        assert bus_bandwidth(op, 256 * MiB, two, cluster, PROF) < bus_bandwidth(op, 256 * MiB, one, cluster, PROF)
    capped = replace(PROF, fabric_gbps=100)
    bws = [bus_bandwidth("all_reduce", 256 * MiB, whole_cluster(cluster, n), cluster, capped) for n in (4, 8, 16, 32)]
    assert all(b2 < b1 / 1.6 for b1, b2 in zip(bws, bws[1:]))    # about halving per doubling
    # p2p between nodes runs at the NIC share, inside a node at NVLink
    assert collective_time("p2p", 64 * MiB, Group(2, 1, 2), cluster, PROF) > \
        4 * collective_time("p2p", 64 * MiB, Group(2, 2, 1), cluster, PROF)


def test_concurrent_groups_share_the_fabric():
    """Every TP group of a job runs its collective at the same moment: a 16-GPU group on 2 nodes
    of a 32-node job gets the fabric's share of 32 nodes, not of 2; a non-blocking fabric
    (fabric_gbps 0) makes no difference."""
    from dataclasses import replace
    capped = replace(PROF, fabric_gbps=400.0)
    big = ClusterSpec(H100, nodes=32)
    par = ParallelConfig(tp=16, dp=16, gbs=64)
    g = group("tp", par, big)
    assert (g.size, g.per_node, g.nodes, g.fabric_nodes) == (16, 8, 2, 32)
    alone = collective_time("all_gather", 16 * MiB, Group(16, 8, 2), big, capped)
    shared = collective_time("all_gather", 16 * MiB, g, big, capped)
    assert shared > 1.5 * alone                              # the inter-node phase takes longer
    assert collective_time("all_gather", 16 * MiB, g, big, PROF) == pytest.approx(
        collective_time("all_gather", 16 * MiB, Group(16, 8, 2), big, PROF))
    assert whole_cluster(big, 4).fabric_nodes == 4          # a benchmark on 4 nodes shares among 4


def test_stage_local_groups_share_the_fabric_with_their_stage_only():
    """With a pipeline, the stages run other layers and micro-batches: a TP, CP or EP group, and a
    stage's pipeline sends, share the fabric with one stage's nodes (nodes / pp; a send at least
    the two nodes it joins); the gradient sync, run by every stage as its backward ends, with the
    whole job."""
    big = ClusterSpec(H100, nodes=32)
    par = ParallelConfig(tp=16, pp=4, dp=4, gbs=64)
    assert group("tp", par, big).fabric_nodes == 8
    assert group(("cp", "ep", "dp"), par, big).fabric_nodes == 32
    assert group("pp", par, big).fabric_nodes == 8
    deep = ParallelConfig(tp=16, pp=32, gbs=64)             # a stage narrower than its group: the group's own
    assert group("tp", deep, big).fabric_nodes == 2
    # a send joins two nodes: a pipeline of one stage per node shares with those two, not all 32
    assert group("pp", ParallelConfig(tp=8, pp=32, gbs=64), big).fabric_nodes == 2
    moe = ParallelConfig(tp=1, pp=2, dp=128, ep=32, gbs=256)
    assert expert_group("ep", moe, big).fabric_nodes == 16 and expert_group("edp", moe, big).fabric_nodes == 32


def test_experts_hit_is_the_expected_count_over_every_routing():
    import itertools
    for experts, top_k, parts in ((16, 4, 4), (12, 3, 6), (8, 2, 1), (8, 8, 4)):
        per = experts // parts
        combos = list(itertools.combinations(range(experts), top_k))
        exact = sum(len({e // per for e in c}) for c in combos) / len(combos)
        assert experts_hit(experts, top_k, parts) == pytest.approx(exact)


def test_group_limited_routing_reaches_fewer_nodes():
    """DeepSeek-V3 draws a token's 8 experts from 4 of its 8 expert groups (node-limited routing):
    over 8 nodes, one group each, it reaches 3.63 nodes on average instead of 5.30 (the exact count
    agrees with sampling the router); over 4 nodes 2.93 instead of 3.61. Shapes where groups
    neither tile nor split the nodes are taken as unlimited."""
    import random
    assert experts_hit(256, 8, 8, (8, 4)) == pytest.approx(3.629, abs=1e-3)
    assert experts_hit(256, 8, 8) == pytest.approx(5.295, abs=1e-3)
    rng = random.Random(0)

    def sampled(parts, n=20000):
        hits = 0
        for _ in range(n):
            pool = [e for grp in rng.sample(range(8), 4) for e in range(32 * grp, 32 * grp + 32)]
            hits += len({e // (256 // parts) for e in rng.sample(pool, 8)})
        return hits / n
    for parts in (4, 8, 32, 64):
        assert experts_hit(256, 8, parts, (8, 4)) == pytest.approx(sampled(parts), rel=0.01)
        assert experts_hit(256, 8, parts, (8, 4)) <= experts_hit(256, 8, parts)
    assert experts_hit(240, 8, 12, (8, 4)) == experts_hit(240, 8, 12)
    # DeepEP's dispatch over 8 nodes of H100 sends a token across the network to fewer of them
    cluster, g = ClusterSpec(H100, nodes=8), Group(64, 8, 8)
    limited = dispatch_time(2**28, 256, 8, g, cluster, PROF, (8, 4))
    assert limited == pytest.approx(3.629 / 5.295 * dispatch_time(2**28, 256, 8, g, cluster, PROF), rel=0.01)


def test_deepep_dispatch_sends_a_token_once_per_node():
    """Qwen3-235B's routing (128 experts, top 8) over EP 32 on 4 nodes: the all-to-all puts
    8 x 3/4 = 6 copies of a token on the network, DeepEP one per other node hit, 3.63 x 3/4."""
    cl = ClusterSpec(H100, nodes=4, gpus_per_node=8)
    g = Group(32, 8, 4)
    nbytes = 256 * MiB
    deep = dispatch_time(nbytes, 128, 8, g, cl, PROF)
    remote = experts_hit(128, 8, 4) * 3 / 4
    wire = nbytes * remote / (PROF.efficiency["inter"]["ep_dispatch"] * cl.inter_node_gbps * 1e9)
    assert deep == pytest.approx(wire, rel=0.01)                     # the NICs, not NVLink, bound it
    a2a = collective_time("all_to_all", nbytes * 8, g, cl, PROF)
    a2a_wire = nbytes * 8 * 3 / 4 / (PROF.efficiency["inter"]["all_to_all"] * cl.inter_node_gbps * 1e9)
    a2a_wire += 31 * PROF.latency_us["inter"] * 1e-6                 # a step's latency per peer
    assert a2a == pytest.approx(a2a_wire, rel=0.01)                  # a copy per expert, 3/4 of them remote
    assert a2a > 2 * deep                                            # 6 copies on the network against 2.72
    # inside one node only NVLink works; with one expert per token and per GPU it matches the
    # all-to-all's bytes, at DeepEP's efficiency
    one = ClusterSpec(H100, nodes=1, gpus_per_node=8)
    t = dispatch_time(nbytes, 8, 1, Group(8, 8, 1), one, PROF)
    nvl = PROF.efficiency["intra"]["ep_dispatch"] * one.intra_node_gbps * 1e9
    assert t == pytest.approx(7 * PROF.latency_us["intra"] * 1e-6 + nbytes * 7 / 8 / nvl)
    assert dispatch_time(nbytes, 128, 8, Group(1, 1, 1), cl, PROF) == 0.0


def test_dispatcher_is_checked():
    with pytest.raises(ConfigError, match="dispatcher"):
        ParallelConfig(dispatcher="nccl")
