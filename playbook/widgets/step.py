"""Step time and MFU: where the time of one step goes (compute, recompute, each kind of
communication exposed and hidden, bubble, optimizer), for any layout."""
from __future__ import annotations

import gradio as gr

from calculators.memory.estimate import estimate_memory
from calculators.time.host import EXPERT_LOOP_FP8_MS, expert_loop_host
from calculators.time.profiles import default_profile
from calculators.time.step import estimate_step
from playbook import escape
from playbook.plots import breakdown_bar

from playbook.values import scenario_from

from . import Widget, scenario_controls, which_model, wire

KEYS = ("model", "config", "gpu", "nodes", "gpn", "dp", "tp", "pp", "cp", "ep", "etp", "vpp", "split", "zero", "sp",
        "tp_overlap", "ep_overlap", "mbs", "gbs", "seq", "recompute", "recompute_ranks", "schedule", "precision",
        "framework", "dispatcher", "dispatch_sms", "attention", "experts", "grad_dtype", "moment_dtype",
        "master_dtype", "offload_layers", "offload_modules", "optimizer_offload", "param_offload", "tiled_mlp",
        "host_optimizer_gbps", "optimizer")
SHOW = ("model", "gpu", "nodes", "tp", "tp_overlap", "pp", "zero", "mbs", "gbs", "seq", "recompute", "schedule",
        "precision")                 # the controls shown where the chapter's directive does not say (show=...)


def compute(v: dict):
    model, cluster, par = scenario_from(v)
    mem = estimate_memory(model, cluster, par)          # checks the layout first (estimate_step does not)
    step = estimate_step(model, cluster, par)
    fit = "fits" if mem.fits else "does **not** fit"
    text = (f"{which_model(v, model)}**{step.time_s:.2f} s** per step, **{step.tokens_per_s_per_gpu:,.0f}** tokens/s/GPU, "
            f"MFU **{step.mfu:.1%}** (model FLOPs, no recompute), HFU {step.hfu:.1%} (with recompute), "
            f"{step.tflops_per_gpu:.0f} TFLOP/s per GPU, pipeline bubble {step.bubble_fraction:.1%}. "
            f"Peak memory {mem.total_gib:.1f} GiB: {fit}. MFU and HFU are over the dense BF16 peak, "
            f"FP8 runs too, so FP8's speed-up shows as a higher MFU. Attention: {step.attention}.")
    host = step.breakdown.get("host_bound", 0.0)
    if host > 0.05 * step.time_s and not any(expert_loop_host(model, par, True)):
        text += (f" The GPU waits {host:.2f} s ({host / step.time_s:.0%} of the step) for the host to issue its "
                 f"kernels: a layer takes at least {default_profile(cluster.gpu.name).host_ms_per_layer:g} ms of "
                 "CPU time per micro-batch (fitted on nanotron's eager runs), more than the GPU's work here; larger "
                 "micro-batches, fewer TP ranks or CUDA graphs hide it.")
    if any(expert_loop_host(model, par, True)):
        local = model.moe.experts // par.ep
        text += (f" Host bound includes the experts' FP8 loop: {local} local experts x {EXPERT_LOOP_FP8_MS} ms per "
                 "MoE layer and micro-batch (fitted on Megatron-Bridge's runs; experts `fused` removes it).")
    if step.breakdown.get("host_optimizer", 0.0) > 0:
        text += (f" The offloaded optimizer steps on the host in {step.breakdown['host_optimizer']:.2f} s, every "
                 f"GPU of a node at once, at {cluster.host_optimizer_rate / 1e9:g} GB/s of host memory traffic a node "
                 "(fitted on one published DeepSpeed run; hosts differ about 2x either way: set a measured rate in "
                 "the host GB/s control), plus {:.2f} s of copies over the host link.".format(
                     step.breakdown["host_copies"]))
    elif "host_copies" in step.breakdown:
        text += (f" The weights offloaded to the host cost {step.breakdown['host_copies']:.2f} s of copies over the "
                 "host link beyond what the passes hide.")
    if par.optimizer == "muon":
        text += (f" Optimizer: Muon. Its {step.breakdown.get('optimizer', 0.0):.2f} s include the Newton-Schulz GEMMs "
                 "on the matrices this GPU steps and the communication that makes them whole, as "
                 f"{par.framework} runs it.")
    if mem.warnings:
        text += " " + " ".join(f"Note: {escape.md(w, 400)}." for w in mem.warnings)
    return breakdown_bar(step.breakdown, f"{model.name}: one step, {step.time_s:.2f} s"), text


def build(wid: str, params: dict) -> Widget:
    with gr.Group():
        controls, defaults = scenario_controls(params, KEYS, show=SHOW)
        # above the plot: with many controls a message below it is off-screen
        text = gr.Markdown(latex_delimiters=[])
        plot = gr.Plot(label="step time breakdown")
    return wire(Widget(wid, controls, defaults), compute, [plot, text])
