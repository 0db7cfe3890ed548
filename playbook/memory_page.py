"""Memory per GPU: pick a model, a cluster and a layout; see every stage's memory by role."""
from __future__ import annotations

import gradio as gr

from calculators.errors import ConfigError
from calculators.hardware import GPU_PRESETS
from calculators.hf_config import from_hf_config
from calculators.memory import USABLE_FRACTION, memory_dict
from calculators.parallel import FRAMEWORKS, RECOMPUTE, SCHEDULES
from calculators.presets import MODEL_PRESETS
from calculators.scenario import parse_hardware, parse_model, parse_parallel
from playbook.plots import memory_by_stage

CONVENTION = (f"GiB = 2^30 bytes, peak allocated on the most loaded GPU; fits when it is at most "
              f"{USABLE_FRACTION:.0%} of the GPU's memory (the rest: CUDA context, NCCL, fragmentation).")


def compute(model_name, config_json, gpu, nodes, gpus_per_node, dp, tp, pp, cp, zero, sp, mbs, gbs, seq,
            recompute, schedule, framework):
    """Event handler: parse, call the calculators, build the figure. Bad input -> a message."""
    try:
        model = from_hf_config(config_json) if config_json and config_json.strip() else parse_model(
            {"preset": model_name})
        cluster = parse_hardware({"gpu": gpu, "nodes": int(nodes), "gpus_per_node": int(gpus_per_node)})
        par = parse_parallel(dict(dp=int(dp), tp=int(tp), pp=int(pp), cp=int(cp), zero=int(zero), sp=bool(sp),
                                  mbs=int(mbs), gbs=int(gbs), seq=int(seq), recompute=recompute,
                                  schedule=schedule, framework=framework))
        mem = memory_dict(model, cluster, par)
    except ConfigError as exc:
        return None, "**Cannot evaluate this layout:**\n\n" + "\n".join(f"- {p}" for p in exc.problems)
    verdict = "fits" if mem["fits"] else "does **not** fit"
    text = (f"{model.describe()}\n\nMost loaded GPU: stage {mem['stage']}, **{mem['total_gib']:.2f} GiB** of "
            f"{mem['capacity_gib']:.2f} GiB: {verdict}. ({framework} memory layout; {CONVENTION})")
    text += "".join(f"\n\n> warning: {w}" for w in mem["warnings"])
    return memory_by_stage(mem, f"{model.name}: memory per GPU by pipeline stage"), text


def build_memory_page() -> None:
    gr.Markdown("## Memory per GPU\nWeights, gradients, optimizer state and activations on every pipeline "
                "stage. Paste a `config.json` to use your own model.")
    with gr.Row():
        with gr.Column(scale=1):
            model = gr.Dropdown(list(MODEL_PRESETS), value="llama3-8b", label="model preset")
            config = gr.Textbox(label="or paste a config.json", lines=3)
            gpu = gr.Dropdown(list(GPU_PRESETS), value="H100-80GB", label="GPU")
            with gr.Row():
                nodes = gr.Number(1, label="nodes", precision=0, minimum=1)
                gpn = gr.Number(8, label="GPUs per node", precision=0, minimum=1)
            dp = gr.Slider(1, 1024, 8, step=1, label="dp")
            tp = gr.Slider(1, 64, 1, step=1, label="tp")
            pp = gr.Slider(1, 64, 1, step=1, label="pp")
            cp = gr.Slider(1, 32, 1, step=1, label="cp")
            zero = gr.Radio([0, 1, 2, 3], value=1, label="ZeRO stage")
            sp = gr.Checkbox(False, label="sequence parallel")
        with gr.Column(scale=1):
            mbs = gr.Slider(1, 32, 1, step=1, label="micro-batch (sequences)")
            gbs = gr.Number(64, label="global batch (sequences)", precision=0, minimum=1)
            seq = gr.Slider(512, 131072, 4096, step=512, label="sequence length")
            recompute = gr.Radio(list(RECOMPUTE), value="none", label="activation recompute")
            schedule = gr.Dropdown(list(SCHEDULES), value="1f1b", label="pipeline schedule")
            framework = gr.Dropdown(list(FRAMEWORKS), value="megatron", label="framework memory layout")
        with gr.Column(scale=2):
            plot = gr.Plot(label="memory per GPU")
            summary = gr.Markdown()
    inputs = [model, config, gpu, nodes, gpn, dp, tp, pp, cp, zero, sp, mbs, gbs, seq, recompute, schedule, framework]
    # triggers=None: on page load and on every change of an input (one API endpoint, /memory)
    gr.on(None, compute, inputs, [plot, summary], api_name="memory", trigger_mode="always_last")
