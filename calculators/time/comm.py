"""Collective communication: where a group sits on the cluster, and how long a collective takes.

Rank grid. Ranks are numbered with the innermost axis varying fastest, in Megatron's order
tp, cp, ep, dp, pp (configurable): tp=8 on 8-GPU nodes fills a node, so TP talks over NVLink
and DP and PP cross nodes. A group along an axis of size n whose ranks are `stride` apart puts
`per_node` = min(n, max(1, gpus_per_node // stride)) members on each of n / per_node nodes.
This is Alpa's rule made quantitative: the chatty intra-operator axes (TP, CP, EP) innermost,
on fast links; the inter-operator axis (PP) and DP outermost, on slow links.

Cost of one collective over a group, with S the buffer's bytes as nccl-tests counts it (all-
reduce: the buffer; all-gather: the gathered output; reduce-scatter: the input; all-to-all:
each rank's send buffer; p2p: the message), B a tier's bus bandwidth (profile efficiency x link
GB/s) and alpha its per-step latency:
    ring:  all-reduce 2(n-1) alpha + 2 (n-1)/n S/B;  all-gather, reduce-scatter, all-to-all
           (n-1) alpha + (n-1)/n S/B;  broadcast (n-1) alpha + S/B;  p2p alpha + S/B
    tree:  as ring but 2 log2(n) alpha for all-reduce (NCCL's double binary tree wins on latency)
    hierarchical (a group on k GPUs in each of N > 1 nodes): all-reduce = intra-node
           reduce-scatter + inter-node all-reduce of S/k on each of the k rails + intra-node
           all-gather; all-gather and reduce-scatter likewise in two phases; all-to-all sends
           (n-k)/n of its buffer over the NICs and (k-1)/n over NVLink at the same time.
    MoE dispatch with DeepEP (dispatch_time): one copy of a token per other node that holds
           one of its experts over the NICs, one per GPU holding one over NVLink.
Across nodes each GPU gets min(link, fabric_gbps / N_f) when the fabric is shared, with N_f the
nodes crossing it at once: a benchmark's N, but in training the groups of an axis run their
collective at the same moment, so a group spanning 2 nodes shares the fabric with all the nodes
doing the same (`group` sets N_f). Within one pipeline stage the data-parallel replicas run the
same layer, and send to the next stage, at the same moment; the stages run other layers and
micro-batches. So TP, CP and EP groups and the pipeline's sends share with one stage's nodes
(nodes / pp; for a send at least the two nodes it joins, not its whole pipeline), and the
gradient sync, which every stage runs as its backward ends, with the whole job. nanotron's runs
on a degraded fabric show both: without a pipeline, cross-node TP at 16 MB messages ran 3 to 5
times slower than the group's own 2-node bandwidth predicts; with one, TP across 2 nodes ran 1.3
to 5.4 times faster than sharing with the whole job predicts, and pipelines of 8 to 32 stages
(one per node) ran 10 to 50% faster than sends sharing with the whole job predict (validation.time,
README).
Worked example, H100 (NVLink 450 GB/s, 50 GB/s NIC per GPU, default profile), all-reduce of
256 MiB over 16 GPUs on 2 nodes: two intra-node phases of 7 x 3 us + 7/8 x 256 MiB / 459 GB/s,
then 2 x 15 us + 2 x 1/2 x 32 MiB / 45 GB/s across nodes: 1.82 ms, busbw 276 GB/s (tested).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache

from ..specs.errors import ConfigError
from ..specs.hardware import ClusterSpec
from ..specs.parallel import ParallelConfig
from .dispatch import default_sms, measured_nvlink_time, nic_share
from .profiles import HardwareProfile

DEFAULT_ORDER = ("tp", "cp", "ep", "dp", "pp")
_BUS_FACTOR = {"all_reduce": lambda n: 2 * (n - 1) / n, "all_gather": lambda n: (n - 1) / n,
               "reduce_scatter": lambda n: (n - 1) / n, "all_to_all": lambda n: (n - 1) / n,
               "broadcast": lambda n: 1.0, "p2p": lambda n: 1.0}


@dataclass(frozen=True)
class Group:
    size: int                    # n ranks
    per_node: int                # k ranks of the group on each node it touches
    nodes: int                   # N nodes it spans
    sharing: int = field(default=0, compare=False)   # nodes crossing the fabric at once (0: N)

    @property
    def fabric_nodes(self) -> int:
        return self.sharing or self.nodes

    @property
    def crosses_nodes(self) -> bool:
        return self.nodes > 1


def axis_sizes(par: ParallelConfig) -> dict[str, int]:
    """Sizes on the rank grid. EP splits the data-parallel ranks (Megatron: ep inside dp*cp),
    so the grid's ep axis is ep and its dp axis the remaining dp / ep replicas of each expert."""
    ep_in_dp = math.gcd(par.ep, par.dp)
    return {"tp": par.tp, "cp": par.cp, "ep": ep_in_dp, "dp": par.dp // ep_in_dp, "pp": par.pp}


def group(axes, par: ParallelConfig, cluster: ClusterSpec, order=DEFAULT_ORDER) -> Group:
    """The placement of one group spanning `axes` (one name, or several: the dense gradients
    reduce over ("cp", "ep", "dp"), every rank holding the same dense weights)."""
    if sorted(order) != sorted(DEFAULT_ORDER):
        raise ConfigError(f"rank order must be a permutation of {'-'.join(DEFAULT_ORDER)} (got {'-'.join(order)})")
    members = (axes,) if isinstance(axes, str) else tuple(axes)
    return _group(members, tuple(axis_sizes(par).items()), cluster.gpus_per_node, cluster.nodes, tuple(order))


@lru_cache(maxsize=4096)
def _group(members: tuple, sizes: tuple, g: int, nodes: int, order: tuple) -> Group:
    sizes = dict(sizes)
    n = math.prod(sizes[a] for a in members)
    if n == 1:
        return Group(1, 1, 1)
    inner = order[:min(order.index(a) for a in members)]
    stride = math.prod(sizes[a] for a in inner)
    per_node = min(n, max(1, g // stride))
    spans = math.ceil(n / per_node)
    if "dp" in members:
        return Group(n, per_node, spans, sharing=nodes)
    # a pipeline send joins two nodes, whatever the length of the pipeline it belongs to
    joined = min(spans, 2) if members == ("pp",) else spans
    return Group(n, per_node, spans, sharing=_stage_nodes(nodes, sizes["pp"], joined))


def hsdp_groups(g: Group, replicas: int) -> tuple[Group, Group]:
    """HSDP's two groups inside a data-parallel group `g` of `replicas` replicas: one replica's shard
    group (g.size / replicas consecutive ranks, the innermost of g on the grid, as torchtitan's
    (dp_replicate, dp_shard) mesh lays them out) and the replicas of one shard (strided by the
    shard size). A group that does not split evenly stays whole, with no replicas."""
    if replicas <= 1 or g.size % replicas or g.size <= 1:
        return g, Group(1, 1, 1)
    s = g.size // replicas
    k = min(s, g.per_node)
    shard = Group(s, k, math.ceil(s / k), sharing=g.sharing) if s > 1 else Group(1, 1, 1)
    per_node = min(replicas, max(1, g.per_node // s))        # replicas whose shards share a node
    return shard, Group(replicas, per_node, math.ceil(replicas / per_node), sharing=g.sharing)


def _stage_nodes(nodes: int, pp: int, spans: int) -> int:
    """Nodes whose groups run a collective at the same moment when it is not the gradient sync (TP,
    CP, EP, and a stage's pipeline sends): one stage's."""
    return max(spans, nodes // pp)


def expert_group(kind: str, par: ParallelConfig, cluster: ClusterSpec, order=DEFAULT_ORDER) -> Group:
    """The placement of an expert-parallel group (`kind` "ep": the all-to-all) or of an expert's
    data-parallel replicas ("edp": its gradient reduction). Megatron folds the experts onto the
    ranks of one pipeline stage (tp*cp*dp of them) as its own grid, expert TP innermost, then EP,
    then the edp = tp*cp*dp / (etp*ep) replicas: with etp=1 an EP group is consecutive ranks even
    when TP > 1 (tp=2, ep=32: 32 ranks on 4 nodes, not 16 spread over 4)."""
    if kind not in ("ep", "edp"):
        raise ConfigError(f"expert group kind must be 'ep' or 'edp' (got {kind!r})")
    sizes = axis_sizes(par)
    edp = max(1, par.tp * par.cp * par.dp // (par.ep * par.etp))
    n, stride = (par.ep, par.etp) if kind == "ep" else (edp, par.etp * par.ep)
    if n == 1:
        return Group(1, 1, 1)
    stage_block = math.prod(sizes[a] for a in order[:order.index("pp")])   # a stage's ranks lie in blocks
    if stride >= stage_block:                                                # of this many, pp blocks apart
        stride *= par.pp
    per_node = min(n, max(1, cluster.gpus_per_node // stride))
    spans = math.ceil(n / per_node)
    sharing = cluster.nodes if kind == "edp" else _stage_nodes(cluster.nodes, par.pp, spans)
    return Group(n, per_node, spans, sharing=sharing)


# A fabric giving each GPU under this fraction of its NIC, with every node crossing it, is degraded:
# on the nanotron jobs that measured one the time model missed most (validation.time, README).
DEGRADED_FABRIC = 0.2


def fabric_share(cluster: ClusterSpec, profile: HardwareProfile, nodes: int | None = None) -> float:
    """GB/s of cross-node bandwidth per GPU (before collective efficiency) when `nodes` nodes (default:
    the cluster's) all cross the fabric at once: the NIC's share, or less on a blocking fabric."""
    nic = cluster.inter_node_gbps
    return nic if profile.fabric_gbps <= 0 else min(nic, profile.fabric_gbps / (nodes or cluster.nodes))


def _link(tier: str, cluster: ClusterSpec, profile: HardwareProfile, op: str, nodes: int) -> float:
    """Bus bandwidth, bytes/s, of one GPU on a tier for one collective."""
    gbps = cluster.intra_node_gbps if tier == "intra" else fabric_share(cluster, profile, nodes)
    return profile.efficiency[tier][op] * gbps * 1e9


def _flat(op: str, nbytes: float, n: int, tier: str, cluster: ClusterSpec, profile: HardwareProfile,
          nodes: int, algo: str) -> float:
    if n <= 1 or nbytes <= 0:
        return 0.0
    alpha = profile.latency_us[tier] * 1e-6
    steps = 1 if op == "p2p" else 2 * (n - 1) if op == "all_reduce" else n - 1
    if op == "all_reduce" and algo in ("tree", "auto"):
        tree = 2 * math.ceil(math.log2(n))
        steps = tree if algo == "tree" else min(steps, tree)
    return steps * alpha + _BUS_FACTOR[op](n) * nbytes / _link(tier, cluster, profile, op, nodes)


def collective_time(op: str, nbytes: float, grp: Group, cluster: ClusterSpec, profile: HardwareProfile,
                    algo: str = "ring") -> float:
    """Seconds for one collective of `nbytes` over `grp` (see the module docstring)."""
    if op not in _BUS_FACTOR:
        raise ConfigError(f"unknown collective {op!r}; choose one of {', '.join(_BUS_FACTOR)}")
    n, k, N, F = grp.size, grp.per_node, grp.nodes, grp.fabric_nodes
    if n <= 1 or nbytes <= 0:
        return 0.0
    if N == 1:
        return _flat(op, nbytes, n, "intra", cluster, profile, 1, algo)
    if k == 1 or op in ("p2p", "broadcast"):
        return _flat(op, nbytes, N if k == 1 else n, "inter", cluster, profile, F, algo)
    if op == "all_to_all":
        alpha = (n - 1) * profile.latency_us["inter"] * 1e-6
        over_nics = (n - k) / n * nbytes / _link("inter", cluster, profile, op, F)
        over_nvlink = (k - 1) / n * nbytes / _link("intra", cluster, profile, op, 1)
        return alpha + max(over_nics, over_nvlink)
    intra_op = {"all_reduce": ("reduce_scatter", "all_gather")}.get(op, (op,))
    t = _flat(op, nbytes / k, N, "inter", cluster, profile, F, algo)
    for phase in intra_op:
        # An all-reduce's two intra-node phases run at the all-reduce's own efficiency (NVLink
        # SHARP does them in the switch); all-gather/reduce-scatter at theirs.
        t += _flat(phase, nbytes, k, "intra", cluster, profile, 1, algo) * (
            profile.efficiency["intra"][phase] / profile.efficiency["intra"][op])
    return t


def experts_hit(experts: int, top_k: int, parts: int, groups: tuple = (0, 0)) -> float:
    """Expected number of `parts` (equal shares of `experts`: nodes or GPUs) that hold at least one
    of a token's top_k distinct experts, routed uniformly (balanced routing).

    `groups` = (G, g): group-limited routing (DeepSeek-V3's node-limited routing: n_group 8,
    topk_group 4), the experts in G equal contiguous groups, a token's top_k drawn uniformly from
    the experts of g of them, chosen uniformly. Experts sit on the parts in order (expert
    parallelism's layout), so where G is a multiple of the parts each part holds G/parts whole
    groups, and where the parts are a multiple of G each group spans parts/G of them; other shapes
    are taken as unlimited."""
    parts = max(1, min(parts, experts))
    G, g = groups
    if not G or G % parts and parts % G:
        miss = math.comb(experts - experts // parts, top_k) / math.comb(experts, top_k)
        return parts * (1 - miss)
    per_group = experts // G
    pool = g * per_group                                 # the experts a token draws from
    if G % parts == 0:                                   # a part holds `mine` whole groups
        mine = G // parts
        hit = sum(math.comb(mine, j) * math.comb(G - mine, g - j) / math.comb(G, g)
                  * (1 - math.comb(pool - j * per_group, top_k) / math.comb(pool, top_k))
                  for j in range(1, min(mine, g) + 1))
    else:                                                # a part holds a slice of one group
        hit = g / G * (1 - math.comb(pool - experts // parts, top_k) / math.comb(pool, top_k))
    return parts * hit


def dispatch_time(nbytes: float, experts: int, top_k: int, grp: Group, cluster: ClusterSpec,
                  profile: HardwareProfile, groups: tuple = (0, 0), token_bytes: float = 0.0,
                  dispatcher: str = "", sms: int = 0) -> float:
    """Seconds for one DeepEP-style MoE dispatch (or combine) of a rank's tokens, `nbytes` for one
    copy of each, over the expert-parallel group `grp`. A token crosses the network once per other
    node holding one of its experts, and NVLink carries one copy per GPU holding one, all at once
    (the all-to-all instead sends a copy per expert: top_k of them). Routing is taken as balanced;
    an imbalanced router sends more to its busiest rank; group-limited routing (`groups`,
    experts_hit) sends a token to fewer nodes. With `dispatcher` "deepep", DeepEP's kernels among at
    most 8 GPUs of one Blackwell node run at their measured rate on `sms` SMs (0: DeepEP's 20) for
    tokens of `token_bytes`, no faster than the links (dispatch.py); otherwise, and for HybridEP, at
    a share of the links, and across fewer than 8 nodes a smaller share of the NICs (DeepEP's half of
    it over 2; dispatch.nic_share)."""
    n, k, N = grp.size, grp.per_node, grp.nodes
    if n <= 1 or nbytes <= 0:
        return 0.0
    alpha = ((N - 1) * profile.latency_us["inter"] + (k - 1) * profile.latency_us["intra"]) * 1e-6
    over_nvlink = nbytes * experts_hit(experts, top_k, n, groups) * (k - 1) / k / \
        _link("intra", cluster, profile, "ep_dispatch", 1)
    if N == 1:
        measured = measured_nvlink_time(nbytes * experts_hit(experts, top_k, n, groups), token_bytes,
                                        cluster.gpu.name, dispatcher, sms or default_sms(dispatcher), n)
        # a measured kernel time holds its own latency; the link still bounds it
        return max(measured, alpha + over_nvlink) if measured is not None else alpha + over_nvlink
    over_nics = nbytes * experts_hit(experts, top_k, N, groups) * (N - 1) / N / \
        _link("inter", cluster, profile, "ep_dispatch", grp.fabric_nodes)
    over_nics /= nic_share(dispatcher, N)   # DeepEP's and HybridEP's kernels use less of the NIC over 2 nodes
    return alpha + max(over_nics, over_nvlink)


def bus_bandwidth(op: str, nbytes: float, grp: Group, cluster: ClusterSpec, profile: HardwareProfile,
                  algo: str = "ring") -> float:
    """nccl-tests' busbw, GB/s: algorithm bandwidth times the collective's bus factor."""
    t = collective_time(op, nbytes, grp, cluster, profile, algo)
    return _BUS_FACTOR[op](grp.size) * nbytes / t / 1e9 if t else 0.0


def whole_cluster(cluster: ClusterSpec, nodes: int | None = None) -> Group:
    """All GPUs of `nodes` nodes (default: the cluster), as a benchmark's world group."""
    N = nodes or cluster.nodes
    return Group(N * cluster.gpus_per_node, cluster.gpus_per_node, N)
