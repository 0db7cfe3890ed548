"""The budget widget: days, cost and goodput to train a model on a token budget, over a range of
cluster sizes (powers of two, or whole NVL72 racks doubling), the planner's best layout at each; where
adding GPUs stops paying."""
from __future__ import annotations

import gradio as gr

from calculators.specs import limits
from calculators.specs.errors import ConfigError
from calculators.planning.budget import budget_answer
from calculators.planning.goodput import FAILURES_PER_GPU_DAY
from calculators.specs.hardware import GPU_PRESETS
from calculators.specs.parallel import FRAMEWORKS
from calculators.specs.presets import MODEL_PRESETS
from playbook import escape
from playbook.plots import budget_plot

from . import Widget, controls_row, wire

SIZES = [2 ** k for k in range(3, 17)]            # 8 to 65,536 GPUs: at most 14 sizes, within limits.MAX_SIZES
FAILURES = {"none": 0.0, "as Llama 3": FAILURES_PER_GPU_DAY, "3 x Llama 3": 3 * FAILURES_PER_GPU_DAY}
RAMP = {"fixed": None, "grows to 16M tokens": 2 ** 24, "grows to 64M tokens": 2 ** 26}
CONTROLS = {
    "model": (lambda v: gr.Dropdown(list(MODEL_PRESETS), value=v, label="model preset"), "llama3-8b"),
    "gpu": (lambda v: gr.Dropdown(list(GPU_PRESETS), value=v, label="GPU"), "H100-80GB"),
    "tokens": (lambda v: gr.Number(v, label="tokens (trillions)", minimum=1e-6,
                                   maximum=limits.BUDGET["tokens"][1] / 1e12), 15.0),
    "smallest": (lambda v: gr.Dropdown(SIZES, value=v, label="smallest cluster (GPUs)"), 512),
    "largest": (lambda v: gr.Dropdown(SIZES, value=v, label="largest cluster (GPUs)"), 8192),
    "seq": (lambda v: gr.Number(v, label="sequence length", precision=0, minimum=128, maximum=limits.MAX_SEQ), 8192),
    "gbs": (lambda v: gr.Number(v, label="global batch (sequences)", precision=0, minimum=1, maximum=limits.MAX_BATCH),
            1024),
    "failures": (lambda v: gr.Radio(list(FAILURES), value=v, label="failures per GPU-day"), "as Llama 3"),
    "ramp": (lambda v: gr.Radio(list(RAMP), value=v, label="global batch as the cluster grows"), "fixed"),
    "storage": (lambda v: gr.Number(v, label="checkpoint storage GB/s", minimum=1e-3,
                                    maximum=limits.BUDGET["checkpoint_gbps"][1]), 2000.0),
    "price": (lambda v: gr.Number(v, label="price per GPU-hour ($)", minimum=0,
                                  maximum=limits.BUDGET["price_per_gpu_hour"][1]), 2.0),
    "precision": (lambda v: gr.Radio(["bf16", "fp8"], value=v, label="precision of the GEMMs"), "bf16"),
    "framework": (lambda v: gr.Dropdown(list(FRAMEWORKS), value=v, label="plan for (framework)"), "megatron"),
}


BUDGET_WIDGET_S = 30.0           # seconds one budget call may compute (the others: widgets.WIDGET_BUDGET_S)


def sizes(lo: int, hi: int, gpu: str) -> list[int]:
    """The cluster sizes between lo and hi GPUs: powers of two, or, for a GPU whose nodes are not a
    power of two (GB200's and GB300's 72-GPU NVL72 racks), whole nodes doubling from one (72, 144,
    288, ...), the sizes such a cluster comes in."""
    per_node = GPU_PRESETS[gpu].gpus_per_node
    grid = SIZES if all(n % per_node == 0 for n in SIZES) else [per_node * 2 ** k for k in range(len(SIZES))]
    out = [n for n in grid if lo <= n <= hi]
    if not out:
        near = min(grid, key=lambda n: abs(n - hi))
        raise ConfigError(f"the {gpu} comes in nodes of {per_node} GPUs: no cluster of 1, 2, 4, ... nodes lies between "
                          f"the smallest cluster ({lo:,} GPUs) and the largest ({hi:,}); widen the range to include "
                          f"{near:,} GPUs")
    return out


