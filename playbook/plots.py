"""Plot builders: data in, plotly figure out (no Gradio here).

A figure is plotly's JSON (traces and layout as plain dicts, with plotly's default template), the
format plotly.js draws: building it with plotly's objects costs 3 to 20 ms a figure (add_hline
alone 4 ms), most of a widget's server time, while the dicts cost microseconds.
`Figure.validated()` builds the plotly object, which checks every property; the tests call it on
every widget's figure."""
from __future__ import annotations

import functools
import json

import plotly.graph_objects as go
import plotly.io as pio

from playbook import escape

ROLES = [("weights_gib", "weights"), ("grads_gib", "gradients"), ("master_gib", "fp32 master"),
         ("optimizer_gib", "Adam moments"), ("activations_gib", "activations"), ("other_gib", "buffers")]
# one colour per memory role, in every chart that shows memory
ROLE_COLOR = {"weights": "#4c78a8", "gradients": "#f58518", "fp32 master": "#72b7b2", "Adam moments": "#54a24b",
              "activations": "#e45756", "buffers": "#b279a2"}
HIDDEN = "/"
KIND_COLOR = {"F": "#4c78a8", "B": "#e45756", "I": "#f58518", "W": "#54a24b"}
KIND_NAME = {"F": "forward", "B": "backward", "I": "backward (input)", "W": "backward (weights)"}


class Figure(dict):
    """{"data": [...], "layout": {...}}: what gr.Plot sends (it calls `to_json`) and plotly.js draws."""

    def to_json(self) -> str:
        return json.dumps(self, default=float)           # numpy numbers

    def validated(self) -> go.Figure:
        return go.Figure(self)

    @property
    def data(self) -> list:
        return self["data"]

    @property
    def layout(self) -> dict:
        return self["layout"]


@functools.lru_cache(maxsize=1)
def _template() -> dict:
    return pio.templates[pio.templates.default].to_plotly_json()


def _figure(data: list, title: str, x: str = "", y: str = "", height: int = 420, lines=(), **layout) -> Figure:
    """One figure: traces, titles, and `lines` = [("h" | "v", at, color, dash, label)] spanning the plot."""
    shapes, notes = [], []
    for n, (axis, at, color, dash, label) in enumerate(lines):
        span = dict(x0=0, x1=1, xref="paper", y0=at, y1=at) if axis == "h" else dict(y0=0, y1=1, yref="paper", x0=at, x1=at)
        shapes.append(dict(type="line", line=dict(color=color, dash=dash), **span))
        # horizontal lines' labels alternate: above at the right, below at the left, so two close
        # lines (capacity and the usable share) never print over each other
        where = (dict(x=1 - n % 2, xref="paper", y=at, xanchor="left" if n % 2 else "right",
                      yanchor="top" if n % 2 else "bottom") if axis == "h"
                 else dict(x=at, y=1, yref="paper", xanchor="left", yanchor="top"))
        notes.append(dict(text=label, showarrow=False, font=dict(color=color), **where))
    base = dict(title=dict(text=escape.plot(title)), height=height, margin=dict(l=55, r=20, t=60, b=45),
                legend=dict(orientation="h", y=-0.2), shapes=shapes, annotations=notes)
    for axis, text in (("xaxis", x), ("yaxis", y)):
        base[axis] = {"title": {"text": escape.plot(text)}, **layout.pop(axis, {})}
    return Figure(data=data, layout={**base, **layout, "template": _template()})


def _bar(name, x, y, **kw) -> dict:
    return dict(type="bar", name=name, x=x, y=y, **kw)


def memory_by_stage(memory: dict, title: str) -> Figure:
    """Stacked bar per pipeline stage with capacity and usable-memory lines (memory_dict output)."""
    stages = memory["per_stage"]
    x = [f"stage {s['stage']}" for s in stages]
    data = [_bar(label, x, [s[key] for s in stages], marker=dict(color=ROLE_COLOR[label]),
                 hovertemplate=f"{label}: %{{y:.2f}} GiB<extra></extra>") for key, label in ROLES]
    cap, usable = memory["capacity_gib"], memory["usable_gib"]
    return _figure(data, title, "", "GiB per GPU", barmode="stack", legend=dict(orientation="h", y=-0.15),
                   lines=[("h", cap, "#b00", "solid", f"capacity {cap:.1f} GiB"),
                          ("h", usable, "#b60", "dot", f"usable {usable:.1f} GiB (fit rule)")])


