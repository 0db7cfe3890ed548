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
from calculators.parallel import DISPATCHERS, FRAMEWORKS, RECOMPUTE, SCHEDULES
from calculators.presets import MODEL_PRESETS
from playbook.values import coerce as _coerce


@dataclass
class Widget:
    wid: str
    controls: dict = field(default_factory=dict)     # URL key -> component (the settings a reader can change)
    defaults: dict = field(default_factory=dict)     # key -> default value (every setting, shown or fixed)
    plot: object = None                              # the output a browser test watches
    handler: object = None                           # values of the controls -> outputs
    outputs: list = field(default_factory=list)
    note: object = None                              # the Markdown output that carries messages


# name, component factory, default. Factories take the value.
def _slider(lo, hi, label, step=1):
    return lambda v: gr.Slider(lo, hi, v, step=step, label=label)


SCENARIO = {
    "model": (lambda v: gr.Dropdown(list(MODEL_PRESETS), value=v, label="model preset"), "llama3-8b"),
    "config": (lambda v: gr.Textbox(v, label="or paste a config.json", lines=2), ""),
    "gpu": (lambda v: gr.Dropdown(list(GPU_PRESETS), value=v, label="GPU"), "H100-80GB"),
    "nodes": (lambda v: gr.Number(v, label="nodes", precision=0, minimum=1), 1),
    "gpn": (lambda v: gr.Number(v, label="GPUs per node", precision=0, minimum=1), 8),
    "dp": (_slider(1, 1024, "dp (data parallel)"), 8),
    "tp": (_slider(1, 64, "tp (tensor parallel)"), 1),
    "pp": (_slider(1, 64, "pp (pipeline stages)"), 1),
    "cp": (_slider(1, 32, "cp (context parallel)"), 1),
    "ep": (_slider(1, 256, "ep (expert parallel)"), 1),
    "vpp": (_slider(1, 8, "vpp (virtual stages)"), 1),
    "zero": (lambda v: gr.Radio([0, 1, 2, 3], value=v, label="ZeRO stage"), 1),
    "sp": (lambda v: gr.Checkbox(v, label="sequence parallel"), True),
    "tp_overlap": (lambda v: gr.Checkbox(v, label="TP comm overlapped with GEMMs (Megatron/TE)"), False),
    "mbs": (_slider(1, 32, "micro-batch (sequences)"), 1),
    "gbs": (lambda v: gr.Number(v, label="global batch (sequences)", precision=0, minimum=1), 64),
    "seq": (_slider(512, 131072, "sequence length", 512), 4096),
    "recompute": (lambda v: gr.Radio(list(RECOMPUTE), value=v, label="activation recompute"), "none"),
    "schedule": (lambda v: gr.Dropdown(list(SCHEDULES), value=v, label="pipeline schedule"), "1f1b"),
    "precision": (lambda v: gr.Radio(["bf16", "fp8"], value=v, label="precision"), "bf16"),
    "framework": (lambda v: gr.Dropdown(list(FRAMEWORKS), value=v, label="framework memory layout"), "megatron"),
    "dispatcher": (lambda v: gr.Radio(list(DISPATCHERS), value=v, label="MoE dispatcher (deepep: a copy per node)"),
                   "alltoall"),
}


def scenario_controls(params: dict, keys=tuple(SCENARIO), show=None) -> tuple[dict, dict]:
    """Build the scenario controls `keys` with chapter `params` as defaults; `show` (a comma list
    in params, or the given default) picks the ones that get a control. Returns (controls,
    defaults): defaults has every key, controls only the shown ones (the rest stay fixed at their
    default, with no component: the page's cost grows with its number of components)."""
    show = params.get("show", show)
    visible = set(show.split(",")) if isinstance(show, str) else set(show or keys)
    defaults = {}
    for key in keys:
        default = SCENARIO[key][1]
        defaults[key] = _coerce(params[key], default) if key in params else default
    shown = [k for k in keys if k in visible]
    half = (len(shown) + 1) // 2
    controls = {}
    with gr.Row(equal_height=False):
        for part in (shown[:half], shown[half:]):
            with gr.Column(min_width=220):             # one block per column: one form, not one per control
                for key in part:
                    controls[key] = SCENARIO[key][0](defaults[key])
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
    """Give the widget its handler `fn(values) -> outputs` (bad input becomes the message, the
    last output). `connect` registers the event once the chapter's tab exists."""
    keys = list(w.controls)
    w.handler = guard(len(outputs))(lambda *vals: fn({**w.defaults, **dict(zip(keys, vals))}))
    w.outputs = outputs
    w.plot, w.note = w.plot or outputs[0], outputs[-1]
    for key, comp in w.controls.items():              # stable handles for the browser test
        comp.elem_id = comp.elem_id or f"{w.wid}-{key}"
    w.plot.elem_id = w.plot.elem_id or f"{w.wid}-plot"
    w.note.elem_id = w.note.elem_id or f"{w.wid}-note"
    return w


CONCURRENCY = 4                  # calls of one widget the server runs at once (the rest queue)


def connect(w: Widget, shown) -> None:
    """One event for the widget, named after it in the API: it draws when `shown` fires (its
    chapter's tab is selected, by the reader or by a link) and on every control change, always
    with the last values, up to CONCURRENCY calls at once. Drawing only the chapter on screen
    keeps the page's first draw fast.
    Its JS hook writes the settings that differ from the chapter's defaults into the URL
    (app.py's HEAD defines window.pbUrl)."""
    keys = list(w.controls)
    defaults = json.dumps([w.defaults.get(k) for k in keys])
    gr.on([shown] + [c.change for c in w.controls.values()], w.handler, list(w.controls.values()), w.outputs,
          api_name=w.wid, trigger_mode="always_last", show_progress="hidden", concurrency_limit=CONCURRENCY,
          js=f"(...a) => window.pbUrl ? window.pbUrl({json.dumps(w.wid)}, {json.dumps(keys)}, {defaults}, a) : a")


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
