"""Widgets: each builds its Gradio components in the current Blocks context, wires one event
(API name = the widget id, so gradio_client and the latency tests can call it) and returns a
`Widget` that says which controls it has, so the app can put every setting in the URL.

Chapters place widgets with parameters: `{{ widget memory model=llama3-70b tp=8 show=tp,pp,zero }}`
sets defaults and which controls show; the rest keep their defaults, hidden.

Shared here: the scenario controls (model, cluster, layout) most widgets use, their parsing into
calculator objects, and `guard`, which turns bad input into an inline message, never a trace.
"""
from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field

import gradio as gr

from calculators.errors import ConfigError
from calculators.hardware import GPU_PRESETS
from calculators.parallel import FRAMEWORKS, RECOMPUTE, SCHEDULES
from calculators.presets import MODEL_PRESETS
from playbook.values import coerce as _coerce


@dataclass
class Widget:
    wid: str
    controls: dict = field(default_factory=dict)     # URL key -> component
    defaults: dict = field(default_factory=dict)     # URL key -> default value
    plot: object = None                              # the output a browser test watches


# name, component factory, default. Factories take (value, visible).
def _slider(lo, hi, label, step=1):
    return lambda v, vis: gr.Slider(lo, hi, v, step=step, label=label, visible=vis)


SCENARIO = {
    "model": (lambda v, vis: gr.Dropdown(list(MODEL_PRESETS), value=v, label="model preset", visible=vis), "llama3-8b"),
    "config": (lambda v, vis: gr.Textbox(v, label="or paste a config.json", lines=2, visible=vis), ""),
    "gpu": (lambda v, vis: gr.Dropdown(list(GPU_PRESETS), value=v, label="GPU", visible=vis), "H100-80GB"),
    "nodes": (lambda v, vis: gr.Number(v, label="nodes", precision=0, minimum=1, visible=vis), 1),
    "gpn": (lambda v, vis: gr.Number(v, label="GPUs per node", precision=0, minimum=1, visible=vis), 8),
    "dp": (_slider(1, 1024, "dp (data parallel)"), 8),
    "tp": (_slider(1, 64, "tp (tensor parallel)"), 1),
    "pp": (_slider(1, 64, "pp (pipeline stages)"), 1),
    "cp": (_slider(1, 32, "cp (context parallel)"), 1),
    "ep": (_slider(1, 256, "ep (expert parallel)"), 1),
    "vpp": (_slider(1, 8, "vpp (virtual stages)"), 1),
    "zero": (lambda v, vis: gr.Radio([0, 1, 2, 3], value=v, label="ZeRO stage", visible=vis), 1),
    "sp": (lambda v, vis: gr.Checkbox(v, label="sequence parallel", visible=vis), True),
    "mbs": (_slider(1, 32, "micro-batch (sequences)"), 1),
    "gbs": (lambda v, vis: gr.Number(v, label="global batch (sequences)", precision=0, minimum=1, visible=vis), 64),
    "seq": (_slider(512, 131072, "sequence length", 512), 4096),
    "recompute": (lambda v, vis: gr.Radio(list(RECOMPUTE), value=v, label="activation recompute", visible=vis), "none"),
    "schedule": (lambda v, vis: gr.Dropdown(list(SCHEDULES), value=v, label="pipeline schedule", visible=vis), "1f1b"),
    "precision": (lambda v, vis: gr.Radio(["bf16", "fp8"], value=v, label="precision", visible=vis), "bf16"),
    "framework": (lambda v, vis: gr.Dropdown(list(FRAMEWORKS), value=v, label="framework memory layout",
                                             visible=vis), "megatron"),
}


def scenario_controls(params: dict, keys=tuple(SCENARIO), show=None) -> tuple[dict, dict]:
    """Build the scenario controls `keys` with chapter `params` as defaults; `show` (a comma list
    in params, or the given default) picks the visible ones. Returns (controls, defaults)."""
    show = params.get("show", show)
    visible = set(show.split(",")) if isinstance(show, str) else set(show or keys)
    controls, defaults = {}, {}
    with gr.Row(equal_height=False):
        cols = [gr.Column(min_width=220), gr.Column(min_width=220)]
    shown = [k for k in keys if k in visible]
    for key in keys:
        factory, default = SCENARIO[key]
        value = _coerce(params[key], default) if key in params else default
        col = cols[shown.index(key) * 2 // max(1, len(shown))] if key in visible else cols[-1]
        with col:
            controls[key] = factory(value, key in visible)
        defaults[key] = value
    return controls, defaults


def problem_text(exc: Exception) -> str:
    if isinstance(exc, ConfigError):
        return "**Cannot evaluate this:**\n\n" + "\n".join(f"- {p}" for p in exc.problems)
    return f"**Something went wrong:** {type(exc).__name__}: {exc}. Change a setting, or report this."


def guard(n_outputs: int):
    """Wrap a handler: bad input -> (None, ..., message) in place of a traceback. The message
    is always the last output."""
    def wrap(fn):
        @functools.wraps(fn)
        def inner(*args):
            try:
                return fn(*args)
            except Exception as exc:                 # never a stack trace in the page
                return (*([None] * (n_outputs - 1)), problem_text(exc))
        return inner
    return wrap


def wire(w: Widget, fn, outputs: list) -> Widget:
    """One event for the widget: on page load and on every control change (always the last
    value), named after the widget in the API. Its JS hook writes the settings that differ from
    the chapter's defaults into the URL (app.py defines window.pbUrl)."""
    keys = list(w.controls)
    handler = guard(len(outputs))(lambda *vals: fn(dict(zip(keys, vals))))
    defaults = json.dumps([w.defaults.get(k) for k in keys])
    gr.on(None, handler, list(w.controls.values()), outputs, api_name=w.wid, trigger_mode="always_last",
          js=f"(...a) => window.pbUrl ? window.pbUrl({json.dumps(w.wid)}, {json.dumps(keys)}, {defaults}, a) : a",
          show_progress="hidden")
    w.plot = w.plot or outputs[0]
    return w


def simple_widget(wid: str, params: dict, spec: dict, fn, label: str) -> Widget:
    """A widget of its own controls (`spec`: key -> (factory(value), default)), a plot and a note."""
    with gr.Group():
        controls, defaults = controls_row(params, spec)
        plot = gr.Plot(label=label)
        text = gr.Markdown()
    return wire(Widget(wid, controls, defaults), fn, [plot, text])


def controls_row(params: dict, spec: dict) -> tuple[dict, dict]:
    """A row of a widget's own controls with the chapter's `params` as defaults."""
    controls, defaults = {}, {}
    with gr.Row():
        for key, (factory, default) in spec.items():
            value = _coerce(params[key], default) if key in params else default
            controls[key], defaults[key] = factory(value), value
    return controls, defaults
