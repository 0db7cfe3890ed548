"""Pipeline simulator: times every op of the schedules' orders (calculators/pipeline/schedules.py).

The simulator gives every op a start and an end; an op starts when its rank is free and its
input exists (the previous stage's F for F; the next stage's B or I for B and I, or this
stage's F on the last stage), plus the p2p time when that input comes from another rank.
Activation memory counts a micro-batch's stage as alive from its F until its B (or W when
split), in units of the rank's whole layers. The memory model reads its in-flight counts from
here (`inflight_microbatches`), so memory and schedule can never disagree.

Closed forms it reproduces with equal stage costs and free p2p (tested): bubble (p-1)/m for
gpipe and 1f1b, (p-1)/(v m) for interleaved; 1f1b's in-flight min(p - r, m).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property, lru_cache

import numpy as np

from ..specs.errors import ConfigError
from .schedules import KIND_INDEX, KINDS, order_arrays, n_stages, stage_owner, stages_of_rank


# -------------------------------------------------------------------------------- simulator
@dataclass(frozen=True)
class Timeline:
    """A simulated pipeline step. `ops[r]` lists (kind, stage, mb, start, end) on rank r."""
    makespan: float
    busy: tuple                  # compute time per rank
    _shape: tuple = ()           # (schedule, p, v, m); () for a closed-form estimate
    _ops: tuple = field(repr=False, compare=False, default=())
    _starts: tuple = field(repr=False, compare=False, default=())
    _durations: tuple = field(repr=False, compare=False, default=())

    @cached_property
    def ops(self) -> tuple:
        return tuple(tuple((*op, t, t + d) for op, t, d in zip(*rank))
                     for rank in zip(self._ops, self._starts, self._durations))

    @cached_property
    def peak_inflight(self) -> tuple:
        """Per rank, in units of the rank's layers (read from the order only when asked: the
        planner times thousands of steps and never asks)."""
        return _peaks(*self._shape) if self._shape else ()

    @property
    def idle(self) -> float:
        """The busiest rank's idle time in the step: the bubble."""
        return self.makespan - max(self.busy)

    @property
    def bubble_fraction(self) -> float:
        """Idle time of the busiest rank over its compute time ((p-1)/m for 1F1B)."""
        busiest = max(self.busy)
        return self.idle / busiest if busiest else 0.0


def simulate(schedule: str, p: int, m: int, v: int = 1, f=1.0, b=1.0, w=1.0, p2p: float = 0.0,
             record: bool = True) -> Timeline:
    """Time every op of one step. f, b, w: per-micro-batch cost of a stage's forward, input-
    backward and weight-backward (a number, or one per stage); a full B costs b + w.

    Each rank runs its ops in order; an op starts when the rank is free and its input is there.
    Ranks are advanced in turn; a rank waiting on an input not yet timed parks until it is.
    """
    if schedule == "dualpipe" and m < 2 * p:       # its two directions each need p micro-batches
        raise ConfigError(f"dualpipe needs microbatches m = {m} >= 2*pp = {2 * p}")
    S = n_stages(schedule, p, v)
    f, b, w = (_per_stage(x, S) for x in (f, b, w))
    cost = f + [x + y for x, y in zip(b, w)] + b + w          # indexed by KIND_INDEX[kind] * S + stage
    plan = _compiled(schedule, p, v, m)
    durations = [[cost[i] for i in rank.cost_at] for rank in plan]
    done = [-1.0] * (2 * S * m)                # end of F (first half) and of B/I (second half)
    ptr, free = [0] * p, [0.0] * p
    starts = [[0.0] * len(rank.dep) for rank in plan]
    blocked: dict[int, list[int]] = {}
    todo = list(range(p))
    while todo:
        r = todo.pop()
        deps, cross, outs, dur, start_at = plan[r].dep, plan[r].cross, plan[r].out, durations[r], starts[r]
        i, t, n = ptr[r], free[r], len(deps)
        while i < n:
            d = deps[i]
            if d >= 0:
                ready = done[d]
                if ready < 0:                  # input not timed yet: park until it is
                    blocked.setdefault(d, []).append(r)
                    break
                if cross[i]:
                    ready += p2p
                if ready > t:
                    t = ready
            start_at[i] = t
            t += dur[i]
            o = outs[i]
            if o >= 0:
                done[o] = t
                if o in blocked:
                    todo.extend(blocked.pop(o))
            i += 1
        ptr[r], free[r] = i, t
    if any(ptr[r] < len(plan[r].dep) for r in range(p)):
        raise RuntimeError(f"{schedule} deadlocked: p={p}, v={v}, m={m}")   # a bug, never bad input
    return Timeline(makespan=max(free), busy=tuple(sum(d) for d in durations),
                    _shape=(schedule, p, v, m),
                    _ops=tuple(rank.ops for rank in plan) if record else (),
                    _starts=tuple(starts) if record else (), _durations=tuple(durations) if record else ())




