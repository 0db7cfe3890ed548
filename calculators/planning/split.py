"""Inter-operator parallelism: which layers each pipeline rank holds (Alpa's outer level).

The planner calls `balance_split` for layouts whose even split does not fit, or whose first
and last stages (embedding; output layer and loss; the most in-flight micro-batches on rank 0
under 1F1B) make one rank the bottleneck.
"""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from ..specs import limits
from ..specs.hardware import ClusterSpec
from ..memory.estimate import stage_memory_fn
from ..specs.models import ModelSpec
from ..specs.parallel import ParallelConfig
from ..time.profiles import HardwareProfile
from ..time.step import stage_costs


def balance_split(model: ModelSpec, cluster: ClusterSpec, par: ParallelConfig, profile: HardwareProfile,
                  usable_gib: float) -> tuple | None:
    """Layers per pipeline rank minimising the step, sum of stage times + (m-1) x the slowest,
    with every stage within `usable_gib`; None when no split fits.

    The layers are fixed, so the sum is too, and the step falls with the slowest stage: the DP
    finds, for each rank r and each count j of leading layers, the smallest possible slowest
    stage among ranks 0..r holding layers 0..j-1 (best[j] = min over n of max(best_prev[j-n],
    time of rank r with layers j-n..j-1), for every j at once with numpy). Stage time
    and memory are affine in the layers a rank holds (per-layer cost of its kind at the rank's
    recompute mode, plus the rank's own: embedding, output layer, in-flight micro-batches), taken
    from step.py and memory.py; a rank that recomputes is slower per layer, so it gets fewer.
    """
    p, L = par.pp, model.layers
    even = replace(par, split=())
    costs = stage_costs(model, cluster, even, profile)
    kind = [model.is_moe_layer(i) for i in range(L)]
    moe = np.array(kind)
    # a layer's cost on rank r, at r's recompute mode
    by_mode = {mode: np.where(moe, sum(costs.layer.get((True, mode), ())), sum(costs.layer.get((False, mode), ())))
               for mode in {par.rank_recompute(r) for r in range(p)}}
    per_layer = [by_mode[par.rank_recompute(r)] for r in range(p)]
    own = [costs.f[r] + costs.b[r] + costs.w[r] - per_layer[r][list(costs.layers[r])].sum() for r in range(p)]
    fn = stage_memory_fn(model, cluster, even)
    sample = {moe: kind.index(moe) for moe in model.layer_kinds}
    best = np.full(L + 1, math.inf)
    best[0] = 0.0
    start = np.zeros((p, L + 1), dtype=int)
    for r in range(p):
        limits.check_time()              # K (L+1) work per rank: the request's time budget, when it has one
        P = np.concatenate([[0.0], np.cumsum(per_layer[r])])
        one = {moe: fn(r, [k]).total_gib for moe, k in sample.items()}
        slope = {moe: fn(r, [k, k]).total_gib - one[moe] for moe, k in sample.items()}
        room = usable_gib - max(one[moe] - slope[moe] for moe in sample)
        M = np.concatenate([[0.0], np.cumsum([slope[k] for k in kind])])
        # no rank holds more layers than its memory has room for: K bounds the count n (two past the
        # quotient, for rounding), so only n <= K is looked at; the rest would be refused below anyway
        least = min(slope.values())
        K = L if least <= 0 else int(min(L, max(0.0, room) / least + 2))
        # every (count n, end j) at once: t[n-1, j] for rank r holding layers j-n..j-1
        j = np.arange(L + 1)[None, :]
        i = j - np.arange(1, K + 1)[:, None]
        at = np.maximum(i, 0)
        t = np.where((i >= 0) & (M[j] - M[at] <= room), np.maximum(best[at], own[r] + P[j] - P[at]), math.inf)
        # the fewest layers on rank r among equal times: argmin's first, the smallest n
        n = np.argmin(t, axis=0)                                # K >= 1: a model has a layer
        new = t[n, np.arange(L + 1)]
        start[r] = np.where(np.isfinite(new), j[0] - n - 1, 0)
        best = new
    if not np.isfinite(best[L]):
        return None
    split, end = [], L
    for r in range(p - 1, -1, -1):
        first = int(start[r][end])
        split.append(end - first)
        end = first
    return tuple(reversed(split))
