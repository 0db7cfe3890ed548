"""Predicted vs measured memory on the Ultra-Scale Playbook's nanotron runs.

    python -m validation.memory

Prints three checks, each against the measured file (validation/data/README.md explains it):
1. memory allocated between steps (weights, grads, optimizer state, buffers) vs `Mem Alloc`, on
   the rank that logged it (pipeline rank 0), for every successful run;
2. the fit / OOM call of `estimate_memory` (peak allocated <= USABLE_FRACTION x 79.65 GiB) vs what
   happened, over every run with a clear outcome, with the same call at other fractions, which
   is how the fraction was chosen: the best accuracy with at most 2% of OOM runs called fitting;
3. peak reserved (`Mem Res`) over predicted peak allocated: the caching allocator's overhead.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass

from calculators.specs.errors import ConfigError
from calculators.memory.estimate import USABLE_FRACTION, estimate_memory
from validation.nanotron import SOURCE, load_runs


@dataclass
class MemoryCheck:
    runs_ok: int
    alloc_median_error: float
    alloc_p90_error: float
    clear_outcome: int
    accuracy: float
    oom_called_fit: float
    ok_called_oom: float
    skipped: int
    reserved_over_peak_median: float
    sweep: list


def _percentile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def check(fraction: float = USABLE_FRACTION) -> MemoryCheck:
    rows, skipped = [], 0
    for run in load_runs():
        if run.outcome == "other":
            continue
        try:
            rows.append((run, estimate_memory(run.model, run.cluster, run.par)))
        except ConfigError:       # e.g. pp=32 with 16 layers: a stage with no layer, which we reject
            skipped += 1
    ok = [(r, e) for r, e in rows if r.outcome == "ok" and r.mem_alloc_gib]
    errors = [abs(e.stages[0].resident_gib - r.mem_alloc_gib) / r.mem_alloc_gib for r, e in ok]
    ratio = [r.mem_reserved_gib / e.stages[0].total_gib for r, e in ok if r.mem_reserved_gib]

    def classify(frac):
        n_oom = sum(r.outcome == "oom" for r, _ in rows)
        called_fit = [e.total_gib <= frac * e.capacity_gib for _, e in rows]
        wrong = sum(fit == (r.outcome == "oom") for (r, _), fit in zip(rows, called_fit))
        ff = sum(fit for (r, _), fit in zip(rows, called_fit) if r.outcome == "oom")
        fo = sum(not fit for (r, _), fit in zip(rows, called_fit) if r.outcome == "ok")
        return 1 - wrong / len(rows), ff / n_oom, fo / (len(rows) - n_oom)

    acc, ff, fo = classify(fraction)
    sweep = [(f / 100, *classify(f / 100)) for f in range(70, 101, 3)]
    return MemoryCheck(len(ok), statistics.median(errors), _percentile(errors, 0.9), len(rows), acc, ff, fo,
                       skipped, statistics.median(ratio), sweep)


def main() -> None:
    c = check()
    print(f"Memory model vs measured runs ({SOURCE})\n")
    print("| check | runs | result | target |\n|---|---|---|---|")
    print(f"| allocated between steps vs Mem Alloc, median abs error | {c.runs_ok} | {c.alloc_median_error:.1%} | <= 10% |")
    print(f"| allocated between steps vs Mem Alloc, 90th percentile | {c.runs_ok} | {c.alloc_p90_error:.1%} | |")
    print(f"| fit / OOM classified correctly (fits: peak <= {USABLE_FRACTION:.0%} of capacity) | {c.clear_outcome} | {c.accuracy:.1%} | >= 97% |")
    print(f"| OOM runs called fitting | | {c.oom_called_fit:.1%} | <= 2% |")
    print(f"| fitting runs called OOM | | {c.ok_called_oom:.1%} | |")
    print(f"| peak reserved / predicted peak allocated, median | {c.runs_ok} | {c.reserved_over_peak_median:.2f} | |")
    print(f"\nruns skipped as invalid layouts: {c.skipped}\n")
    print("| usable fraction | accuracy | OOM called fit | fit called OOM |\n|---|---|---|---|")
    for frac, acc, ff, fo in c.sweep:
        print(f"| {frac:.2f} | {acc:.1%} | {ff:.1%} | {fo:.1%} |")


if __name__ == "__main__":
    main()