# Pipelines longer than this many (stage, micro-batch) pairs are not simulated op by op: time and
# memory grow with it (a 16-stage, 4,096-micro-batch pipeline is 200,000 ops, 0.2 s and 40 MB).
SIM_OPS = 65_536


def simulate_long(schedule: str, p: int, m: int, v: int, f, b, w, p2p: float) -> tuple[Timeline | None, str]:
    """(simulate(..., record=False), "simulated") while the pipeline has at most SIM_OPS (stage,
    micro-batch) pairs. Longer, the steady state repeats and every p micro-batches add about the
    same time, so the makespan is extrapolated from two simulations with m1 = 32p + (m mod p) and
    m1 + 16p micro-batches (the same residue, so interleaved rounds and DualPipe's pairs line up),
    and each rank's busy time is m times its time per micro-batch: (timeline, "extrapolated"). On
    random stage costs and p2p times the extrapolation is within 0.5% of a full simulation for
    every schedule, most often within 1e-12 (tests/calculators/test_pipeline.py: a steady state
    can take tens of rounds to settle, and repeat over several of them). When even those are over
    SIM_OPS: (None, "closed form"), and the caller uses its closed form."""
    S = n_stages(schedule, p, v)
    if S * m <= SIM_OPS:
        return simulate(schedule, p, m, v, f=f, b=b, w=w, p2p=p2p, record=False), "simulated"
    m1 = 32 * p + m % p
    m2 = m1 + 16 * p
    if S * m2 > SIM_OPS or m2 >= m:
        return None, "closed form"
    t1, t2 = (simulate(schedule, p, n, v, f=f, b=b, w=w, p2p=p2p, record=False) for n in (m1, m2))
    slope = (t2.makespan - t1.makespan) / (m2 - m1)
    return Timeline(makespan=t2.makespan + slope * (m - m2), busy=tuple(x * m / m2 for x in t2.busy)), "extrapolated"


@dataclass(frozen=True)
class _RankPlan:
    """One rank's ops in order (overlapped pairs run back to back), with indices precomputed."""
    kind: tuple                  # KIND_INDEX of each op
    stage: tuple
    mb: tuple
    cost_at: tuple               # index into the cost list
    out: tuple                   # slot of `done` this op fills (-1: a W, nobody waits on it)
    dep: tuple                   # slot of `done` holding this op's input (-1: none)
    cross: tuple                 # 1 if that input comes from another rank (pays p2p)

    @cached_property
    def ops(self) -> tuple:
        """(kind, stage, mb) per op, as rank_order gives them."""
        return tuple(zip(map(KINDS.__getitem__, self.kind), self.stage, self.mb))


