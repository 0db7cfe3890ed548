"""The planner's answer as data, and its explanations: why the winner beats the runner-up, and
why the most tempting rejected layouts lost."""
from __future__ import annotations

import math

import itertools
from dataclasses import dataclass

from ..specs.errors import ConfigError
from ..specs.fp8 import fp8_weights
from ..specs.frameworks import master_dtype
from ..specs.parallel import ParallelConfig
from ..time.step import StepEstimate

TIMED_REJECTS = 400              # out-of-memory candidates timed to find the most tempting ones
LABELS = {"compute": "compute", "recompute": "recomputation",
          "host_bound": "GPU waiting for the host to launch work", "tp_exposed": "exposed TP communication",
          "cp_exposed": "exposed CP communication", "ep_exposed": "exposed EP all-to-all",
          "offload_exposed": "exposed activation copies to and from the host",
          "other": "time outside the layers (embedding, output layer and loss, gradient accumulation, pipeline sends)",
          "bubble": "pipeline bubble",
          "dp_exposed": "exposed data-parallel sync", "optimizer": "optimizer step"}
COMPARED = ("tp", "cp", "ep", "pp", "dp", "vpp", "zero", "mbs", "recompute", "schedule", "ep_overlap", "split")


@dataclass(frozen=True)
class Plan:
    par: ParallelConfig
    step: StepEstimate           # simulated pipeline
    memory_gib: float            # most loaded GPU
    stage_gib: tuple             # per pipeline rank

    def label(self) -> str:
        return label(self.par)


def label(p: ParallelConfig) -> str:
    """A layout in one line: tp8 cp1 pp16 dp16 tp-overlap zero1 mbs1 1f1b recompute=full.
    Per-rank recompute and per-stage layers are listed first to last, a run of equal values as
    value x count (Megatron's split of 126 layers over 64 stages: split=1/2x62/1)."""
    parts = [f"tp{p.tp}", f"cp{p.cp}"] + ([f"ep{p.ep}"] if p.ep > 1 else []) + [f"pp{p.pp}", f"dp{p.dp}"]
    parts += [f"vpp{p.vpp}"] if p.vpp > 1 else []
    parts += ["tp-overlap"] if p.tp_overlap else []
    parts += ["ep-overlap"] if p.ep_overlap else []
    parts += [p.dispatcher] if p.ep > 1 and p.dispatcher != "alltoall" else []
    parts += [f"experts={p.experts}"] if p.experts else []
    parts += [f"elementwise={p.elementwise}"] if p.elementwise else []
    parts += [f"grads={p.grad_dtype}"] if p.grad_dtype else []
    parts += [f"moments={p.moment_dtype}"] if p.moment_dtype else []
    parts += [f"master={master_dtype(p)}"] if master_dtype(p) != "fp32" else []
    parts += [f"fp8={p.fp8_recipe}"] if p.precision == "fp8" and p.fp8_recipe else []
    parts += [f"fp8_weights={p.fp8_weights}"] if p.fp8_weights and fp8_weights(p) else []
    parts += [f"offload={p.offload_layers}"] if p.offload_layers else []
    parts += [f"offload={p.offload_modules}"] if p.offload_modules else []
    parts += [f"optimizer-offload={p.optimizer_offload:g}"] if p.optimizer_offload else []
    parts += ["param-offload"] if p.param_offload else []
    parts += ["optimizer=muon"] if p.optimizer == "muon" else []
    parts += ["tiled-mlp"] if p.tiled_mlp else []
    parts += [f"loss={p.loss}"] if p.loss else []
    modes = p.recompute_ranks if len(set(p.recompute_ranks)) > 1 else (p.recompute,)
    parts += [f"zero{p.zero}"] + ([f"hsdp{p.dp_replicate}"] if p.dp_replicate > 1 else [])
    parts += [f"mbs{p.mbs}", p.schedule, "recompute=" + runs_text(modes)]
    if p.split:
        parts.append("split=" + runs_text(p.split))
    return " ".join(parts)


