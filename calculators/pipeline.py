"""Pipeline schedules: the order each rank runs its ops in, and a simulator that times them.

Ops: F (forward of one micro-batch through one stage), B (full backward), I (backward for the
input only) and W (backward for the weights only); zero-bubble schedules split B into I and W.
A pipeline of p ranks holds S stages: S = p, or p * v for interleaved (rank r holds stages
r, r + p, ...), or 2p for DualPipeV (rank r holds stage r and stage 2p - 1 - r, a "V").

Orders, per rank r, for m micro-batches (they follow torch.distributed.pipelining's schedules,
tests/calculators/test_pipeline.py compares them op for op):
- gpipe: all m forwards, then all m backwards.
- 1f1b: p - 1 - r warm-up forwards, then one forward and one backward until the forwards run
  out, then the remaining backwards. Worked example, p=4, m=8: rank 0 holds 4 micro-batches
  at its peak, rank 3 holds 1.
- interleaved (Narayanan et al. 2021): as 1f1b over m*v chunk-ops, in rounds of p micro-batches
  per chunk, with (v-1)*p + 2(p-1-r) warm-up forwards.
- zb (ZB-H1, Qi et al. 2023): 1f1b's order with B split into I and W; rank r lets up to r
  W's wait, so every rank's peak is 1F1B's rank 0 (p micro-batches), and in the cool-down
  runs one after each I, where 1F1B would wait. With F = I = W its bubble is a third of 1F1B's.
- dualpipe (DualPipeV, DeepSeek-V3 report sec. 3.2.1): two stages per rank in a V; the steady
  state pairs a forward of one stage with a backward of the other, so each one's
  communication hides behind the other's compute. The simulator runs a pair back to back.

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

SCHEDULE_NAMES = ("gpipe", "1f1b", "interleaved", "zb", "dualpipe")


def Op(kind: str, stage: int, mb: int) -> tuple:
    """One op: (kind, stage, micro-batch); kind is "F", "B", "I" or "W"."""
    return (kind, stage, mb)


@lru_cache(maxsize=8192)
def stages_of_rank(schedule: str, p: int, v: int, rank: int) -> tuple[int, ...]:
    if schedule == "dualpipe":
        return (rank, 2 * p - 1 - rank)
    if schedule == "interleaved":
        return tuple(c * p + rank for c in range(v))
    return (rank,)


@lru_cache(maxsize=1024)
def stage_owner(schedule: str, p: int, v: int) -> tuple[int, ...]:
    """The rank that runs each pipeline stage."""
    owner = [0] * n_stages(schedule, p, v)
    for r in range(p):
        for st in stages_of_rank(schedule, p, v, r):
            owner[st] = r
    return tuple(owner)


def n_stages(schedule: str, p: int, v: int) -> int:
    return 2 * p if schedule == "dualpipe" else p * v if schedule == "interleaved" else p


# ----------------------------------------------------------------------------------- orders
def _gpipe(p: int, m: int, r: int) -> list:
    return [Op("F", r, i) for i in range(m)] + [Op("B", r, i) for i in range(m)]


def _one_f_one_b(p: int, m: int, r: int) -> list:
    warm = min(p - 1 - r, m)
    ops = [Op("F", r, i) for i in range(warm)]
    for i in range(m - warm):
        ops += [Op("F", r, warm + i), Op("B", r, i)]
    return ops + [Op("B", r, i) for i in range(m - warm, m)]


def _zb_h1(p: int, m: int, r: int) -> list:
    """1F1B with B split into I and W; rank r keeps up to r W's waiting in the steady state and
    runs one after each I of the cool-down, where it would otherwise wait for the next rank."""
    ops, waiting = [], 0
    for op in _one_f_one_b(p, m, r):
        if op[0] != "B":
            ops.append(op)
            continue
        ops.append(Op("I", r, op[2]))
        waiting += 1
        cooling = op[2] >= m - min(p - 1 - r, m)
        if waiting > r or cooling:
            ops.append(Op("W", r, op[2] - waiting + 1))
            waiting -= 1
    return ops + [Op("W", r, mb) for mb in range(m - waiting, m)]


def _interleaved(p: int, v: int, m: int, r: int) -> list:
    rounds = max(1, m // p)
    per_round = m // rounds                    # micro-batches per round of one chunk
    total = m * v
    warm = min((v - 1) * per_round + 2 * (p - 1 - r), total)
    fwd_mb, bwd_mb = [0] * v, [0] * v
    ops = []

    def forward(k):
        c = (k // per_round) % v
        ops.append(Op("F", c * p + r, fwd_mb[c]))
        fwd_mb[c] += 1

    def backward(k):
        c = v - 1 - ((k - warm) // per_round) % v
        ops.append(Op("B", c * p + r, bwd_mb[c]))
        bwd_mb[c] += 1

    for k in range(warm):
        forward(k)
    for k in range(warm, total):
        forward(k)
        backward(k)
    for k in range(total, total + warm):
        backward(k)
    return ops


def _dualpipe_v(p: int, m: int, r: int) -> list:
    """DualPipeV's eight phases for rank r (stages s0 = r going down, s1 = 2p-1-r coming back).

    An overlapped pair (forward of one stage with the full backward of the other) is a tuple.
    """
    s0, s1 = r, 2 * p - 1 - r
    nxt = {}                                   # (stage, kind) -> next micro-batch
    waiting_w: list[tuple] = []
    ops: list = []

    def take(stage, kind):
        key = (stage, "B" if kind in "BI" else kind)
        mb = nxt.get(key, 0)
        nxt[key] = mb + 1
        op = Op(kind, stage, mb)
        if kind == "I":
            waiting_w.append(Op("W", stage, mb))
        return op

    def weight():
        if waiting_w:
            ops.append(waiting_w.pop(0))

    ops += [take(s0, "F") for _ in range(2 * (p - r - 1))]            # 1: F0
    for _ in range(r + 1):                                             # 2: F0 F1
        ops += [take(s0, "F"), take(s1, "F")]
    for _ in range(p - r - 1):                                         # 3: I1 W1 F1
        ops.append(take(s1, "I"))
        weight()
        ops.append(take(s1, "F"))
    for i in range(m - 2 * p + r + 1):                                 # 4: (F0 B1) (F1 B0)
        if i == 0 and r == p - 1:
            ops += [take(s0, "F"), take(s1, "B")]
        else:
            ops.append((take(s0, "F"), take(s1, "B")))
        ops.append((take(s1, "F"), take(s0, "B")))
    for _ in range(p - r - 1):                                         # 5: B1 (F1 B0)
        ops.append(take(s1, "B"))
        ops.append((take(s1, "F"), take(s0, "B")))
    split = False
    for i in range(r + 1):                                             # 6: B1 B0, then I1 I0
        if i == (r + 1) // 2 and r % 2 == 1:
            split = True
        ops.append(take(s1, "I" if split else "B"))
        if i == (r + 1) // 2 and r % 2 == 0:
            split = True
        ops.append(take(s0, "I" if split else "B"))
    for _ in range(p - r - 1):                                         # 7: W0 B0
        weight()
        ops.append(take(s0, "I" if split else "B"))
    for _ in range(r + 1):                                             # 8: W0
        weight()
    return ops


def rank_order(schedule: str, p: int, v: int, m: int, r: int) -> list:
    if schedule == "gpipe":
        return _gpipe(p, m, r)
    if schedule == "1f1b":
        return _one_f_one_b(p, m, r)
    if schedule == "zb":
        return _zb_h1(p, m, r)
    if schedule == "interleaved":
        return _interleaved(p, v, m, r)
    if schedule == "dualpipe":
        return _dualpipe_v(p, m, r)
    raise ValueError(f"unknown schedule {schedule!r}; choose one of {SCHEDULE_NAMES}")


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
    def bubble_fraction(self) -> float:
        """Idle time of the busiest rank over its compute time ((p-1)/m for 1F1B)."""
        busiest = max(self.busy)
        return (self.makespan - busiest) / busiest if busiest else 0.0


def simulate(schedule: str, p: int, m: int, v: int = 1, f=1.0, b=1.0, w=1.0, p2p: float = 0.0,
             record: bool = True) -> Timeline:
    """Time every op of one step. f, b, w: per-micro-batch cost of a stage's forward, input-
    backward and weight-backward (a number, or one per stage); a full B costs b + w.

    Each rank runs its ops in order; an op starts when the rank is free and its input is there.
    Ranks are advanced in turn; a rank waiting on an input not yet timed parks until it is.
    """
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


KIND_INDEX = {"F": 0, "B": 1, "I": 2, "W": 3}


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


KINDS = "FBIW"                   # KIND_INDEX's keys, in order


def _order_arrays(schedule: str, p: int, v: int, m: int, r: int) -> tuple:
    """rank_order's ops as (kind index, stage, micro-batch) arrays. GPipe, 1F1B and ZB-H1 are
    built with numpy from their closed forms (the planner simulates 10^5-op pipelines; building
    them op by op cost as much as timing them); the others are read off rank_order."""
    F, B, I, W = range(4)
    if schedule == "gpipe":
        return np.repeat([F, B], m), np.full(2 * m, r), np.tile(np.arange(m), 2)
    if schedule in ("1f1b", "zb"):
        warm = min(p - 1 - r, m)
        n = m - warm
        kind = np.concatenate([np.full(warm, F), np.tile([F, B], n), np.full(warm, B)])
        mb = np.concatenate([np.arange(warm), np.stack([warm + np.arange(n), np.arange(n)], axis=1).ravel(),
                             np.arange(n, m)])
        if schedule == "zb":
            # each B becomes an I; a W follows the I of micro-batch j when j >= r (rank r lets r
            # W's wait) or in the cool-down (j >= m - warm); W's run first in, first out
            then_w = (kind == B) & ((mb >= r) | (mb >= m - warm))
            reps = 1 + then_w
            kind, mb = np.repeat(kind, reps), np.repeat(mb, reps)
            second = np.zeros(len(kind), dtype=bool)
            second[np.cumsum(reps)[then_w] - 1] = True
            kind[kind == B] = I
            kind[second] = W
            done = int(then_w.sum())
            mb[second] = np.arange(done)
            kind = np.concatenate([kind, np.full(m - done, W)])
            mb = np.concatenate([mb, np.arange(done, m)])
        return kind, np.full(len(kind), r), mb
    ops = [op for item in rank_order(schedule, p, v, m, r) for op in (item if isinstance(item[0], tuple) else (item,))]
    kinds, stages, mbs = zip(*ops) if ops else ((), (), ())
    return (np.array([KIND_INDEX[k] for k in kinds], dtype=np.int64), np.array(stages, dtype=np.int64),
            np.array(mbs, dtype=np.int64))


@lru_cache(maxsize=64)
def _compiled(schedule: str, p: int, v: int, m: int) -> tuple:
    """Each rank's ops with the indices the simulator reads (vectorised: p=64, m=1024 is 10^5 ops)."""
    S = n_stages(schedule, p, v)
    owner = np.array(stage_owner(schedule, p, v), dtype=np.int64)
    plans = []
    for r in range(p):
        kind, st, mb = _order_arrays(schedule, p, v, m, r)
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
    peaks = []
    for plan in _compiled(schedule, p, v, m):
        alive = peak = 0.0
        for kind in plan.kind:                     # F: 0, B: 1, I: 2, W: 3
            alive += unit if kind == 0 else -unit if kind in (1, 3) else 0.0
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


def closed_form_bubble(schedule: str, p: int, v: int, m: int) -> float:
    """The textbook bubble fraction, for comparison: (p-1)/m, or (p-1)/(v m) interleaved."""
    return (p - 1) / (v * m) if schedule == "interleaved" else (p - 1) / m
