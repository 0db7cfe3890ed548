"""Widgets: each builds its Gradio components in the current Blocks context, wires one event
(API name = the widget id, so gradio_client and the latency tests can call it) and returns a
`Widget` that says which controls it has, so the app can put every setting in the URL.

Chapters place widgets with defaults and the controls shown: `{{ widget memory model=llama3-70b tp=8 show=tp,zero }}`.

Shared here: building the scenario controls (model, cluster, layout) most widgets use, whose table
is controls.py, their parsing into calculator objects, and `guard`, which turns bad input into an
inline message, never a trace.
"""
from __future__ import annotations

import functools
import json
import math
import os
import re
from dataclasses import dataclass, field

import gradio as gr

from calculators.specs import limits
from calculators.specs.errors import ConfigError
from calculators.specs.presets import MODEL_PRESETS, model_from_name
from calculators.specs.validate import show
from playbook import escape
from playbook.values import MAX_CONFIG_CHARS, coerce as _coerce

from .controls import SCENARIO, recompute_radio


@dataclass
class Widget:
    wid: str
    controls: dict = field(default_factory=dict)     # URL key -> component (the settings a reader can change)
    defaults: dict = field(default_factory=dict)     # key -> default value (every setting, shown or fixed)
    plot: object = None                              # the output a browser test watches
    handler: object = None                           # values of the controls -> outputs
    outputs: list = field(default_factory=list)
    note: object = None                              # the Markdown output that carries messages
    concurrency: int = 4                             # calls the server runs at once (the rest queue)
    budget_s: float = 0.0                            # seconds one call may compute; 0: WIDGET_BUDGET_S
    narrow: str = limits.NARROW                      # how to ask for less when that is spent (its own controls)


def _moe_preset(name) -> bool:
    return name in MODEL_PRESETS and model_from_name(name).moe is not None


def scenario_controls(params: dict, keys=tuple(SCENARIO), show=None) -> tuple[dict, dict]:
    """Build the scenario controls `keys` with chapter `params` as defaults; `show` (a comma list
    in params, or the given default) picks the ones that get a control. Returns (controls,
    defaults): defaults has every key, controls only the shown ones (the rest stay fixed at their
    default, with no component: the page's cost grows with its number of components).

    Every value a control offers can be evaluated: with a `nodes` control the cluster is the
    reader's and dp is what it leaves (no dp control); without one the cluster follows the layout
    (values.scenario_from's `fit`). A batch that is not shown follows dp and mbs.
    A config box comes with an upload button below it, and the preset says when a pasted config
    replaces it."""
    shown, defaults = scenario_settings(params, keys, show)
    cut = balanced_cut([HEIGHT.get(k, 90) for k in shown])
    controls = {}
    with gr.Row(equal_height=False):
        for part in (shown[:cut], shown[cut:]):
            with gr.Column(min_width=220):             # one block per column: one form, not one per control
                for key in part:
                    controls[key] = scenario_control(key, defaults, shown)
                    if key == "config":
                        config_upload(controls[key])
    if "config" in controls and "model" in controls:
        controls["config"].change(preset_in_use, controls["config"], controls["model"], api_visibility="private",
                                  show_progress="hidden", concurrency_limit=CONCURRENCY)
    return controls, defaults


def scenario_settings(params: dict, keys=tuple(SCENARIO), show=None) -> tuple[list, dict]:
    """(the keys that get a control, in order; every key's default, `fit` and `batch` included):
    what scenario_controls builds, without building it (plan_link checks a link against it)."""
    show = params.get("show", show)
    visible = set(show.split(",")) if isinstance(show, str) else set(show or keys)
    defaults = {}
    for key in keys:
        default = SCENARIO[key][1]
        defaults[key] = _coerce(params[key], default) if key in params else default
    if "nodes" in keys:
        defaults["fit"] = "dp" if "nodes" in visible else "cluster"
        if "nodes" in visible:
            visible.discard("dp")
    if "gbs" in keys and "gbs" not in visible:
        defaults["batch"] = "follows"
    return [k for k in keys if k in visible], defaults


