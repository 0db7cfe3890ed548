"""Alpa's inner level on one transformer layer: choose a sharding for every operator on a 2-D
device mesh with an integer program (scipy's HiGHS MILP), paying for compute, each operator's
own collectives, gradient sync and the resharding between consecutive operators.

The mesh has a slow axis (across nodes) and a fast axis (inside a node). A strategy gives each
mesh axis one role for the operator's matmul X[T, K] @ W[K, N]: split the tokens T (data
parallel: the weight's gradient is all-reduced over that axis), split K (row parallel: the
output is a partial sum, all-reduced over that axis), split N (column parallel: the output stays
sharded), or nothing (replicated: redundant compute). Attention splits tokens or heads.

    x[o, s] = 1 when operator o uses strategy s          (one per operator)
    y[o, s, t] = 1 when the edge o -> o+1 uses the pair (s, t): sum_t y[o, s, t] = x[o, s] and
                 sum_s y[o, s, t] = x[o+1, t]
    minimise  sum cost[o, s] x[o, s] + sum reshard[o, s, t] y[o, s, t]

Costs are seconds from compute.gemm_time and comm.collective_time, so the program prefers what
the rest of the calculators would: TP on the fast axis, data parallel on the slow one.
"""
from __future__ import annotations

import itertools
import time
from dataclasses import dataclass

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp

from ..memory.activations import BF16
from ..time.comm import Group, collective_time
from ..time.compute import gemm_time
from ..specs.hardware import ClusterSpec
from ..specs.models import ModelSpec
from ..time.profiles import HardwareProfile, default_profile

ROLES = ("T", "K", "N", None)     # what a mesh axis splits in one matmul


@dataclass(frozen=True)
class Op:
    name: str
    k: int                       # contraction dim (input features)
    n: int                       # output features
    attention: bool = False      # heads-parallel core: no weight, K = N = the heads' width


@dataclass(frozen=True)
class Solution:
    strategies: tuple            # per operator: (role of the slow axis, role of the fast axis)
    cost_s: float
    solve_s: float
    ops: tuple


def layer_ops(model: ModelSpec) -> tuple[Op, ...]:
    h = model.hidden
    return (Op("qkv", h, model.q_dim + 2 * model.kv_dim), Op("attention", model.q_dim, model.q_dim, True),
            Op("out_proj", model.q_dim, h), Op("mlp_up", h, model.ffn * (2 if model.mlp == "swiglu" else 1)),
            Op("mlp_down", model.ffn, h))


def _strategies(op: Op) -> list[tuple]:
    roles = ("T", "N", None) if op.attention else ROLES   # attention splits tokens or heads (N = K)
    return list(itertools.product(roles, roles))


def _layout(strategy, side: str) -> tuple:
    """(token axes, feature axes) of the op's input (side 'in': K) or output ('out': N)."""
    feat = "K" if side == "in" else "N"
    return (tuple(a for a, r in enumerate(strategy) if r == "T"),
            tuple(a for a, r in enumerate(strategy) if r == feat))