def stacked_phases(phases, capacity_gib: float, title: str) -> Figure:
    """[(phase, {role: GiB})] as stacked bars, with the capacity line."""
    x = [p for p, _ in phases]
    data = [_bar(role, x, [r[role] for _, r in phases], marker=dict(color=ROLE_COLOR.get(role)),
                 hovertemplate=f"{role}: %{{y:.2f}} GiB<extra></extra>") for role in phases[0][1]]
    return _figure(data, title, "", "GiB per GPU", barmode="stack",
                   lines=[("h", capacity_gib, "#b00", "solid", f"capacity {capacity_gib:.1f} GiB")])


def lines(xs, series: dict, x: str, y: str, title: str, log_x=False, log_y=False, marker_x=None) -> Figure:
    data = [dict(type="scatter", x=xs, y=ys, name=name, mode="lines+markers") for name, ys in series.items()]
    marks = [] if marker_x is None else [("v", marker_x, "#555", "dot", "this setting")]
    return _figure(data, title, x, y, lines=marks, xaxis=dict(type="log" if log_x else "linear"),
                   yaxis=dict(type="log" if log_y else "linear"))


def breakdown_bar(breakdown: dict, title: str) -> Figure:
    """One horizontal stacked bar of a step: exposed parts solid, hidden (overlapped) ones hatched
    beside it, since they cost no time."""
    data = []
    for key, value in breakdown.items():
        if value <= 0:
            continue
        hidden = key.endswith("_hidden")
        data.append(_bar(key.replace("_", " "), [value], ["hidden behind compute" if hidden else "step time"],
                         orientation="h", marker=dict(pattern=dict(shape=HIDDEN if hidden else "")),
                         hovertemplate=f"{key}: %{{x:.3f}} s<extra></extra>"))
    # the legend beside the bars, not under them, where it sat on the x-axis title
    return _figure(data, title, "seconds per step", "", height=320, barmode="stack",
                   legend=dict(orientation="v", x=1.02, xanchor="left", y=1, yanchor="top"),
                   margin=dict(l=150, r=20, t=60, b=50))


def scaling_plot(xs, rows: list[dict], x: str, title: str) -> Figure:
    """Seconds per step by part (stacked bars) and tokens/s/GPU (line, right axis) vs one axis;
    memory GiB as a dotted line when the rows carry it."""
    labels = [str(v) for v in xs]
    data = [_bar(f"{key} (s)", labels, [r[key] for r in rows],
                 marker=dict(pattern=dict(shape=HIDDEN if "hidden" in key else "")))
            for key in rows[0] if key not in ("tokens/s/GPU", "memory GiB") and any(r[key] for r in rows)]
    data.append(dict(type="scatter", name="tokens/s/GPU", x=labels, y=[r["tokens/s/GPU"] for r in rows], yaxis="y2",
                     mode="lines+markers", line=dict(color="#111")))
    extra = {}
    if "memory GiB" in rows[0]:
        data.append(dict(type="scatter", name="memory per GPU (GiB)", x=labels, y=[r["memory GiB"] for r in rows],
                         yaxis="y3", mode="lines+markers", line=dict(dash="dot", color="#b60")))
        extra["yaxis3"] = dict(overlaying="y", side="right", position=1.0, showgrid=False, visible=False)
    return _figure(data, title, x, "seconds per step", barmode="stack",
                   yaxis2=dict(title=dict(text="tokens/s/GPU"), overlaying="y", side="right", showgrid=False), **extra)