def scenario_control(key: str, defaults: dict, shown) -> object:
    """The control of scenario setting `key` at its default. The recompute radio offers Megatron's
    MoE module lists where the model is an MoE preset or ep is shown (recompute_radio)."""
    if key == "recompute":
        return recompute_radio(defaults[key], _moe_preset(defaults.get("model")) or "ep" in shown)
    return SCENARIO[key][0](defaults[key])


def config_upload(box) -> None:
    """A small button under the config box that puts an uploaded config.json's text in it."""
    button = gr.UploadButton("upload a config.json", file_types=[".json"], type="filepath", size="sm",
                             elem_classes=["pb-upload"])
    button.upload(_read_upload, button, box, api_visibility="private", concurrency_limit=CONCURRENCY)


def _read_upload(path):
    """The uploaded config.json's text into the config box (a file over the cap is refused)."""
    if not path:
        return gr.update()
    if os.path.getsize(path) > MAX_CONFIG_CHARS:
        raise gr.Error(f"that file is over {MAX_CONFIG_CHARS // 1024} KB; a model's config.json is a few KB")
    with open(path, "rb") as fh:
        return fh.read(MAX_CONFIG_CHARS).decode("utf-8", errors="replace")


def which_model(v: dict, model=None) -> str:
    """'From the pasted config.json ...' when one replaces the preset (with what the reading notes of
    `model`, the model it gave: its sliding-window or chunked layers), else ''."""
    text = v.get("config")
    if isinstance(text, str) and text.strip():
        note = getattr(model, "source", "").partition("; ")[2]
        return (f"From the pasted config.json, not the preset {escape.md(v.get('model'), 60)} (empty the config box "
                "to go back to it)" + (f"; {escape.md(note, 400)}" if note else "") + ": ")
    return ""


def preset_in_use(text):
    """The preset dropdown's note: whether the pasted config.json replaces it."""
    pasted = isinstance(text, str) and text.strip()
    return gr.update(info="not in use: the pasted config.json is; empty the box to go back to the preset" if pasted
                     else None)


# A control's height on the page in px (1440 x 900, Gradio's Soft theme), for columns of equal height.
HEIGHT = {"config": 150, "sp": 60, "tp_overlap": 60, "ep_overlap": 60}


def balanced_cut(heights: list) -> int:
    """Where to split controls of these heights (in order) into two columns of most equal height:
    a shorter column leaves an empty band beside the taller one."""
    total = sum(heights)
    return min(range(len(heights) + 1), key=lambda k: (abs(total - 2 * sum(heights[:k])), -k))


def control_problem(comp, value) -> str:
    """'' when `value` is one the control `comp` offers, else what is wrong, naming the control:
    a visitor can send any value to the API or put it in a link, whatever the page allows."""
    label = getattr(comp, "label", None) or "a control"
    if isinstance(comp, (gr.Dropdown, gr.Radio)):
        options = [c[1] if isinstance(c, (tuple, list)) else c for c in comp.choices]
        return "" if any(type(value) is type(o) and value == o for o in options) else \
            f"{label} must be one of {', '.join(map(str, options[:12]))} (got {show(value)})"
    if isinstance(comp, gr.Checkbox):
        return "" if isinstance(value, bool) else f"{label} must be true or false (got {show(value)})"
    if isinstance(comp, gr.File):                      # a path Gradio gave; the widget checks where it points
        ok = value is None or isinstance(value, str) and len(value) <= 4096 or \
            isinstance(value, list) and len(value) <= 1 and all(isinstance(x, str) and len(x) <= 4096 for x in value)
        return "" if ok else f"{label} must be one uploaded file (got {show(value)})"
    if isinstance(comp, gr.Textbox):
        cap = comp.max_length or limits.MAX_TEXT
        return "" if isinstance(value, str) and len(value) <= cap else \
            f"{label} must be text of at most {cap:,} characters (got {show(value)})"
    if isinstance(comp, (gr.Slider, gr.Number)):
        lo, hi = comp.minimum, comp.maximum
        whole = comp.precision == 0 if isinstance(comp, gr.Number) else float(comp.step).is_integer()
        ok = type(value) in (int, float) and abs(value) <= 2**53 and math.isfinite(value) and \
            (not whole or float(value).is_integer())             # 2**53 first: a huge int overflows a float
        if not ok or (lo is not None and value < lo) or (hi is not None and value > hi):
            kind = "a whole number" if whole else "a number"
            return f"{label} must be {kind}" + (f" from {lo:,g} to {hi:,g}" if lo is not None and hi is not None
                                                 else "") + f" (got {show(value)})"
    return ""


