"""Two scaling widgets on the step-time model, each sweeping one axis of the layout:
- dp: data parallelism at a fixed global batch: per-GPU compute shrinks as dp grows while the
  gradient sync does not, until the overlap breaks (ZeRO stage changes what is sent);
- tp: tensor parallelism on a fixed cluster (dp = GPUs / tp): memory per GPU falls, throughput
  falls, and past one node (tp > 8) the TP collectives leave NVLink.
"""
from __future__ import annotations

from dataclasses import replace

import gradio as gr

from calculators.specs.errors import ConfigError
from calculators.memory.estimate import estimate_memory, usable_fraction
from calculators.time.step import estimate_step
from playbook.plots import scaling_plot

from playbook.values import scenario_from

from . import Widget, scenario_controls, wire

DP_KEYS = ("model", "gpu", "tp", "zero", "mbs", "gbs", "seq", "recompute")
TP_KEYS = ("model", "gpu", "nodes", "zero", "mbs", "gbs", "seq", "recompute")


def dp_compute(v: dict):
    model, _, base = scenario_from({**v, "dp": 1})
    xs, rows = [], []
    dp = 1
    while dp * base.mbs <= base.gbs and dp * base.tp <= 4096:
        if base.gbs % (dp * base.mbs) == 0:
            m, cluster, par = scenario_from({**v, "dp": dp})
            s = estimate_step(m, cluster, par)
            b = s.breakdown
            rows.append({"compute": b.get("compute", 0) + b.get("recompute", 0),
                         "waiting for the host": b.get("host_bound", 0),
                         "DP sync exposed": b.get("dp_exposed", 0), "DP sync hidden": b.get("dp_hidden", 0),
                         "tokens/s/GPU": s.tokens_per_s_per_gpu})
            xs.append(dp)
        dp *= 2
    if not xs:
        raise ConfigError("no dp fits the global batch: raise gbs or lower mbs")
    last = rows[-1]
    text = (f"ZeRO-{base.zero}, gbs {base.gbs}: at dp {xs[-1]} each GPU computes {last['compute']:.2f} s per step and "
            f"**{last['DP sync exposed']:.2f} s** of gradient sync stays exposed "
            f"({last['tokens/s/GPU']:,.0f} tokens/s/GPU vs {rows[0]['tokens/s/GPU']:,.0f} at dp 1). Seconds per step.")
    return scaling_plot(xs, rows, "dp (data-parallel replicas)", f"{model.name}: data parallelism at a fixed batch"), text


def tp_compute(v: dict):
    model, cluster0, base = scenario_from({**v, "gpn": 8, "dp": 1, "tp": 1, "pp": 1})
    world = cluster0.world
    xs, rows = [], []
    for tp in (1, 2, 4, 8, 16, 32, 64):
        dp = world // tp
        if world % tp or base.gbs % (dp * base.mbs):
            continue
        par = replace(base, tp=tp, dp=dp, sp=tp > 1)
        try:
            s = estimate_step(model, cluster0, par)
            mem = estimate_memory(model, cluster0, par)
        except ConfigError:                 # tp not dividing the heads: not a point of the curve
            continue
        b = s.breakdown
        rows.append({"compute": b.get("compute", 0) + b.get("recompute", 0),
                     "waiting for the host": b.get("host_bound", 0), "TP exposed": b.get("tp_exposed", 0),
                     "tokens/s/GPU": s.tokens_per_s_per_gpu, "memory GiB": mem.total_gib})
        xs.append(tp)
    if not xs:
        raise ConfigError(f"no tp divides both {world} GPUs and the global batch: change nodes or gbs")
    usable = usable_fraction(base.framework) * cluster0.gpu.memory_gib
    fitting = [i for i in range(len(xs)) if rows[i]["memory GiB"] <= usable]
    best = max(fitting, key=lambda i: rows[i]["tokens/s/GPU"]) if fitting else None
    verdict = (f"Fastest that fits: **tp {xs[best]}**, {rows[best]['tokens/s/GPU']:,.0f} tokens/s/GPU." if fitting
               else f"**None fits** in {usable:.0f} GiB: add nodes, pipeline stages, ZeRO or recompute.")
    text = (f"{world} GPUs: tp {xs[0]} needs {rows[0]['memory GiB']:.1f} GiB per GPU, tp {xs[-1]} "
            f"{rows[-1]['memory GiB']:.1f} GiB. {verdict} Past tp 8 the TP collectives cross nodes.")
    return scaling_plot(xs, rows, "tp (tensor parallel)", f"{model.name}: tensor parallelism on {world} GPUs",
                        usable), text


def _build(wid, params, keys, show, fn, label):
    with gr.Group():
        controls, defaults = scenario_controls(params, keys, show=show)
        plot = gr.Plot(label=label)
        text = gr.Markdown(latex_delimiters=[])
    return wire(Widget(wid, controls, defaults), fn, [plot, text])


def build_dp(wid: str, params: dict) -> Widget:
    return _build(wid, params, DP_KEYS, ("model", "zero", "gbs", "mbs", "seq"), dp_compute, "DP overlap")


def build_tp(wid: str, params: dict) -> Widget:
    return _build(wid, params, TP_KEYS, ("model", "nodes", "gbs", "seq"), tp_compute, "TP scaling")