def request(v: dict) -> dict:
    """The widget's settings as a budget request (calculators/planning/budget.py)."""
    lo, hi = sorted((v["smallest"], v["largest"]))
    if v["precision"] == "fp8" and not GPU_PRESETS[v["gpu"]].fp8_tflops:
        with_fp8 = ", ".join(name for name, gpu in GPU_PRESETS.items() if gpu.fp8_tflops)
        raise ConfigError(f"the {v['gpu']} has no FP8 tensor cores: set precision to bf16, or pick a GPU with them "
                          f"({with_fp8})")
    req = {"model": {"preset": v["model"]}, "hardware": {"gpu": v["gpu"]}, "tokens": float(v["tokens"]) * 1e12,
           "seq": int(v["seq"]), "gbs": int(v["gbs"]), "gpus": sizes(lo, hi, v["gpu"]),
           "price_per_gpu_hour": float(v["price"]), "failures_per_gpu_day": FAILURES[v["failures"]],
           "checkpoint_gbps": float(v["storage"]),
           # the planner's constraints: what the framework runs, and its memory layout; FP8 GEMMs
           "constraints": {"framework": v["framework"], "precision": [v["precision"]]}}
    if RAMP[v["ramp"]] is not None:
        top = limits.BUDGET["max_batch_tokens"][1]
        if req["gbs"] * req["seq"] > top:
            raise ConfigError(f"global batch x sequence length is {req['gbs'] * req['seq']:,} tokens; with the "
                              f"batch growing the most it may be is {top:,}: lower the global batch or the sequence "
                              "length, or keep the batch fixed")
        req["max_batch_tokens"] = max(RAMP[v["ramp"]], req["gbs"] * req["seq"])
    return req


def compute(v: dict):
    ans = budget_answer(request(v))     # sizes planned in turn, here: the server's other requests need the cores
    fit = [o for o in ans["options"] if o["error"] is None]
    fastest = min(fit, key=lambda o: o["days"])
    cheapest = min(fit, key=lambda o: o["gpu_hours"])
    lines = [f"**{ans['tokens'] / 1e12:,.3g}T tokens of {ans['model']}** ({ans['params'] / 1e9:,.0f}B parameters) on "
             f"{ans['gpu']}, {v['precision']} GEMMs, as {v['framework']} runs it: fastest on **{fastest['gpus']:,} GPUs, {fastest['days']:,.1f} days** "
             f"({hours(fastest['gpu_hours'])} GPU-hours, cost ${fastest['cost']:,.0f}); cheapest on "
             f"{cheapest['gpus']:,} GPUs, {cheapest['days']:,.1f} days ({hours(cheapest['gpu_hours'])} GPU-hours, "
             f"cost ${cheapest['cost']:,.0f}). {escape.md(ans['knee'], 600)}",
             "", "| GPUs | batch | layout | tokens/s/GPU | goodput | days | GPU-hours |", "|---" * 7 + "|"]
    for o in ans["options"]:
        if o["error"]:
            lines.append(f"| {o['gpus']:,} | {o['gbs']:,} | {escape.md(o['error'], 300)} | | | | |")
        else:
            lines.append(f"| {o['gpus']:,} | {o['gbs']:,} | `{o['plan']}` | {o['tokens_per_s_per_gpu']:,.0f} | "
                         f"{o['goodput']:.1%} | {o['days']:,.1f} | {hours(o['gpu_hours'])} |")
    lines.append("\nGoodput: failures restart the whole job from its last checkpoint, taken at the Young/Daly "
                 "interval; not in the time: batch ramp-up, evaluation, ablations.")
    title = f"{ans['model']}: {ans['tokens'] / 1e12:,.3g}T tokens on {ans['gpu']}, {v['precision']}, {v['framework']}"
    return budget_plot(ans["options"], ans["knee_gpus"] if ans["past_knee"] else None, title), "\n".join(lines)


def hours(h: float) -> str:
    """GPU-hours as a reader takes them in: 2.66M, 26,600, 266 (not 0.0266M)."""
    return f"{h / 1e6:,.3g}M" if h >= 1e6 else f"{h:,.0f}" if h >= 100 else f"{h:.3g}"


def build(wid: str, params: dict) -> Widget:
    with gr.Group():
        controls, defaults = controls_row(params, CONTROLS)
        plot = gr.Plot(label="days, cost and goodput vs GPUs")
        text = gr.Markdown(latex_delimiters=[])
    # one search at a time, as the planner's: a size not yet planned holds a core for up to seconds
    # one call plans every cluster size of the range (DeepSeek-V3 from 512 to 8,192 GPUs: about 11 s
    # on a 2-core machine); one at a time, so a visitor cannot hold more than one worker with it
    narrow = "a narrower range between the smallest and the largest cluster, a smaller model"
    return wire(Widget(wid, controls, defaults, concurrency=1, budget_s=BUDGET_WIDGET_S, narrow=narrow), compute,
                [plot, text])