def _named():
    """(the on-screen label of each scenario control whose label is not its key, a pattern that
    finds those keys where a message names a setting), read off the controls themselves: at import,
    since inside an event Gradio's constructors return updates, not components."""
    labels = {key: make(default).label.split(" (")[0] for key, (make, default) in SCENARIO.items()}
    labels = {key: label for key, label in labels.items() if label.lower() != key}
    # a key bare or as parallel./hardware.<key>, never another's field (model.moe.experts: the model's count)
    pattern = re.compile(r"(?<![\w.])(?:parallel\.|hardware\.)?(" + "|".join(sorted(labels, key=len, reverse=True)) +
                         r")(?= ?[=:]| must| is\b| has\b| lists| repeats)")   # no unbounded run: linear time
    return labels, pattern


_LABELS, _NAMED = _named()


def on_screen(problem: str) -> str:
    """`problem` with the on-screen labels of the settings it names by their key (split: 'layers per
    pipeline stage'), so a visitor finds the control."""
    labels, pattern = _LABELS, _NAMED
    keys = list(dict.fromkeys(m.group(1) for m in pattern.finditer(problem[:2000])))
    if not keys:
        return problem
    return problem + " (" + "; ".join(f"{k}: the control '{labels[k]}'" for k in keys) + ")"


def problem_text(exc: Exception) -> str:
    """The message a widget shows for `exc`; every problem escaped (it may quote a visitor's value)."""
    if isinstance(exc, ConfigError):
        return "**Cannot evaluate this:**\n\n" + "\n".join(f"- {escape.md(on_screen(p), 700)}" for p in exc.problems)
    return (f"**Something went wrong** ({type(exc).__name__}: {escape.md(exc, 200)}). Change a setting, or "
            "report this.")


WIDGET_BUDGET_S = 10.0           # seconds one widget call may compute (the planner is the only long one)


def guard(n_outputs: int, seconds: float = WIDGET_BUDGET_S, narrow: str = limits.NARROW):
    """Wrap a handler: bad input -> (None, ..., message) in place of a traceback; the call runs
    under `seconds` (limits.time_budget), so no search outlives its request. The message is
    always the last output."""
    def wrap(fn):
        @functools.wraps(fn)
        def inner(*args):
            try:
                with limits.time_budget(seconds, "this widget", narrow):
                    return fn(*args)
            except Exception as exc:                 # never a stack trace in the page
                return (*([None] * (n_outputs - 1)), problem_text(exc))
        return inner
    return wrap


def _lenient(preprocess):
    """`preprocess` (a Gradio control class's) for a value the control offers; any other value
    passes through untouched, for the handler to name the control and what to change
    (control_problem). Gradio's own checks answered with no message (a string in a slider),
    without the control's name, or with the whole value quoted back (a 60 MB dropdown value held
    until read), and took `true` for 1."""
    def lenient(self, payload):
        return payload if control_problem(self, payload) else preprocess(self, payload)
    lenient.lenient = True
    return lenient


