"""Memory through a step: init, forward peak, backward, optimizer, second step (most loaded GPU)."""
from __future__ import annotations

import gradio as gr

from calculators.memory.estimate import estimate_memory
from calculators.time.timeline import step_timeline
from playbook.plots import stacked_phases

from playbook.values import scenario_from

from . import Widget, scenario_controls, wire

KEYS = ("model", "gpu", "dp", "tp", "pp", "zero", "mbs", "gbs", "seq", "recompute", "framework")


def compute(v: dict):
    model, cluster, par = scenario_from(v)
    est = estimate_memory(model, cluster, par)
    phases = step_timeline(est, par)
    peak = max(sum(r.values()) for _, r in phases)
    first = max(sum(r.values()) for name, r in phases if name.startswith(("init", "step 1")))
    why = ("The first step peaks lower because Adam creates its moments only at its first update."
           if first < peak - 1e-9 else
           "The first step's optimizer update holds as much: every gradient and Adam's new moments, where "
           "the backward's peak held fewer gradients than activations.")
    text = (f"Peak **{peak:.2f} GiB** in the second step's backward, of {est.capacity_gib:.1f} GiB "
            f"({par.framework} layout, GiB = 2^30 bytes). {why}")
    return stacked_phases(phases, est.capacity_gib, f"{model.name}: memory through two training steps",
                          est.usable_gib), text


def build(wid: str, params: dict) -> Widget:
    with gr.Group():
        controls, defaults = scenario_controls(params, KEYS, show=("model", "zero", "recompute", "framework", "mbs"))
        plot = gr.Plot(label="memory through a step")
        text = gr.Markdown(latex_delimiters=[])
    return wire(Widget(wid, controls, defaults), compute, [plot, text])
