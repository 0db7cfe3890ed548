"""The planner's pruning bound: a structure's (tp, cp, ep, pp, dp) time at its fastest knobs.

The search (planner.py) expands structures best first by this time and skips one already more
than `prune` times behind the leaders, so it must not overstate what the structure's knobs can
reach by that much: then a structure better than the leaders is never skipped. The fastest knobs
are not all at the ends of their ranges: ZeRO-1 can beat ZeRO-0 (a sharded optimizer step), HSDP
can beat FSDP over every rank, a middle micro-batch can beat both ends (the host's time at the small
end, the bubble at the large), and the largest leaves a pipeline few micro-batches, whose bubble
interleaving removes. So the bound tries every ZeRO stage the structure runs and every HSDP grouping
(they share the pipeline's costs, step.zero_terms: cheap), every micro-batch that divides the batch,
and, at each, the interleavings where 1F1B's bubble is over the slack. Not for MoE yet, which keeps
to the smallest and largest micro-batch without interleaving: there the rest expands 7 times the
structures (DeepSeek-V3 on 1,024 GPUs from 1.3 s to 12 s, past the widget's 10 s).
tests/calculators/test_planner_bound.py holds dense structures to it against every knob; before,
they were overstated by up to 28%.
"""
from __future__ import annotations

from ..specs.errors import ConfigError
from ..specs.parallel import derive
from .space import hsdp_replicas


def _schedules(search, base, m: int, prune: float) -> list:
    """(schedule, vpp) to bound a pipeline with `m` micro-batches: zero-bubble or 1F1B, and where
    1F1B's bubble is over the pruning slack the interleavings, deepest first; DualPipe where allowed."""
    sp = search.space
    if base.pp == 1:
        return [(base.schedule, 1)]
    out = [(next((s for s in ("zb", "1f1b") if s in sp["schedule"]), base.schedule), 1)]
    if "interleaved" in sp["schedule"] and not search.model.moe and (base.pp - 1) / (m + base.pp - 1) > 1 - 1 / prune:
        out += [("interleaved", v) for v in sorted(sp["vpp"], reverse=True)]
    return out + [(s, 1) for s in search.pairing(base.pp)]


def optimistic(search, base, prune: float) -> float:
    """A structure's time with its fastest knobs, fit or not: no recompute, every precision, ZeRO stage,
    HSDP grouping and micro-batch allowed (MoE: the smallest and the largest), the schedules with the smallest
    bubble (zero-bubble or 1F1B; the deepest interleaving that runs; DualPipe, hiding MoE all-to-alls,
    where allowed), Megatron's EP overlap where allowed."""
    sp = search.space
    paired = True in sp["ep_overlap"] and base.ep > 1      # Megatron's EP overlap, where allowed
    zeros = search.zero_stages(base.dp, base.cp, base.pp)
    dividing = [b for b in sp["mbs"] if search.gbs % (base.dp * b) == 0] or [min(sp["mbs"])]
    # a middle micro-batch can beat both ends (the host's time at the small end, the bubble at the
    # large); MoE keeps to the ends, for speed, as it keeps from interleaving
    sizes = sorted({min(sp["mbs"]), max(dividing)}) if search.model.moe else dividing
    times = []
    for precision in sp["precision"]:
        for mbs in sizes:
            interleaved = False
            for schedule, vpp in dict.fromkeys(_schedules(search, base, search.gbs // (base.dp * mbs), prune)):
                if schedule == "interleaved" and interleaved:
                    continue                   # the deepest interleaving that runs is enough
                for zero in zeros:
                    par = derive(base, recompute=sp["recompute"][0], zero=zero, mbs=mbs, precision=precision,
                                 schedule=schedule, vpp=vpp, split=search.virtual_split(base.pp, vpp))
                    variants = [par] + [derive(par, dp_replicate=r)
                                        for r in hsdp_replicas(search.framework, search.model, search.cluster, par)]
                    variants += [derive(v, ep_overlap=True) for v in variants] if paired else []
                    for v in variants:
                        try:
                            times.append(search.score(v, fits=False))
                        except (ConfigError, ValueError):
                            continue
                        interleaved = interleaved or schedule == "interleaved"
    return min(times, default=0.0)
