"""The planner against the nanotron runs: does it pick what was measured fastest?

    python -m validation.planner

Per (model, nodes, gbs, seq) cell with at least two successful runs, the planner searches the
space those runs cover (ZeRO 0/1, TP with SP, 1F1B, no recompute, no CP, nanotron's memory
layout and its cost-based layer split, the cell's micro-batch sizes; TP may cross nodes as some
runs did). Reported: how often the measured best is among the planner's top 5, and, where the
planner's top plan was measured, its throughput over the best measured. Pipeline-parallel runs
made before nanotron's multi-node PP fix are left out (validation/time.py says why).
"""
from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass

from calculators.specs.errors import ConfigError
from calculators.planning.planner import plan

from .nanotron import cluster_profile, load_runs
from .time import scored

TOP = 5
CLUSTER_PROFILE = cluster_profile()      # its measured all-gather and reduce-scatter (validation.nanotron)


@dataclass(frozen=True)
class PlannerCheck:
    cells: int
    in_top: int                  # cells whose measured best is in the planner's top 5
    ratios: tuple                # measured(top plan) / best measured, where the top plan was measured
    rows: tuple                  # (model, nodes, gbs, runs, hit, ratio or None)


def _key(par) -> tuple:
    return par.dp, par.tp, par.pp, par.mbs, par.zero


def check() -> PlannerCheck:
    cells = defaultdict(list)
    for r in load_runs():
        if r.outcome == "ok" and r.tokens_per_s_per_gpu and scored(r):
            cells[(r.model.name, r.cluster.nodes, r.par.gbs, r.par.seq)].append(r)
    rows, ratios, hits = [], [], 0
    for (name, nodes, gbs, seq), runs in sorted(cells.items()):
        if len(runs) < 2:
            continue
        measured = defaultdict(float)
        for r in runs:
            measured[_key(r.par)] = max(measured[_key(r.par)], r.tokens_per_s_per_gpu)
        best = max(measured, key=measured.get)
        space = {"zero": [0, 1], "schedule": ["1f1b"], "recompute": ["none"], "cp": [1], "framework": "nanotron",
                 "tp_across_nodes": True, "uneven_split": False, "mbs": sorted({r.par.mbs for r in runs})}
        try:
            result = plan(runs[0].model, runs[0].cluster, seq, gbs, space, top=TOP, profile=CLUSTER_PROFILE)
        except ConfigError:
            continue
        keys = [_key(p.par) for p in result.plans]
        hit = best in keys
        hits += hit
        ratio = measured[keys[0]] / measured[best] if keys and keys[0] in measured else None
        if ratio is not None:
            ratios.append(ratio)
        rows.append((name, nodes, gbs, len(runs), hit, ratio))
    return PlannerCheck(cells=len(rows), in_top=hits, ratios=tuple(ratios), rows=tuple(rows))


def main() -> None:
    c = check()
    print(f"{'model':<26} {'nodes':>5} {'gbs':>5} {'runs':>5}  best in top {TOP}  measured(top) / best")
    for name, nodes, gbs, n, hit, ratio in c.rows:
        print(f"{name:<26} {nodes:>5} {gbs:>5} {n:>5}  {'yes' if hit else 'no':>14}  "
              f"{'not measured' if ratio is None else f'{ratio:.1%}':>20}")
    print(f"\nmeasured best in the planner's top {TOP}: {c.in_top} of {c.cells} cells; the top plan, where it was "
          f"measured ({len(c.ratios)} cells), reaches on average {statistics.mean(c.ratios):.1%} of the best "
          "measured throughput.")


if __name__ == "__main__":
    main()