def runs_text(values) -> str:
    """7, 7, 7, 2 -> 7x3/2: a list of counts, runs of three or more written value x count."""
    out = []
    for x, group in itertools.groupby(values):
        n = len(list(group))
        out.append(f"{x}x{n}" if n > 2 else "/".join([str(x)] * n))
    return "/".join(out)


@dataclass(frozen=True)
class Rejected:
    par: ParallelConfig
    reason: str
    time_s: float | None = None  # estimated step had it been chosen (None: not timed)
    kind: str = "invalid"        # invalid | oom | frugal_oom (its structure never fits) | slower


@dataclass
class PlanResult:
    plans: list                  # ranked Plan, fastest first
    rejected: list               # Rejected, the most instructive first
    why: str                     # why the winner beats the runner-up
    searched: int                # candidates scored
    seconds: float
    impossible: str = ""         # set when nothing fits
    min_gpus: int = 0            # with `impossible`: the smallest GPU count that fits


def why(a, b) -> str:
    """One sentence from the two breakdowns: what the winner saves, and what it pays for it."""
    ta, tb = a.step.time_s, b.step.time_s
    diffs = {k: b.step.breakdown.get(k, 0.0) - a.step.breakdown.get(k, 0.0) for k in LABELS}
    # a part that moves under 0.1% of the step is not named (an optimizer step 0.0004 s shorter), but
    # it is summed with the rest
    small = 1e-3 * ta
    gains = sorted(((v, k) for k, v in diffs.items() if v > 0), reverse=True)
    losses = sorted((v, k) for k, v in diffs.items() if v < 0)
    knobs = [f"{k} {_fmt(getattr(a.par, k))} instead of {_fmt(getattr(b.par, k))}"
             for k in COMPARED if getattr(a.par, k) != getattr(b.par, k) and k != "split"
             and (k != "schedule" or min(a.par.pp, b.par.pp) > 1)]        # one stage: no schedule
    if a.par.split != b.par.split:
        knobs.append("its own layer split" if a.par.split else "an even layer split")
    digits = _digits(ta, tb)
    text = (f"{a.label()} beats {b.label()} by {_pct(tb / ta - 1)} ({ta:.{digits}g} s vs {tb:.{digits}g} s per step)")
    if knobs:
        text += " because, with " + ", ".join(knobs) + ","
    # name the gains, largest first, until they outweigh every loss (at most three); what else moves
    # is summed, so the sentence's seconds add up to the difference between the two steps
    paid = -sum(v for v, _ in losses)
    big = [g for g in gains if g[0] > small]
    named = next((big[:i] for i in range(1, 4) if sum(v for v, _ in big[:i]) > paid), big[:3])
    parts = [f"its {LABELS[k]} is {v:.3g} s shorter" for v, k in named]
    rest = sum(v for v, _ in gains) - sum(v for v, _ in named)
    parts += [f"{'the rest' if named else 'its parts'} {'is' if named else 'are'} {rest:.3g} s shorter"
              f"{'' if named else ' together'}"] if rest > small else []
    text += " " + ", ".join(parts[:-1]) + (" and " if len(parts) > 1 else "") + parts[-1] if parts else \
        " it is faster overall"
    if losses and -losses[0][0] > small:
        v, k = losses[0]
        more = paid + v
        text += f", which outweighs {-v:.3g} s more {LABELS[k]}" + (f" and {more:.3g} s more elsewhere"
                                                                     if more > small else "")
    elif paid > small:
        text += f", which outweighs {paid:.3g} s more elsewhere"
    return text + "."


def _digits(a: float, b: float) -> int:
    """Significant digits that tell a from b (3 at least): 67.9 s and 67.938 s print as 67.90 and
    67.94 rather than twice as 67.9."""
    if a <= 0 or b <= 0 or a == b:
        return 3
    return max(3, min(8, 2 + int(math.ceil(-math.log10(abs(a - b) / max(a, b))))))


def _pct(x: float) -> str:
    """A relative difference with the precision it needs (4.2%, 0.38%, 0.004%)."""
    if x == 0 or abs(x) >= 0.01:
        return f"{100 * x:.1f}%"
    return f"{100 * x:.{max(1, 1 - int(math.floor(math.log10(100 * abs(x)))))}f}%"