def gantt(ops, p: int, title: str, split: bool) -> Figure:
    """ops[r] = (kind, stage, mb, start, end): one bar per op, one row per rank."""
    data = []
    for kind, color in KIND_COLOR.items():
        xs, base, ys, text = [], [], [], []
        for r, rank_ops in enumerate(ops):
            for k, stage, mb, start, end in rank_ops:
                if k == kind:
                    xs.append(end - start)
                    base.append(start)
                    ys.append(f"rank {r}")
                    text.append(str(mb))
        if xs:
            data.append(_bar(KIND_NAME[kind], xs, ys, base=base, orientation="h", text=text,
                             marker=dict(color=color, line=dict(width=0.5, color="white")),
                             textposition="inside", insidetextanchor="middle", textangle=0,
                             hovertemplate="micro-batch %{text}<extra></extra>"))
    # a row tall enough to read; micro-batch numbers upright, hidden where a bar is too narrow
    return _figure(data, title, "time (one rank's forward = 1)", "", height=170 + 46 * p, barmode="overlay",
                   bargap=0.15, yaxis=dict(autorange="reversed"), uniformtext=dict(mode="hide", minsize=9))


def roofline(peak_tflops: float, hbm_tbps: float, points, title: str) -> Figure:
    """The roofline min(peak, AI x bandwidth) and (name, FLOP/byte, TFLOP/s) points."""
    ai = [0.1 * 2 ** (i / 4) for i in range(80)]
    data = [dict(type="scatter", x=ai, y=[min(peak_tflops, a * hbm_tbps) for a in ai], name="roofline", mode="lines",
                 line=dict(color="#111")),
            dict(type="scatter", x=[p[1] for p in points], y=[p[2] for p in points], text=[p[0] for p in points],
                 mode="markers+text", textposition="top center", name="kernels (time model)",
                 marker=dict(size=10, color="#e45756"))]
    return _figure(data, title, "arithmetic intensity (FLOP/byte)", "TFLOP/s", xaxis=dict(type="log"),
                   yaxis=dict(type="log"))


def placeholder(message: str) -> Figure:
    """A small empty figure that says why there is nothing to draw (instead of an empty box)."""
    return _figure([], "", height=160, xaxis=dict(visible=False), yaxis=dict(visible=False),
                   annotations=[dict(text=escape.plot(message), showarrow=False, x=0.5, y=0.5, xref="paper",
                                     yref="paper", font=dict(size=14, color="#555"))])


def plans_bar(plans: list[dict]) -> Figure:
    """Each plan's step time by part (the planner's answer)."""
    labels = [f"#{p['rank']} {p['label']}" for p in plans]
    keys = []
    for p in plans:
        keys += [k for k, v in p["step"]["breakdown_s"].items() if v > 0 and k not in keys and not k.endswith("_hidden")]
    data = [_bar(k.replace("_", " "), [p["step"]["breakdown_s"].get(k, 0) for p in plans], labels, orientation="h")
            for k in keys]
    return _figure(data, "ranked plans: seconds per step by part", "seconds per step", "",
                   height=120 + 48 * len(plans), barmode="stack", yaxis=dict(autorange="reversed"))


def measured_vs_predicted(points: list[dict], metric: str) -> Figure:
    """One trace per node count for measured runs; a point with a `series` (a published table)
    goes in that series' trace, drawn as larger diamonds."""
    groups: dict = {}
    for p in points:
        groups.setdefault((1, p["series"]) if p.get("series") else (0, p["nodes"]), []).append(p)
    data = [dict(type="scattergl", x=[p["measured"] for p in pts], y=[p["predicted"] for p in pts], mode="markers",
                 name=key if published else f"{key} node{'s' if key > 1 else ''}", text=[p["label"] for p in pts],
                 marker=dict(symbol="diamond", size=11, line=dict(width=1, color="#111")) if published else {},
                 hovertemplate="%{text}<br>measured %{x:.3g}<br>predicted %{y:.3g}<extra></extra>")
            for (published, key), pts in sorted(groups.items())]
    lo = min(min(p["measured"], p["predicted"]) for p in points)
    hi = max(max(p["measured"], p["predicted"]) for p in points)
    data.append(dict(type="scatter", x=[lo, hi], y=[lo, hi], mode="lines", name="predicted = measured",
                     line=dict(dash="dot", color="#555")))
    return _figure(data, f"{metric}: measured vs predicted", f"measured {metric}", f"predicted {metric}")