# On the classes, not on each control: Gradio rebuilds a control from its class when an event
# updates it (a link's settings, the preset's label), and the rebuilt one must stay lenient. A
# subclass would do it too, but Gradio writes a .pyi file beside any module defining one. Every
# event that takes these controls is a widget's (which checks them) or ignores a bad value.
for _cls in (gr.Dropdown, gr.Radio, gr.Checkbox, gr.Slider, gr.Number):
    if not getattr(_cls.preprocess, "lenient", False):
        _cls.preprocess = _lenient(_cls.preprocess)


def wire(w: Widget, fn, outputs: list) -> Widget:
    """Give the widget its handler `fn(values) -> outputs` (bad input becomes the message, the
    last output). `connect` registers the event once the chapter's tab exists."""
    keys = list(w.controls)

    def handler(*vals):
        problems = [p for p in (control_problem(w.controls[k], v) for k, v in zip(keys, vals)) if p]
        if problems:
            raise ConfigError(problems)
        return fn({**w.defaults, **dict(zip(keys, vals))})
    w.handler = guard(len(outputs), w.budget_s or WIDGET_BUDGET_S, w.narrow)(handler)
    w.outputs = outputs
    w.plot, w.note = w.plot or outputs[0], outputs[-1]
    for key, comp in w.controls.items():              # stable handles for the browser test
        comp.elem_id = comp.elem_id or f"{w.wid}-{key}"
    w.plot.elem_id = w.plot.elem_id or f"{w.wid}-plot"
    w.note.elem_id = w.note.elem_id or f"{w.wid}-note"
    return w


CONCURRENCY = Widget.concurrency  # calls of one widget the server runs at once (the rest queue)
NOT_IN_LINK = {"config", "upload"}   # settings never written into the URL or read from it (a pasted or uploaded file)


def connect(w: Widget, shown) -> None:
    """One event for the widget, named after it in the API: it draws when `shown` fires (its
    chapter's tab is selected, by the reader or by a link) and on every control change, always
    with the last values, up to CONCURRENCY calls at once. Drawing only the chapter on screen
    keeps the page's first draw fast.
    Its JS hook writes the settings that differ from the chapter's defaults into the URL
    (app.py's HEAD defines window.pbUrl)."""
    keys = list(w.controls)
    linked = [k for k in keys if k not in NOT_IN_LINK]
    defaults = json.dumps([w.defaults.get(k) for k in linked])
    # the JS hook gets every control's value; it writes the linked ones
    picks = json.dumps([keys.index(k) for k in linked])
    gr.on([shown] + [c.change for c in w.controls.values()], w.handler, list(w.controls.values()), w.outputs,
          api_name=w.wid, trigger_mode="always_last", show_progress="hidden", concurrency_limit=w.concurrency,
          js=f"(...a) => {{ if (window.pbUrl) window.pbUrl({json.dumps(w.wid)}, {json.dumps(linked)}, {defaults}, "
             f"{picks}.map(i => a[i])); return a; }}")


def simple_widget(wid: str, params: dict, spec: dict, fn, label: str) -> Widget:
    """A widget of its own controls (`spec`: key -> (factory(value), default)), a plot and a note."""
    with gr.Group():
        controls, defaults = controls_row(params, spec)
        plot = gr.Plot(label=label)
        text = gr.Markdown(latex_delimiters=[])
    return wire(Widget(wid, controls, defaults), fn, [plot, text])


PER_ROW = 4       # a widget's own controls per row: more squeeze their labels into narrow columns


def controls_row(params: dict, spec: dict) -> tuple[dict, dict]:
    """A widget's own controls with the chapter's `params` as defaults, in rows of at most PER_ROW
    (as many rows as that takes, of sizes differing by at most one)."""
    controls, defaults = {}, {}
    keys = list(spec)
    rows = -(-len(keys) // PER_ROW)
    for r in range(rows):
        with gr.Row():
            for key in keys[r * len(keys) // rows:(r + 1) * len(keys) // rows]:
                factory, default = spec[key]
                value = _coerce(params[key], default) if key in params else default
                controls[key], defaults[key] = factory(value), value
    return controls, defaults