def costs(model: ModelSpec, cluster: ClusterSpec, batch: int, seq: int, mesh: tuple[int, int] | None = None,
          profile: HardwareProfile | None = None):
    """(operators, strategies per operator, cost per (operator, strategy), resharding cost matrix
    per edge): seconds for one forward and backward of `batch` sequences of `seq` tokens."""
    profile = profile or default_profile(cluster.gpu.name)
    mesh = mesh or (cluster.nodes, cluster.gpus_per_node)
    axes = (Group(mesh[0], 1, mesh[0]), Group(mesh[1], mesh[1], 1))
    gpu, tokens, ops = cluster.gpu, batch * seq, layer_ops(model)

    def coll(kind, nbytes, axis):
        return collective_time(kind, nbytes, axes[axis], cluster, profile) if mesh[axis] > 1 else 0.0

    def split(s, role):
        return int(np.prod([mesh[a] for a, r in enumerate(s) if r == role]))

    def own(op, s):
        t = tokens / split(s, "T")
        if op.attention:   # causal core, forward and backward: 3 x 2 x 2 s T d / 2, heads split by N
            return 6 * seq * t * op.k / split(s, "N") / (gpu.bf16_tflops * 1e12 * profile.attention_fraction)
        k, n = op.k / split(s, "K"), op.n / split(s, "N")
        cost = 3 * gemm_time(t, n, k, gpu, profile)                 # forward + two backward GEMMs
        for a, r in enumerate(s):
            if r == "K":                                            # partial sums: all-reduce, fwd + bwd
                cost += 2 * coll("all_reduce", BF16 * t * n, a)
            elif r == "T":                                          # the weight's gradient
                cost += coll("all_reduce", 4 * k * n, a)
        return cost

    def reshard(s_out, s_in, width):
        """Forward and backward: gather what the next operator needs whole, all-to-all what it
        needs split along the other dimension; slicing a replica is free."""
        (toks_o, feat_o), (toks_i, feat_i) = _layout(s_out, "out"), _layout(s_in, "in")
        shards = int(np.prod([mesh[a] for a in toks_o + feat_o]))
        nbytes = BF16 * tokens * width / shards
        cost = 0.0
        for a in range(2):
            have = "T" if a in toks_o else "F" if a in feat_o else None
            want = "T" if a in toks_i else "F" if a in feat_i else None
            if have is not None and have != want:
                cost += 2 * coll("all_gather" if want is None else "all_to_all", nbytes * mesh[a], a)
        return cost

    cands = [_strategies(op) for op in ops]
    node = [[own(op, s) for s in cands[o]] for o, op in enumerate(ops)]
    edge = [np.array([[reshard(a, b, ops[o].n) for b in cands[o + 1]] for a in cands[o]])
            for o in range(len(ops) - 1)]
    return ops, cands, node, edge


def solve(model: ModelSpec, cluster: ClusterSpec, batch: int, seq: int, mesh: tuple[int, int] | None = None,
          profile: HardwareProfile | None = None) -> Solution:
    """Best sharding of one layer's operators on a (slow, fast) mesh, by MILP."""
    ops, cands, node, edge = costs(model, cluster, batch, seq, mesh, profile)
    sizes = [len(c) for c in cands]
    x_off = np.concatenate([[0], np.cumsum(sizes)]).astype(int)
    n_x = int(x_off[-1])
    pairs = [(o, i, j) for o in range(len(ops) - 1) for i in range(sizes[o]) for j in range(sizes[o + 1])]
    n = n_x + len(pairs)
    c = np.concatenate([np.concatenate(node), [edge[o][i, j] for o, i, j in pairs]])
    # One strategy per operator; each edge's pair variables sum to its two ends' choices (the
    # marginal form of y = x_i AND x_j, tight for a chain: the LP optimum is already integral).
    rows = []
    for o in range(len(ops)):
        row = np.zeros(n)
        row[x_off[o]:x_off[o + 1]] = 1
        rows.append((row, 1.0))
    for o in range(len(ops) - 1):
        for end, count in ((o, sizes[o]), (o + 1, sizes[o + 1])):
            for k in range(count):
                row = np.zeros(n)
                row[x_off[end] + k] = -1
                for p, (po, i, j) in enumerate(pairs):
                    if po == o and (i if end == o else j) == k:
                        row[n_x + p] = 1
                rows.append((row, 0.0))
    A = np.array([r for r, _ in rows])
    lo = hi = np.array([b for _, b in rows])
    t0 = time.perf_counter()
    res = milp(c, constraints=LinearConstraint(A, lo, hi), integrality=np.r_[np.ones(n_x), np.zeros(len(pairs))],
               bounds=Bounds(0, 1))
    solve_s = time.perf_counter() - t0
    if not res.success:
        raise RuntimeError(f"the sharding MILP failed: {res.message}")   # a bug, never bad input
    chosen = tuple(cands[o][int(np.argmax(res.x[x_off[o]:x_off[o + 1]]))] for o in range(len(ops)))
    return Solution(strategies=chosen, cost_s=float(res.fun), solve_s=solve_s, ops=ops)
