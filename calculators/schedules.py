"""Pipeline schedules: in-flight micro-batches per stage and the bubble, in closed form.

The memory model asks one question of a schedule: on pipeline rank i, how many micro-batches'
activations (in units of the rank's whole set of layers) are alive at the peak. Closed forms:

- gpipe (all forward, then all backward): m.
- 1f1b: rank i runs p - i warm-up forwards before its first backward: min(p - i, m).
  Worked example, p=4, m=8: ranks hold 4, 3, 2, 1 micro-batches.
- zb (ZB-H1): splits backward into B and W but keeps 1F1B's warm-up, so 1F1B's counts.
- interleaved (Megatron, v chunks per rank): rank i warms up (p - i - 1) * 2 + (v - 1) * p + 1
  chunks of 1/v of its layers, so rank 0 holds p + (p - 1)/v stage-equivalents
  (Korthikanti et al. 2022, sec. 4.2.3: 1 + (p-1)/(p v) times 1F1B's p).
- dualpipe (DualPipeV, one copy of the weights): p + 1 on every rank (DeepSeek-V3 report, table 2).

These are the closed forms the pipeline simulator of the time model must reproduce.
"""
from __future__ import annotations


def inflight_microbatches(schedule: str, pp: int, vpp: int, m: int, rank: int) -> float:
    if pp == 1:
        return 1.0
    if schedule == "gpipe":
        return float(m)
    if schedule in ("1f1b", "zb"):
        return float(min(pp - rank, m))
    if schedule == "interleaved":
        chunks = (pp - rank - 1) * 2 + (vpp - 1) * pp + 1
        return min(chunks, m * vpp) / vpp
    if schedule == "dualpipe":
        return float(min(pp + 1, 2 * m))
    raise ValueError(f"unknown schedule {schedule!r}")


def bubble_fraction(schedule: str, pp: int, vpp: int, m: int) -> float:
    """Idle time over ideal compute time, (p - 1)/m for 1F1B and GPipe, (p - 1)/(v m) interleaved."""
    if pp == 1:
        return 0.0
    if schedule == "interleaved":
        return (pp - 1) / (vpp * m)
    if schedule == "zb":        # ZB-H1 removes about a third of 1F1B's bubble (Qi et al. 2023)
        return (pp - 1) / (3 * m)
    if schedule == "dualpipe":  # DualPipe overlaps forward and backward chunks: (p/2 - 1) / m
        return max(pp / 2 - 1, 0) / m
    return (pp - 1) / m
