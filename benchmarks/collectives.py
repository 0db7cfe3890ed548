"""The collectives suite: bus bandwidth vs message size, per collective and group placement, as
nccl-tests reports it (busbw = algbw x bus factor: all-reduce 2(n-1)/n; all-gather,
reduce-scatter, all-to-all (n-1)/n; broadcast and send/recv 1), with the calculators'
prediction for the same group.

Placements: "world" (every rank), and on several nodes "intra" (the ranks of one node: NVLink)
and "inter" (one rank per node: the NICs). Sizes count bytes as nccl-tests does: the all-reduce
buffer, the gathered output of all-gather, the input of reduce-scatter, each rank's all-to-all
send buffer, the p2p message.
"""
from __future__ import annotations

import statistics
import time

import torch
import torch.distributed as dist

from calculators.time.comm import Group, bus_bandwidth
from calculators.specs.errors import ConfigError
from calculators.scenario import parse_hardware, parse_profile

from . import host

BUS_FACTOR = {"all_reduce": lambda n: 2 * (n - 1) / n, "all_gather": lambda n: (n - 1) / n,
              "reduce_scatter": lambda n: (n - 1) / n, "all_to_all": lambda n: (n - 1) / n,
              "broadcast": lambda n: 1.0, "p2p": lambda n: 1.0}
_GROUPS: dict = {}


def cases(ops, sizes, g: host.Grid, iters: int) -> list[dict]:
    unknown = [op for op in ops if op not in BUS_FACTOR]
    if unknown:
        raise ConfigError(f"unknown collective(s) {', '.join(unknown)}; choose from {', '.join(BUS_FACTOR)}")
    places = ["world"] + (["intra", "inter"] if g.nodes > 1 and g.local_world > 1 else [])
    return [{"op": op, "bytes": s, "placement": pl, "iters": iters} for pl in places for op in ops for s in sizes]


def _group(placement: str, g: host.Grid):
    """(process group, its size, ranks per node, nodes) for this rank; built once, by every rank."""
    if placement not in _GROUPS:
        if placement == "world":
            _GROUPS[placement] = (None, Group(g.world, min(g.world, g.local_world), g.nodes))
        elif placement == "intra":
            mine, _ = dist.new_subgroups(g.local_world)
            _GROUPS[placement] = (mine, Group(g.local_world, g.local_world, 1))
        elif placement == "inter":
            lists = [[n * g.local_world + r for n in range(g.nodes)] for r in range(g.local_world)]
            mine, _ = dist.new_subgroups_by_enumeration(lists)
            _GROUPS[placement] = (mine, Group(g.nodes, 1, g.nodes))
        else:
            raise ConfigError(f"placement must be world, intra or inter (got {placement!r})")
    return _GROUPS[placement]


def _op(op: str, nbytes: int, pg, n: int, rank_in_group: int, device: torch.device):
    """A closure running the collective once on buffers made here (bf16 on GPU, fp32 on CPU)."""
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    count = max(n, nbytes // torch.tensor([], dtype=dtype).element_size() // n * n)
    full = torch.ones(count, dtype=dtype, device=device)
    shard = torch.ones(count // n, dtype=dtype, device=device)
    if op == "all_reduce":
        return lambda: dist.all_reduce(full, group=pg)
    if op == "all_gather":
        return lambda: dist.all_gather_single(full, shard, group=pg)
    if op == "reduce_scatter":
        return lambda: dist.reduce_scatter_single(shard, full, group=pg)
    if op == "all_to_all":
        out = torch.empty_like(full)
        return lambda: dist.all_to_all_single(out, full, group=pg)
    if op == "broadcast":
        return lambda: dist.broadcast(full, group_src=0, group=pg)
    recv = torch.empty_like(full)

    def ring():                          # send to the next rank of the group, receive from the previous
        ranks = dist.get_process_group_ranks(pg) if pg is not None else list(range(n))
        ops = [dist.P2POp(dist.isend, full, ranks[(rank_in_group + 1) % n], group=pg),
               dist.P2POp(dist.irecv, recv, ranks[(rank_in_group - 1) % n], group=pg)]
        for w in dist.batch_isend_irecv(ops):
            w.wait()
    return ring


def measure(case: dict, g: host.Grid, device: torch.device) -> tuple[dict, dict]:
    if g.world < 2:
        raise ConfigError("collectives need at least 2 ranks: launch with torchrun --nproc-per-node N")
    op, nbytes, placement, iters = case["op"], int(case["bytes"]), case.get("placement", "world"), case.get("iters", 10)
    pg, grp = _group(placement, g)
    n = grp.size
    rank_in_group = dist.get_rank(pg) if pg is not None else g.rank
    fn = _op(op, nbytes, pg, n, rank_in_group, device)
    for _ in range(2):
        fn()
    times = []
    for _ in range(iters):
        host.synchronize(device)
        dist.barrier()
        t0 = time.perf_counter()
        fn()
        host.synchronize(device)
        times.append(time.perf_counter() - t0)
    t = torch.tensor([statistics.median(times)], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)              # the slowest rank sets the time
    seconds = float(t)
    algbw = nbytes / seconds / 1e9
    metrics = {"op": op, "bytes": nbytes, "group_size": n, "group_nodes": grp.nodes, "time_s": seconds,
               "algbw_gbps": algbw, "busbw_gbps": algbw * BUS_FACTOR[op](n)}
    return metrics, _predict(op, nbytes, grp, device, g)


def _predict(op, nbytes, grp, device, g) -> dict:
    try:
        hw = host.hardware(device, g)
        cluster = parse_hardware(hw)
        return {"busbw_gbps": bus_bandwidth(op, nbytes, grp, cluster, parse_profile(hw, cluster))}
    except ConfigError as exc:
        return {"error": str(exc)}
