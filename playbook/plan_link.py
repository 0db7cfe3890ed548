"""A planner's plan opened in the step widget that shows every knob (the appendix's), by a link:

    appendix?step_14_1.tp=4&step_14_1.pp=2&step_14_1.zero=2&...

The link is relative (it resolves beside the planner's own page, wherever the app is served) and
carries, keyed as that widget's controls, every value of the plan that differs from the widget's
defaults: model, GPU, nodes and GPUs per node, the layout (dp is what the cluster leaves, as the
widget derives it), batch, sequence, recompute (per rank too), schedule, layer split, framework,
dispatcher. The widget's id comes from the book (book.find_widget: the one `step` widget of the
`appendix` page), so renumbering chapters moves the link with the widget.

Each link is checked before it is shown: its query, read as the appendix page reads a link
(url.values_from_query against the widget's own controls, built as the page builds them), must give
back the plan's model, cluster and layout exactly, so the widget shows the planner's step time. A
plan that the widget cannot take (a value its control does not offer, a setting it has no control
for, a value over url.MAX_VALUE characters) gets a sentence naming what, not a link. The planner
plans presets only; a pasted config.json never goes into a link (url.py), so a custom model would
be one of those sentences.

What reaches the page is built only from the plan's values, URL-encoded (urlencode), and shown
only if it is made of characters that cannot end a Markdown link or start markup (SAFE_HREF).
"""
from __future__ import annotations

import functools
import re
from dataclasses import fields, replace
from urllib.parse import urlencode

from calculators.planning.explain import runs_text
from calculators.scenario import parse_hardware, parse_model, parse_parallel
from calculators.specs.errors import ConfigError
from calculators.specs.presets import MODEL_PRESETS
from playbook import book, escape
from playbook.url import MAX_VALUE, values_from_query
from playbook.values import scenario_from
from playbook.widgets import NOT_IN_LINK, Widget, scenario_control, scenario_settings, step

PAGE, WIDGET = "appendix", "step"            # the page (chapter slug) and the widget a plan opens in
SAFE_HREF = re.compile(r"[a-z0-9-]+\?[A-Za-z0-9_.~%=&+-]*")    # a slug and an urlencoded query, nothing else


@functools.lru_cache(maxsize=1)
def target():
    """(the page's chapter, the step widget's id, controls and defaults as its page builds them, every
    chapter's slug). Built once, on the first plan, as bare components in no page and with no event
    (building the widget itself inside a request fails: Gradio 6 gives its upload button's event no
    block id there), read only for the values they offer."""
    chapters = book.chapters()
    ch, wid, params = book.find_widget(chapters, PAGE, WIDGET)
    shown, defaults = scenario_settings(params, step.KEYS, step.SHOW)
    controls = {key: scenario_control(key, defaults, shown) for key in shown}
    return ch, Widget(wid, controls, defaults), [c.slug for c in chapters]


def _text(value) -> str:
    """A value as a link writes it (as the page's own pbUrl does: true, 8, 1f1b; lists as the labels)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (tuple, list)):
        return runs_text(value)
    return str(value)


def settings(plan: dict, model: str, gpu: str, nodes: int) -> dict:
    """The step widget's settings for `plan` (a plan_answer plan) of preset `model` on `nodes` of
    `gpu`: every parallel field by its name (but sp and tp_overlap at tp 1), the cluster as the
    widget's controls name it."""
    par = dict(plan["parallel"])
    par["etp"] = 0 if par["etp"] == par["tp"] else par["etp"]      # 0: as tp (the control's default)
    if par["tp"] == 1:                      # sp and TP overlap mean nothing without TP: left as they are
        del par["sp"], par["tp_overlap"]
    if par["ep"] == 1:                      # nor EP overlap without EP
        del par["ep_overlap"]
    return {**par, "model": model, "gpu": gpu, "nodes": nodes,
            "gpn": parse_hardware({"gpu": gpu, "nodes": nodes}).gpus_per_node}


def _layout(par):
    """`par` as the widget builds it: sp and TP overlap mean nothing without TP (values.scenario_from)."""
    return replace(par, sp=par.sp and par.tp > 1, tp_overlap=par.tp_overlap and par.tp > 1,
                   ep_overlap=par.ep_overlap and par.ep > 1)


def link(plan: dict, model: str, gpu: str, nodes: int) -> tuple[str | None, str]:
    """(relative href, '') opening `plan` in the step widget, or (None, why the widget cannot show it)."""
    ch, w, slugs = target()
    if model not in MODEL_PRESETS:
        return None, "its model is not a preset, and a pasted config.json never goes into a link"
    try:
        want = parse_model({"preset": model}), parse_hardware({"gpu": gpu, "nodes": nodes}), \
            parse_parallel(plan["parallel"])
        values = settings(plan, model, gpu, nodes)
        keys = [k for k in w.controls if k in values and k not in NOT_IN_LINK and
                _text(values[k]) != _text(w.defaults[k])]
        query = {f"{w.wid}.{k}": _text(values[k]) for k in keys}
        _, read = values_from_query(query, [w], slugs)         # as the appendix page reads the link
        skipped = [k for k in keys if (w.wid, k) not in read]
        long = [k for k in skipped if len(query[f"{w.wid}.{k}"]) > MAX_VALUE]
        if long:
            return None, f"its {', '.join(long)} is longer than a link's value may be ({MAX_VALUE} characters)"
        if skipped:
            return None, f"the widget's controls do not offer its {', '.join(skipped)}"
        got = scenario_from({**w.defaults, **{k: v for (_, k), v in read.items()}})
    except ConfigError as exc:
        return None, f"the widget refuses its settings ({exc})"
    differ = [name for name, a, b in (("model", got[0], want[0]), ("cluster", got[1], want[1])) if a != b]
    layouts = _layout(got[2]), _layout(want[2])
    differ += [f.name for f in fields(want[2]) if getattr(layouts[0], f.name) != getattr(layouts[1], f.name)]
    if differ:
        return None, f"the widget has no control for its {', '.join(differ)}"
    href = f"{ch.slug}?{urlencode(query)}"
    return (href, "") if SAFE_HREF.fullmatch(href) else (None, "its link would hold characters a link cannot")


def markdown(plans: list, model: str, gpu: str, nodes: int) -> str:
    """A sentence with a link per plan: '[Open plan #1 in the step widget](...) ...; or plan #2, #3'."""
    links = [(p["rank"], *link(p, model, gpu, nodes)) for p in plans]
    shown = [(rank, href) for rank, href, _ in links if href]
    out = ""
    if shown:
        (first, href), rest = shown[0], shown[1:]
        where = f"chapter {target()[0].order}, {target()[0].title}"
        out = (f"[Open plan #{first} in the step widget]({href}) ({where}: its step-time breakdown, every knob to "
               "change)" + (f"; or plan {', '.join(f'[#{r}]({h})' for r, h in rest)}" if rest else "") + ".")
    for rank, href, why in links:
        if not href:
            out += f" Plan #{rank} has no link to the step widget: {escape.md(why, 300)}."
    return out.strip()