@lru_cache(maxsize=16)
def _compiled(schedule: str, p: int, v: int, m: int) -> tuple:
    """Each rank's ops with the indices the simulator reads (vectorised: p=64, m=1024 is 10^5 ops).
    Kept for the 16 latest shapes: the largest takes 24 MB (ZB-H1, 64 stages x 1,024 micro-batches),
    so a server asked for ever new pipelines holds at most 0.4 GB of them; a plan simulates at most
    its 10 finalists' shapes, and memory reads closed forms for the common schedules."""
    S = n_stages(schedule, p, v)
    owner = np.array(stage_owner(schedule, p, v), dtype=np.int64)
    plans = []
    for r in range(p):
        kind, st, mb = order_arrays(schedule, p, v, m, r)
        fwd, wgt, last = kind == KIND_INDEX["F"], kind == KIND_INDEX["W"], st == S - 1
        out = np.where(fwd, st * m + mb, np.where(wgt, -1, (S + st) * m + mb))
        # F needs the previous stage's forward; W follows this rank's own I; the last stage starts
        # backward from its own loss; any other B or I needs the next stage's input gradient
        dep = np.where(fwd, np.where(st > 0, (st - 1) * m + mb, -1),
                       np.where(wgt, -1, np.where(last, st * m + mb, (S + st + 1) * m + mb)))
        src = np.where(fwd, st - 1, np.where(wgt | last, st, st + 1))
        cross = (dep >= 0) & (owner[np.clip(src, 0, S - 1)] != r)
        plans.append(_RankPlan(tuple(kind.tolist()), tuple(st.tolist()), tuple(mb.tolist()),
                               tuple((kind * S + st).tolist()), tuple(out.tolist()), tuple(dep.tolist()),
                               tuple(cross.astype(np.int64).tolist())))
    return tuple(plans)


@lru_cache(maxsize=4096)
def _peaks(schedule: str, p: int, v: int, m: int) -> tuple:
    """Peak alive micro-batches per rank, from the order alone: a stage's activations live from
    its F until its B, or its W when B is split (W still reads the saved inputs)."""
    unit = 1.0 / len(stages_of_rank(schedule, p, v, 0))
    F, B, W = KIND_INDEX["F"], KIND_INDEX["B"], KIND_INDEX["W"]
    peaks = []
    for plan in _compiled(schedule, p, v, m):
        alive = peak = 0.0
        for kind in plan.kind:
            alive += unit if kind == F else -unit if kind in (B, W) else 0.0
            peak = max(peak, alive)
        peaks.append(peak)
    return tuple(peaks)


def _per_stage(x, S: int) -> list[float]:
    if isinstance(x, (int, float)):
        return [float(x)] * S
    x = [float(y) for y in x]
    if len(x) != S:
        raise ValueError(f"expected {S} per-stage costs, got {len(x)}")
    return x


# ---------------------------------------------------------------------------- for the memory
def inflight_microbatches(schedule: str, pp: int, vpp: int, m: int, rank: int) -> float:
    """Peak micro-batches whose activations rank `rank` holds, in units of its whole layers.

    From the simulator with equal stage costs (F = I = W = 1; B = 2) and free p2p; 1F1B gives
    min(p - r, m), GPipe m.
    """
    if pp == 1:
        return 1.0
    # The simulator's counts in closed form where they are exact (tests/calculators/test_pipeline.py
    # checks them on every p <= 8, m < 40): the planner asks for thousands of shapes.
    if schedule == "1f1b":
        return float(min(pp - rank, m))
    if schedule == "zb":
        return float(min(pp, m))
    if schedule == "gpipe":
        return float(m)
    if schedule == "dualpipe" and m >= 2 * pp:
        return pp + 0.5
    if schedule == "interleaved" and m % pp == 0:
        # Megatron's warm-up: 2 (p - r - 1) + (v - 1) p chunks before the first backward, plus
        # the one in flight; in units of the rank's v chunks
        return min(2 * (pp - rank - 1) + (vpp - 1) * pp + 1, m * vpp) / vpp
    return _peaks(schedule, pp, vpp if schedule == "interleaved" else 1, m)[rank]


def closed_form_bubble(schedule: str, p: int, v: int, m: int, f: float = 1.0, i: float = 1.0,
                       w: float = 1.0) -> float | None:
    """The textbook bubble (idle time of a rank over its compute) with equal stages and free p2p,
    for a forward f, input-backward i and weight-backward w per micro-batch and stage: (p-1)/m for
    GPipe and 1F1B, (p-1)/(v m) interleaved, (p-1)(f + i - w)/(m (f + i + w)) for ZB-H1 (Qi et al.
    2023: its W's fill the drain; a third of 1F1B's when f = i = w). DualPipeV has none in this
    form (its bubble depends on how forward and backward pairs overlap): None."""
    if schedule == "interleaved":
        return (p - 1) / (v * m)
    if schedule == "zb":
        return (p - 1) * max(0.0, f + i - w) / (m * (f + i + w))
    if schedule in ("gpipe", "1f1b"):
        return (p - 1) / m
    return None