def _fmt(value) -> str:
    if isinstance(value, tuple):
        return "/".join(map(str, value)) if value else "even"
    return str(value)


def rejections(search, ranked, runners_up):
    """The most instructive losers: the next layouts that fit (closed-form times), the fastest
    ones that did not fit, and distinct invalid ones."""
    out = []
    if ranked:
        winner = ranked[0]
        for t, par in runners_up:
            out.append(Rejected(par, f"fits, but about {t - winner.step.time_s:.3g} s slower per step "
                                     f"({t:.3g} s, closed-form pipeline)", t, "slower"))
    oom = [r for r in search.rejected if r.kind in ("oom", "frugal_oom")][:TIMED_REJECTS]
    timed = []
    for r in oom:
        try:
            t = search.times.get(r.par) or search.closed_time(r.par)
        except ConfigError:
            continue
        timed.append((t, r))
    timed.sort(key=lambda x: x[0])
    limit = ranked[0].step.time_s if ranked else float("inf")
    tempting = [(t, r) for t, r in timed if t < limit][:6] or timed[:1]
    seen = set()
    for t, r in tempting:
        if (r.reason, round(t, 3)) not in seen:
            seen.add((r.reason, round(t, 3)))
            out.append(Rejected(r.par, r.reason + (f"; it would take {t:.3g} s per step" if ranked else ""), t, r.kind))
    pruned = sorted((r for r in search.rejected if r.kind == "slower"), key=lambda r: r.time_s)
    invalid, reasons = [], set()
    for r in search.rejected:
        if r.kind == "invalid" and r.reason not in reasons:
            reasons.add(r.reason)
            invalid.append(Rejected(r.par, "invalid: " + r.reason))
    return out + pruned[:1] + invalid[:2]


def short(par) -> str:
    return (f"tp{par.tp} cp{par.cp} pp{par.pp} dp{par.dp}" + (f" ep{par.ep}" if par.ep > 1 else "") +
            f" zero{par.zero} recompute={par.recompute}" +
            (f" offload={par.offload_layers}" if par.offload_layers else "") +
            (f" optimizer-offload={par.optimizer_offload:g}" if par.optimizer_offload else "") +
            (" param-offload" if par.param_offload else "") + (" optimizer=muon" if par.optimizer == "muon" else "") +
            (" tiled-mlp" if par.tiled_mlp else "") + (f" loss={par.loss}" if par.loss else "") +
            (f" elementwise={par.elementwise}" if par.elementwise else ""))


def finalists(ordered: list, n: int) -> list:
    """The n fastest layouts by the closed form, but first the fastest of each structure (tp, cp,
    ep, pp, schedule, vpp): its ZeRO and micro-batch variants, near-equal, must not crowd out
    another structure that rebalancing or the simulator may put ahead."""
    firsts, rest, seen, shapes = [], [], set(), set()
    for par in ordered:
        if par in seen:
            continue
        seen.add(par)
        shape = (par.tp, par.cp, par.ep, par.pp, par.schedule, par.vpp)
        (rest if shape in shapes else firsts).append(par)
        shapes.add(shape)
    return firsts[:n] + rest[:max(0, n - len(firsts))]


def distinct(leaders: list) -> list:
    """Drop layouts that only trade CP for DP or micro-batch size at the same time (within
    0.05%) as a simpler one already listed: they are the same plan to the reader."""
    kept = []
    for t, par in leaders:
        same = (par.tp, par.pp, par.zero, par.recompute, par.schedule, par.vpp)
        if not any(abs(t - u) <= 5e-4 * u and same == (q.tp, q.pp, q.zero, q.recompute, q.schedule, q.vpp)
                   for u, q in kept):
            kept.append((t, par))
    return kept


def oom_reason(mem) -> str:
    """Why a layout was rejected for memory: its most loaded stage against the usable memory."""
    usable = mem.usable_gib
    return (f"out of memory: stage {mem.stage} needs {mem.total_gib:.1f} GiB, "
            f"{mem.total_gib - usable:.1f} GiB over the usable {usable:.1f} GiB")
