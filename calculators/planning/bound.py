"""The planner's pruning bound: a structure's (tp, cp, ep, pp, dp) time at its fastest knobs.

The search (planner.py) expands structures best first by this time and skips one already more
than `prune` times behind the leaders, so it must not overstate what the structure's knobs can
reach: where few micro-batches leave 1F1B a bubble over that slack, the bound counts the deepest
interleaving that runs (a dense pipeline on 8,192 GPUs with two micro-batches a step).
"""
from __future__ import annotations

from dataclasses import replace

from ..specs.errors import ConfigError


def optimistic(search, base, prune: float) -> float:
    """A structure's time with its fastest knobs, fit or not: no recompute, the lowest ZeRO
    stage, the schedules with the smallest bubble (zero-bubble or 1F1B; the deepest interleaving
    that runs; DualPipe, hiding MoE all-to-alls, where allowed), Megatron's EP overlap where allowed,
    the smallest and largest mbs."""
    sp = search.space
    schedules = [(base.schedule, base.vpp)]
    if base.pp > 1:
        schedules = [(next((s for s in ("zb", "1f1b") if s in sp["schedule"]), base.schedule), 1)]
        m = search.gbs // (base.dp * min(sp["mbs"]))
        # where 1F1B's bubble is over the pruning slack only a bound with interleaving keeps the
        # structure; not for MoE yet: there it expands 7 times the structures (DeepSeek-V3, 1,024
        # GPUs: 1.3 s to 12 s, past the widget's 10 s)
        if "interleaved" in sp["schedule"] and not search.model.moe and (base.pp - 1) / (m + base.pp - 1) > \
                1 - 1 / prune:
            schedules += [("interleaved", v) for v in sorted(sp["vpp"], reverse=True)]
    schedules += [(s, 1) for s in search.pairing(base.pp)]
    paired = True in sp["ep_overlap"] and base.ep > 1      # Megatron's EP overlap, where allowed
    times = []
    # the lowest ZeRO stage moves the least, but fsdp2's ZeRO 0/1 trains fp32 weights under autocast,
    # whose casts can make it the slower: its ZeRO 2 is bounded too
    low = min(sp["zero"])
    zeros = {low} | ({2} if base.framework == "fsdp2" and low <= 1 and 2 in sp["zero"] else set())
    for mbs, zero in ((b, z) for b in {min(sp["mbs"]), max(b for b in sp["mbs"] if search.gbs % (base.dp * b) == 0)}
                      for z in sorted(zeros)):
        interleaved = False
        for schedule, vpp in dict.fromkeys(schedules):
            if schedule == "interleaved" and interleaved:
                continue                       # the deepest interleaving that runs is enough
            try:
                par = replace(base, recompute=sp["recompute"][0], zero=zero, mbs=mbs,
                              schedule=schedule, vpp=vpp)
                if paired:
                    times.append(search.score(replace(par, ep_overlap=True), fits=False))
                times.append(search.score(par, fits=False))
                interleaved = interleaved or schedule == "interleaved"
            except (ConfigError, ValueError):
                continue
    return min(times, default=0.0)
