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
- zb (ZB-H1, Qi et al. 2023): 1f1b's F/I order; rank r lets up to r weight passes wait, so
  every rank's peak stays at 1F1B's rank 0 (p micro-batches), and runs a waiting W whenever it
  would otherwise sit idle.
- dualpipe (DualPipeV, DeepSeek-V3 report sec. 3.2.1): two stages per rank in a V; the steady
  state runs a forward of one stage overlapped with a backward of the other.

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

SCHEDULE_NAMES = ("gpipe", "1f1b", "interleaved", "zb", "dualpipe")


def Op(kind: str, stage: int, mb: int) -> tuple:
    """One op: (kind, stage, micro-batch); kind is "F", "B", "I" or "W"."""
    return (kind, stage, mb)


def stages_of_rank(schedule: str, p: int, v: int, rank: int) -> list[int]:
    if schedule == "dualpipe":
        return [rank, 2 * p - 1 - rank]
    if schedule == "interleaved":
        return [c * p + rank for c in range(v)]
    return [rank]


def n_stages(schedule: str, p: int, v: int) -> int:
    return 2 * p if schedule == "dualpipe" else p * v if schedule == "interleaved" else p


# ----------------------------------------------------------------------------------- orders
def _gpipe(p: int, m: int, r: int) -> list:
    return [Op("F", r, i) for i in range(m)] + [Op("B", r, i) for i in range(m)]


def _one_f_one_b(p: int, m: int, r: int, bwd: str = "B") -> list:
    warm = min(p - 1 - r, m)
    ops = [Op("F", r, i) for i in range(warm)]
    for i in range(m - warm):
        ops += [Op("F", r, warm + i), Op(bwd, r, i)]
    return ops + [Op(bwd, r, i) for i in range(m - warm, m)]


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
        return _one_f_one_b(p, m, r, bwd="I")
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
    peak_inflight: tuple         # per rank, in units of the rank's layers
    _ran: list = field(repr=False, compare=False, default_factory=list)
    _starts: list = field(repr=False, compare=False, default_factory=list)
    _cost: list = field(repr=False, compare=False, default_factory=list)
    _S: int = 0

    @cached_property
    def ops(self) -> tuple:
        return tuple(tuple((k, st, mb, t, t + self._cost[KIND_INDEX[k] * self._S + st])
                           for (k, st, mb), t in zip(ran, starts))
                     for ran, starts in zip(self._ran, self._starts))

    @property
    def bubble_fraction(self) -> float:
        """Idle time of the busiest rank over its compute time ((p-1)/m for 1F1B)."""
        busiest = max(self.busy)
        return (self.makespan - busiest) / busiest if busiest else 0.0


def simulate(schedule: str, p: int, m: int, v: int = 1, f=1.0, b=1.0, w=1.0, p2p: float = 0.0,
             record: bool = True) -> Timeline:
    """Time every op of one step. f, b, w: per-micro-batch cost of a stage's forward, input-
    backward and weight-backward (a number, or one per stage); a full B costs b + w."""
    S = n_stages(schedule, p, v)
    f, b, w = (_per_stage(x, S) for x in (f, b, w))
    cost = f + [x + y for x, y in zip(b, w)] + b + w          # indexed by KIND_INDEX[kind] * S + stage
    orders = _compiled(schedule, p, v, m)
    unit = 1.0 / len(stages_of_rank(schedule, p, v, 0))
    zb = schedule == "zb"                      # ZB-H1: the simulator places the W's
    done = [-1.0] * (2 * S * m)                # end of F (first half) and of B/I (second half)
    ptr, free, busy = [0] * p, [0.0] * p, [0.0] * p
    alive, peak = [0.0] * p, [0.0] * p
    pending_w: list[list] = [[] for _ in range(p)]
    ran: list[list] = [[] for _ in range(p)]
    starts: list[list] = [[] for _ in range(p)]
    blocked: dict[int, list[int]] = {}
    todo = list(range(p))

    while todo:
        r = todo.pop()
        order, pend = orders[r], pending_w[r]
        n = len(order)
        while True:
            advance = False
            if zb and len(pend) > r:           # ZB-H1: rank r lets at most r weight passes wait
                parts, t = (pend.pop(0),), free[r]
            elif ptr[r] < n:
                parts = order[ptr[r]]
                t, missing = free[r], -1
                for _, _, _, dep, cross in parts:   # when is each op's input on this rank?
                    if dep >= 0:
                        ready = done[dep]
                        if ready < 0:
                            missing = dep
                            break
                        ready += cross * p2p
                        if ready > t:
                            t = ready
                if missing >= 0:
                    blocked.setdefault(missing, []).append(r)
                    break
                if pend and free[r] + cost[pend[0][1]] <= t:   # a waiting W fits in the gap
                    parts, t = (pend.pop(0),), free[r]
                else:
                    advance = True
            elif pend:
                parts, t = (pend.pop(0),), free[r]
            else:
                break
            for op, cost_at, out, _, _ in parts:
                dur = cost[cost_at]
                if record:
                    ran[r].append(op)
                    starts[r].append(t)
                t += dur
                busy[r] += dur
                if out >= 0:
                    done[out] = t
                    if out in blocked:
                        todo.extend(blocked.pop(out))
                kind = op[0]
                if kind == "F":
                    alive[r] += unit
                    if alive[r] > peak[r]:
                        peak[r] = alive[r]
                elif kind == "I" and zb:
                    pend.append(_w_part(op, S))
                elif kind != "I":
                    alive[r] -= unit
            free[r] = t
            if advance:
                ptr[r] += 1
    if any(ptr[r] < len(orders[r]) for r in range(p)):
        raise RuntimeError(f"{schedule} deadlocked: p={p}, v={v}, m={m}")   # a bug, never bad input
    return Timeline(makespan=max(free), busy=tuple(busy), peak_inflight=tuple(peak),
                    _ran=ran, _starts=starts, _cost=cost, _S=S)


