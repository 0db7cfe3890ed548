"""Memory per GPU: every pipeline stage's memory by role, with the capacity and fit-rule lines."""
from __future__ import annotations

import gradio as gr

from calculators.memory.activations import liger
from calculators.memory.estimate import ddp_buckets, memory_dict
from calculators.specs.fp8 import FP8_TEXT, fp8_weights
from calculators.specs.frameworks import MASTER_TEXT, grad_dtype, master_dtype
from playbook.plots import memory_by_stage

from playbook import escape
from playbook.values import scenario_from

from . import Widget, scenario_controls, which_model, wire

CONVENTION = "GiB = 2^30 bytes, peak allocated on the most loaded GPU"
KEYS = ("model", "config", "gpu", "nodes", "gpn", "dp", "tp", "pp", "cp", "ep", "vpp", "zero", "dp_replicate", "sp",
        "mbs", "gbs", "seq", "recompute", "schedule", "framework", "grad_dtype", "moment_dtype", "master_dtype",
        "offload_layers", "offload_modules", "optimizer_offload", "param_offload", "tiled_mlp", "loss",
        "elementwise", "precision", "fp8_recipe", "fp8_weights", "optimizer")


def optimizer_words(par) -> str:
    if par.optimizer == "muon":
        return "Muon (AdamW on embeddings and norms)"
    return f"{par.moment_dtype or 'fp32'} Adam moments"


def layout_words(par) -> str:
    """The layout's degrees: dp, those of the others above 1, and the ZeRO stage."""
    degrees = (("tp", par.tp), ("pp", par.pp), ("vpp", par.vpp), ("cp", par.cp), ("ep", par.ep))
    return ", ".join([f"dp {par.dp}"] + [f"{k} {n}" for k, n in degrees if n > 1] + [f"ZeRO-{par.zero}"])


def compute(v: dict):
    model, cluster, par = scenario_from(v)
    mem = memory_dict(model, cluster, par)
    verdict = "fits" if mem["fits"] else "does **not** fit"
    text = (f"{which_model(v)}{escape.md(model.describe())}\n\n"
            f"On {cluster.nodes} x {cluster.gpus_per_node} {cluster.gpu.name}, {layout_words(par)}, "
            f"global batch {par.gbs} sequences. Most loaded GPU: stage {mem['stage']}, "
            f"**{mem['total_gib']:.2f} GiB** of {mem['capacity_gib']:.2f} GiB: {verdict}. ({par.framework} memory "
            f"layout, {grad_dtype(par)} gradients, {optimizer_words(par)}, "
            f"{MASTER_TEXT[master_dtype(par)]}{FP8_TEXT.get(fp8_weights(par), '')}"
            f"{', what ' + escape.md(par.offload_modules) + ' save in host memory' if par.offload_modules else ''}"
            f"{', Liger-Kernel modules' if liger(par) else ''}{', the MLP tiled (TiledMLP)' if par.tiled_mlp else ''}; "
            f"{CONVENTION}; fits "
            f"when at most {mem['usable_fraction']:.0%} of the GPU's memory, {par.framework}'s rule: the rest is "
            "CUDA context, NCCL, workspaces and fragmentation)")
    if ddp_buckets(par):
        text += (f"\n\nGradients at the peak: {mem['grads_gib']:.2f} GiB, {mem['grads_full_gib']:.2f} once the "
                 "backward ends. This layout is PyTorch's DDP: its gradient buckets, allocated when the model is "
                 "wrapped, stay from step to step beside each parameter's own .grad, which the backward creates.")
    elif mem["grads_full_gib"] > mem["grads_gib"] + 1e-9:
        text += (f"\n\nGradients at the peak: {mem['grads_gib']:.2f} of {mem['grads_full_gib']:.2f} GiB. FSDP2 sets "
                 "them to None each step and, with one micro-batch per step, creates each layer's as its backward "
                 "frees that layer's activations: the peak holds the larger of the two, not their sum.")
    if mem["host_gib"] > 0:
        what = " and ".join((["optimizer"] if par.optimizer_offload else []) + (["weights"] if par.param_offload else []))
        text += (f"\n\nHost memory: {mem['host_gib']:.2f} GiB for this GPU's offloaded {what}, "
                 f"{mem['host_gib'] * cluster.gpus_per_node:.1f} GiB "
                 f"a node of {cluster.gpus_per_node}, pinned ({par.framework}'s layout, calculators/memory/host.py).")
    if par.precision != "fp8" and (par.fp8_recipe or par.fp8_weights):
        text += "\n\nThe FP8 recipe and weights apply to precision fp8 only: in bf16 they change nothing."
    text += "".join(f"\n\n> warning: {escape.md(w, 600)}" for w in mem["warnings"])
    return memory_by_stage(mem, f"{model.name}: memory per GPU by pipeline stage"), text


def build(wid: str, params: dict) -> Widget:
    with gr.Group():
        controls, defaults = scenario_controls(params, KEYS, show=KEYS)
        plot = gr.Plot(label="memory per GPU")
        summary = gr.Markdown(latex_delimiters=[])
    return wire(Widget(wid, controls, defaults), compute, [plot, summary])
