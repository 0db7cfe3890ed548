"""The planner widget: the fastest layouts that fit for a model, a cluster, a sequence length and
a batch; why the winner wins; the instructive rejections; each plan exported to a framework."""
from __future__ import annotations

import functools

import gradio as gr

from calculators.specs import limits
from calculators.planning.export import FORMATS
from calculators.specs.hardware import GPU_PRESETS
from calculators.specs.parallel import FRAMEWORKS
from calculators.specs.presets import MODEL_PRESETS
from calculators.scenario import plan_answer
from playbook import escape, plan_link
from playbook.plots import placeholder, plans_bar

from . import Widget, controls_row, wire

CONTROLS = {
    "model": (lambda v: gr.Dropdown(list(MODEL_PRESETS), value=v, label="model preset"), "llama3-70b"),
    "gpu": (lambda v: gr.Dropdown(list(GPU_PRESETS), value=v, label="GPU"), "H100-80GB"),
    "nodes": (lambda v: gr.Number(v, label="nodes (8 GPUs each; GB200 and GB300: 72-GPU racks)", precision=0, minimum=1,
                                  maximum=limits.MAX_GPUS // 8), 8),
    "seq": (lambda v: gr.Number(v, label="sequence length", precision=0, minimum=128, maximum=limits.MAX_SEQ), 8192),
    "gbs": (lambda v: gr.Number(v, label="global batch (sequences)", precision=0, minimum=1,
                                maximum=limits.MAX_BATCH), 512),
    "recompute": (lambda v: gr.Radio(["any", "none", "selective", "full"], value=v, label="recompute"), "any"),
    "framework": (lambda v: gr.Dropdown(list(FRAMEWORKS), value=v, label="plan for (framework)"), "megatron"),
    "deepep": (lambda v: gr.Checkbox(v, label="DeepEP and HybridEP installed (MoE)"), False),
    "export": (lambda v: gr.Dropdown(list(FORMATS), value=v, label="export the best plan as"), "megatron"),
}
COLUMNS = ["#", "layout", "step s", "tokens/s/GPU", "MFU", "memory GiB", "bubble"]


@functools.lru_cache(maxsize=64)
def _plan(model: str, gpu: str, nodes: int, seq: int, gbs: int, recompute: str, framework: str,
          deepep: bool = False) -> dict:
    """One search per question: revisiting the chapter or changing only the export format is free.
    The framework sets the memory layout and what may be proposed (frameworks.LIMITS); with
    DeepEP (and its HybridEP) installed, each MoE plan dispatches through whichever of them and the
    all-to-all is fastest on its layout."""
    constraints = {"framework": framework} if recompute == "any" else {"recompute": recompute, "framework": framework}
    if deepep:
        constraints["dispatcher"] = ["alltoall", "deepep", "hybridep"]
    return plan_answer({"model": {"preset": model}, "hardware": {"gpu": gpu, "nodes": nodes},
                        "seq": seq, "gbs": gbs, "constraints": constraints, "top": 5})


def compute(v: dict):
    ans = _plan(v["model"], v["gpu"], int(v["nodes"]), int(v["seq"]), int(v["gbs"]), v["recompute"], v["framework"],
                bool(v["deepep"]))
    if ans["impossible"]:
        # the sentence already names the smallest cluster that fits; the plot says there is no plan
        return (placeholder("no layout fits: the message below says how close one came"), [],
                "# no plan to export", f"**No plan.** {escape.md(ans['impossible'], 2000)}")
    rows = [[p["rank"], p["label"], f"{p['step']['time_s']:.3f}", f"{p['step']['tokens_per_s_per_gpu']:,.0f}",
             f"{p['step']['mfu']:.1%}", f"{p['memory']['total_gib']:.1f}", f"{p['step']['bubble_fraction']:.1%}"]
            for p in ans["plans"]]
    rejected = "\n".join(f"- `{r['label']}`: {escape.md(r['reason'], 600)}" for r in ans["rejected"][:6])
    links = plan_link.markdown(ans["plans"], v["model"], v["gpu"], int(v["nodes"]))
    gpn = GPU_PRESETS[v["gpu"]].gpus_per_node
    text = (f"**Why #1:** {escape.md(ans['why'], 2000)}\n\n{links}\n\nOn {int(v['nodes']):,} x {gpn} {v['gpu']} "
            f"({int(v['nodes']) * gpn:,} GPUs), searched {ans['searched']:,} layouts in "
            f"{ans['seconds']:.1f} s. MFU: model FLOPs over the dense bf16 peak; memory: GiB on the most loaded "
            f"GPU, in {v['framework']}'s layout; bubble: the busiest rank's idle time over its compute.\n\n"
            f"**Rejected:**\n{rejected}")
    best = ans["plans"][0]["exports"][v["export"]]
    code = best["text"] + "".join(f"\n# note: {n}" for n in best["notes"])
    return plans_bar(ans["plans"]), rows, code, text


def build(wid: str, params: dict) -> Widget:
    with gr.Group():
        controls, defaults = controls_row(params, CONTROLS)
        plot = gr.Plot(label="plans")
        table = gr.Dataframe(headers=COLUMNS, label="ranked plans", interactive=False, wrap=True,
                             elem_id=f"{wid}-table",
                             # widths in pixels, not shares of the screen: on a phone the table
                             # scrolls sideways instead of splitting "1,192" a digit per line
                             column_widths=[36, 520, 70, 100, 64, 86, 70])
        text = gr.Markdown(latex_delimiters=[])
        code = gr.Code(label="export", language="shell")
    # One search at a time: a search holds the interpreter for up to seconds, and several at once
    # slow every other widget (20 clients hammering the planner put a cheap widget's p95 at 0.85 s
    # with four searches at once, 0.37 s with one; tests/playbook/test_hostile_served.py).
    return wire(Widget(wid, controls, defaults, concurrency=1), compute, [plot, table, code, text])