KIND_INDEX = {"F": 0, "B": 1, "I": 2, "W": 3}


def _w_part(op: tuple, S: int) -> tuple:
    return (("W", op[1], op[2]), 3 * S + op[1], -1, -1, 0)


@lru_cache(maxsize=64)
def _compiled(schedule: str, p: int, v: int, m: int) -> tuple:
    """Orders with each op's indices precomputed: (op, cost index, own end slot, input's end
    slot or -1, 1 if the input crosses ranks)."""
    S = n_stages(schedule, p, v)
    owner = {st: r for r in range(p) for st in stages_of_rank(schedule, p, v, r)}
    out = []
    for r, order in enumerate(_orders(schedule, p, v, m)):
        items = []
        for parts in order:
            compiled = []
            for op in parts:
                kind, st, mb = op
                own = st * m + mb if kind == "F" else -1 if kind == "W" else S * m + st * m + mb
                if kind == "F":
                    src, dep = st - 1, (st - 1) * m + mb
                elif kind == "W":
                    src, dep = st, -1
                elif st == S - 1:
                    src, dep = st, st * m + mb
                else:
                    src, dep = st + 1, S * m + (st + 1) * m + mb
                if kind == "F" and st == 0:
                    dep = -1
                cross = int(dep >= 0 and owner[src] != r)
                compiled.append((op, KIND_INDEX[kind] * S + st, own, dep, cross))
            items.append(tuple(compiled))
        out.append(tuple(items))
    return tuple(out)


@lru_cache(maxsize=64)
def _orders(schedule: str, p: int, v: int, m: int) -> tuple:
    """Every rank's order, each item a tuple of the ops run together (two when overlapped)."""
    return tuple(tuple(x if isinstance(x[0], tuple) else (x,) for x in rank_order(schedule, p, v, m, r))
                 for r in range(p))


def _per_stage(x, S: int) -> list[float]:
    if isinstance(x, (int, float)):
        return [float(x)] * S
    x = [float(y) for y in x]
    if len(x) != S:
        raise ValueError(f"expected {S} per-stage costs, got {len(x)}")
    return x


# ---------------------------------------------------------------------------- for the memory
@lru_cache(maxsize=4096)
def _inflight_all(schedule: str, p: int, v: int, m: int) -> tuple:
    return simulate(schedule, p, m, v, record=False).peak_inflight


def inflight_microbatches(schedule: str, pp: int, vpp: int, m: int, rank: int) -> float:
    """Peak micro-batches whose activations rank `rank` holds, in units of its whole layers.

    From the simulator with equal stage costs (F = I = W = 1; B = 2) and free p2p; 1F1B gives
    min(p - r, m), GPipe m.
    """
    if pp == 1:
        return 1.0
    return _inflight_all(schedule, pp, vpp if schedule == "interleaved" else 1, m)[rank]


def closed_form_bubble(schedule: str, p: int, v: int, m: int) -> float:
    """The textbook bubble fraction, for comparison: (p-1)/m, or (p-1)/(v m) interleaved."""
    return (p - 1) / (v * m) if schedule == "interleaved" else (p - 1) / m
