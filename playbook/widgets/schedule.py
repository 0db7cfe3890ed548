"""Pipeline schedule Gantt chart: every forward, backward (or input- and weight-backward) of
every micro-batch on every rank, from the calculators' simulator, with the bubble and the peak
in-flight micro-batches per rank (what the memory model uses)."""
from __future__ import annotations

import gradio as gr

from calculators.specs.errors import ConfigError
from calculators.specs.parallel import SCHEDULES
from calculators.pipeline.simulate import closed_form_bubble, simulate
from playbook.plots import gantt

from . import Widget, simple_widget

CONTROLS = {
    "schedule": (lambda v: gr.Dropdown(list(SCHEDULES), value=v, label="schedule"), "1f1b"),
    "p": (lambda v: gr.Slider(2, 16, v, step=1, label="p (pipeline ranks)"), 4),
    "m": (lambda v: gr.Slider(1, 64, v, step=1, label="m (micro-batches)"), 8),
    "v": (lambda v: gr.Slider(1, 4, v, step=1, label="v (virtual stages, interleaved)"), 2),
    "b": (lambda v: gr.Slider(0.5, 4, v, step=0.1, label="backward / forward time"), 2.0),
    "p2p": (lambda v: gr.Slider(0, 1, v, step=0.05, label="p2p time / forward time"), 0.0),
}


def compute(v: dict):
    sched, p, m, vv = v["schedule"], int(v["p"]), int(v["m"]), int(v["v"]) if v["schedule"] == "interleaved" else 1
    if sched == "interleaved" and m % p:
        raise ConfigError(f"interleaved 1F1B runs micro-batches in rounds of p: make m ({m}) a multiple of p ({p})")
    if sched == "dualpipe" and m < 2 * p:
        raise ConfigError(f"DualPipeV needs m >= 2p = {2 * p} micro-batches")
    f = 1.0 / vv
    split = sched in ("zb", "dualpipe")
    half = float(v["b"]) / 2 / vv
    t = simulate(sched, p, m, vv, f=f, b=half, w=half, p2p=float(v["p2p"]))
    closed = closed_form_bubble(sched, p, vv, m, f, half, half)
    text = (f"The busiest rank idles **{t.idle / t.makespan:.0%} of the step**: its idle time is "
            f"**{t.bubble_fraction:.2f} x its compute** (the bubble ratio"
            + (f"; closed form for equal stages and free sends: {closed:.2f}" if closed is not None else
               "; DualPipeV has no closed form of this kind, the simulation is the answer")
            + f"). Peak in-flight micro-batches per rank (in the rank's layers): "
            f"{', '.join(f'{x:g}' for x in t.peak_inflight)}. Time unit: one forward of a whole rank."
            + ("" if sched == "interleaved" else " The v slider applies to the interleaved schedule only."))
    return gantt(t.ops, p, f"{sched}: p={p}, m={m}" + (f", v={vv}" if vv > 1 else ""), split), text


def build(wid: str, params: dict) -> Widget:
    w = simple_widget(wid, params, CONTROLS, compute, "pipeline schedule")
    if "schedule" in w.controls and "v" in w.controls:
        # v (virtual stages) means something for the interleaved schedule only
        w.controls["v"].interactive = w.defaults["schedule"] == "interleaved"
        w.controls["schedule"].change(lambda s: gr.update(interactive=s == "interleaved"), w.controls["schedule"],
                                      w.controls["v"], api_visibility="private", show_progress="hidden", queue=False)
    return w
