"""Fit a profile's network knobs to measured bus bandwidths ("your cluster").

A measurement is (collective, nodes, bytes, busbw GB/s) for a group spanning `nodes` whole
nodes, as nccl-tests or `python -m benchmarks collectives` report it. Two steps:
1. single-node measurements set the intra-node efficiency of their collective directly
   (busbw / NVLink GB/s, corrected for the ring's latency term);
2. multi-node ones fit `fabric_gbps` (and the inter-node efficiency of each collective measured
   on one node count only when the fabric does not limit it) by minimising the squared log error
   over a grid, so one outlier cannot drag the fit far.
"""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from .comm import bus_bandwidth, whole_cluster
from ..specs.hardware import ClusterSpec
from .profiles import HardwareProfile


def _with_intra(profile: HardwareProfile, cluster: ClusterSpec, measured) -> HardwareProfile:
    eff = {t: dict(v) for t, v in profile.efficiency.items()}
    for op, nodes, nbytes, busbw in measured:
        if nodes != 1 or busbw <= 0:
            continue
        g = whole_cluster(cluster, 1)
        trial = replace(profile, efficiency={**eff, "intra": {**eff["intra"], op: 1.0}})
        at_one = bus_bandwidth(op, nbytes, g, cluster, trial)       # busbw at efficiency 1
        eff["intra"][op] = max(0.05, min(1.5, busbw / at_one))
    return replace(profile, efficiency=eff)


def fit_network(profile: HardwareProfile, cluster: ClusterSpec, measured) -> HardwareProfile:
    """`measured`: iterable of (op, nodes, nbytes, busbw_gbps). Returns a fitted copy."""
    measured = [(op, int(n), float(s), float(bw)) for op, n, s, bw in measured if bw and bw > 0]
    prof = _with_intra(profile, cluster, measured)
    multi = [x for x in measured if x[1] > 1]
    if not multi:
        return prof

    def loss(fabric: float) -> float:
        trial = replace(prof, fabric_gbps=fabric)
        return sum(math.log(bus_bandwidth(op, s, whole_cluster(cluster, n), cluster, trial) / bw) ** 2
                   for op, n, s, bw in multi)

    best = min([0.0] + list(np.geomspace(1.0, 1e5, 21)), key=loss)   # coarse, then around the best
    if best > 0:
        best = min([best] + list(np.geomspace(best / 1.8, best * 1.8, 21)), key=loss)
    return replace(prof, fabric_gbps=float(best),
                   source=f"{prof.source}; network fitted to {len(measured)} bus-bandwidth measurements")
