"""Pipeline schedules: the order each rank runs its ops in.

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

`rank_order` lists a rank's ops as (kind, stage, micro-batch) tuples; `order_arrays` gives the
same as arrays, built with numpy where the order has a closed form (the simulator's input).
"""
from __future__ import annotations

from functools import lru_cache

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


KIND_INDEX = {"F": 0, "B": 1, "I": 2, "W": 3}
KINDS = "FBIW"                   # KIND_INDEX's keys, in order


def order_arrays(schedule: str, p: int, v: int, m: int, r: int) -> tuple:
    """rank_order's ops as (kind index, stage, micro-batch) arrays. GPipe, 1F1B, ZB-H1 and
    interleaved 1F1B are built with numpy from their closed forms (the planner simulates 10^5-op
    pipelines; building them op by op cost as much as timing them); DualPipeV is read off rank_order."""
    F, B, I, W = (KIND_INDEX[k] for k in KINDS)
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
    if schedule == "interleaved":
        return _interleaved_arrays(p, v, m, r)
    ops = [op for item in rank_order(schedule, p, v, m, r) for op in (item if isinstance(item[0], tuple) else (item,))]
    kinds, stages, mbs = zip(*ops) if ops else ((), (), ())
    return (np.array([KIND_INDEX[k] for k in kinds], dtype=np.int64), np.array(stages, dtype=np.int64),
            np.array(mbs, dtype=np.int64))


def _interleaved_arrays(p: int, v: int, m: int, r: int) -> tuple:
    """_interleaved's order with numpy: the k-th forward runs chunk (k // per_round) mod v, the k-th
    backward chunk v-1 - (k // per_round) mod v, each on its chunk's next micro-batch; warm-up
    forwards, then forward/backward pairs, then the cool-down's backwards."""
    rounds = max(1, m // p)
    per_round, total = m // rounds, m * v
    warm = min((v - 1) * per_round + 2 * (p - 1 - r), total)
    k = np.arange(total)
    chunks = {"F": (k // per_round) % v, "B": v - 1 - (k // per_round) % v}
    stage, mb = {}, {}
    for key, c in chunks.items():
        mb[key] = np.empty(total, dtype=np.int64)
        for chunk in range(v):                  # each chunk's micro-batches in the order it meets them
            at = c == chunk
            mb[key][at] = np.arange(int(at.sum()))
        stage[key] = c * p + r
    n = total - warm
    F, B = KIND_INDEX["F"], KIND_INDEX["B"]

    def interleave(key_f, key_b):
        return np.concatenate([key_f[:warm], np.stack([key_f[warm:], key_b[:n]], axis=1).ravel(), key_b[n:]])
    kind = interleave(np.full(total, F), np.full(total, B))
    return kind, interleave(stage["F"], stage["B"]), interleave(mb["F"], mb["B"])
