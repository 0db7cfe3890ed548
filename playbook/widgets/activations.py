"""Activation memory vs sequence length, for each recompute mode (and with or without flash
attention), on one GPU of the chosen layout."""
from __future__ import annotations

from dataclasses import replace

import gradio as gr

from calculators.memory.estimate import estimate_memory
from calculators.specs.parallel import RECOMPUTE
from playbook.plots import lines

from playbook.values import scenario_from

from . import Widget, scenario_controls, wire

KEYS = ("model", "gpu", "dp", "tp", "cp", "sp", "mbs", "seq")
SEQS = [1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072]


def compute(v: dict):
    model, cluster, par = scenario_from({**v, "gbs": v["dp"] * v["mbs"]})
    series = {}
    for mode in RECOMPUTE:
        for flash in (True, False):
            name = f"{mode}{'' if flash else ', no flash attention'}"
            if not flash and mode != "none":
                continue
            series[name] = [estimate_memory(model, cluster, replace(par, seq=s, recompute=mode, flash=flash))
                            .worst.activations_gib for s in SEQS]
    here = estimate_memory(model, cluster, par).worst
    text = (f"At seq {par.seq}: **{here.activations_gib:.2f} GiB** of activations per GPU with recompute "
            f"'{par.recompute}' (tp {par.tp}{', SP' if par.sp else ''}, cp {par.cp}, mbs {par.mbs}; GiB = 2^30 bytes). "
            f"Without recompute activations grow linearly in s with flash attention, quadratically without it.")
    fig = lines(SEQS, series, "sequence length (tokens)", "activations per GPU (GiB)",
                f"{model.name}: activation memory vs sequence length", log_x=True, log_y=True,
                marker_x=par.seq)
    return fig, text


def build(wid: str, params: dict) -> Widget:
    with gr.Group():
        controls, defaults = scenario_controls(params, KEYS, show=("model", "tp", "sp", "cp", "mbs", "seq"))
        plot = gr.Plot(label="activation memory")
        text = gr.Markdown(latex_delimiters=[])
    return wire(Widget(wid, controls, defaults), compute, [plot, text])
