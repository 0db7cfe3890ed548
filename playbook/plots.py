"""Plot builders: data in, plotly figure out (no Gradio here).

A figure is plotly's JSON (traces and layout as plain dicts, with plotly's default template), the
format plotly.js draws: building it with plotly's objects costs 3 to 20 ms a figure (add_hline
alone 4 ms), most of a widget's server time, while the dicts cost microseconds.
`Figure.validated()` builds the plotly object, which checks every property; the tests call it on
every widget's figure."""
from __future__ import annotations

import functools
import json
import math

import plotly.graph_objects as go
import plotly.io as pio

from playbook import escape

ROLES = [("weights_gib", "weights"), ("grads_gib", "gradients"), ("master_gib", "master weights"),
         ("optimizer_gib", "Adam moments"), ("activations_gib", "activations"), ("other_gib", "buffers")]
# one colour per memory role, in every chart that shows memory
ROLE_COLOR = {"weights": "#4c78a8", "gradients": "#f58518", "master weights": "#72b7b2", "Adam moments": "#54a24b",
              "activations": "#e45756", "buffers": "#b279a2"}
# one colour per kind of time, in every chart of a step's parts; a hidden (overlapped) part keeps
# its kind's colour, hatched
TIME_COLOR = {"compute": "#4c78a8", "recompute": "#9ecae9", "host": "#bab0ac", "tp": "#e45756", "cp": "#ff9da6",
              "ep": "#b279a2", "offload": "#d6616b", "pp": "#9d755d", "dp": "#f58518", "bubble": "#eeca3b",
              "optimizer": "#54a24b", "other": "#72b7b2", "host optimizer": "#2f6b2a"}
HIDDEN = "/"
KIND_COLOR = {"F": "#4c78a8", "B": "#e45756", "I": "#f58518", "W": "#54a24b"}
KIND_NAME = {"F": "forward", "B": "backward", "I": "backward (input)", "W": "backward (weights)"}


def time_color(part: str) -> str | None:
    """The colour of a step's part, by its kind: 'tp_exposed', 'DP sync hidden (s)', 'waiting for
    the host' and 'host_bound' alike."""
    words = part.lower().replace("_", " ").split()
    if words[:2] == ["host", "copies"]:          # the offloaded optimizer's copies: host-link traffic
        return TIME_COLOR["offload"]
    if words[:2] == ["host", "optimizer"]:       # and its step on the host
        return TIME_COLOR["host optimizer"]
    return TIME_COLOR.get("host" if "host" in words else words[0] if words else "")


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
        # horizontal lines' labels sit in the right margin, never on a bar; the first above its
        # line, the next below, so two close lines (capacity and the usable share) stay apart
        where = (dict(x=1, xref="paper", y=at, xanchor="left", yanchor="top" if n % 2 else "bottom")
                 if axis == "h" else dict(x=at, y=1, yref="paper", xanchor="left", yanchor="top"))
        notes.append(dict(text=label, showarrow=False, font=dict(color=color), **where))
    right = 130 if any(axis == "h" for axis, *_ in lines) else 20       # room for the lines' labels
    # a horizontal legend at the figure's foot (container units), below the x-axis title and its
    # ticks whatever the plot's height; the bottom margin holds the three
    base = dict(title=dict(text=escape.plot(title)), height=height,
                margin=dict(l=55, r=right, t=60, b=100 if x else 75),
                legend=dict(orientation="h", yref="container", y=0, yanchor="bottom", x=0, xanchor="left"),
                shapes=shapes, annotations=notes)
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
    return _figure(data, title, "", "GiB per GPU", barmode="stack",
                   lines=[("h", cap, "#b00", "solid", f"capacity {cap:.1f} GiB"),
                          ("h", usable, "#b60", "dot", f"usable {usable:.1f} GiB<br>(fit rule)")])


def stacked_phases(phases, capacity_gib: float, title: str, usable_gib: float | None = None) -> Figure:
    """[(phase, {role: GiB})] as stacked bars, with the capacity line and, given, the usable one."""
    x = [p for p, _ in phases]
    data = [_bar(role, x, [r[role] for _, r in phases], marker=dict(color=ROLE_COLOR.get(role)),
                 hovertemplate=f"{role}: %{{y:.2f}} GiB<extra></extra>") for role in phases[0][1]]
    usable = [("h", usable_gib, "#b60", "dot", f"usable {usable_gib:.1f} GiB<br>(fit rule)")] if usable_gib else []
    return _figure(data, title, "", "GiB per GPU", barmode="stack",
                   lines=[("h", capacity_gib, "#b00", "solid", f"capacity {capacity_gib:.1f} GiB")] + usable)


def _short(v: float) -> str:
    """1024 -> 1k, 131072 -> 128k, 2**20 -> 1M; small numbers as they are."""
    for unit, size in (("M", 2**20), ("k", 2**10)):
        if v >= size and v % size == 0:
            return f"{v // size:g}{unit}"
    return f"{v:g}"


def _log_axis(values, ticks=None) -> dict:
    """A log axis with one label per tick that matters: the given ticks (the data's own x values),
    else powers of ten when the values span two decades or more, else 1-2-5 (no crowd of minor
    labels)."""
    if ticks:
        return dict(type="log", tickvals=list(ticks), ticktext=[_short(t) for t in ticks])
    positive = [v for v in values if v and v > 0]
    if not positive:
        return dict(type="log")
    lo, hi = min(positive), max(positive)
    if hi / lo >= 100:       # SI prefixes: plotly's default writes 1e9 as "1B", one byte on a bytes axis
        return dict(type="log", dtick=1, exponentformat="SI")
    # under two decades: 1-2-5 ticks, each labelled in full (plotly's minor labels read "2", "5");
    # finer steps where the values span so little that 1-2-5 would leave fewer than three labels
    decades = range(math.floor(math.log10(lo)) - 1, math.ceil(math.log10(hi)) + 1)
    for steps in ((1, 2, 5), (1, 1.5, 2, 3, 5, 7), (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8)):
        marks = [v for v in (m * 10.0 ** e for e in decades for m in steps) if lo / 1.5 <= v <= hi * 1.5]
        if len(marks) >= 3:
            break
    return dict(type="log", tickvals=marks, ticktext=[_decimal(v) for v in marks])


def _value_axis(values) -> dict:
    """A log axis where the values span a factor of 3 or more, else a linear one: on a log axis a
    0.1% change fills the plot's height with no tick to read it by."""
    positive = [v for v in values if v and v > 0]
    if positive and max(positive) / min(positive) >= 3:
        return _log_axis(positive)
    return dict(type="linear", rangemode="tozero")


def _decimal(v: float) -> str:
    """5e6 -> 5M, 20000 -> 20k, 0.05 -> 0.05: a tick's label (SI: 1e9 is 1G, not 1B, a byte)."""
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if v >= size:
            return f"{v / size:g}{unit}"
    return f"{v:g}"


DASHES = ("solid", "dash", "dot", "dashdot")
SYMBOLS = ("circle", "square", "diamond", "triangle-up")


def lines(xs, series: dict, x: str, y: str, title: str, log_x=False, log_y=False, marker_x=None) -> Figure:
    """One line per series, each with its own dash and marker, so that two series with the same
    values (no recompute and selective with flash attention) both stay visible."""
    data = [dict(type="scatter", x=xs, y=ys, name=name, mode="lines+markers",
                 line=dict(dash=DASHES[n % len(DASHES)]), marker=dict(symbol=SYMBOLS[n % len(SYMBOLS)], size=8))
            for n, (name, ys) in enumerate(series.items())]
    marks = [] if marker_x is None else [("v", marker_x, "#555", "dot", "this setting")]
    ys = [v for series_ys in series.values() for v in series_ys]
    return _figure(data, title, x, y, lines=marks,
                   xaxis=_log_axis(xs, xs if len(xs) <= 12 else None) if log_x else dict(type="linear"),
                   yaxis=_log_axis(ys) if log_y else dict(type="linear"))


def breakdown_bar(breakdown: dict, title: str) -> Figure:
    """One horizontal stacked bar of a step: exposed parts solid, hidden (overlapped) ones hatched
    beside it, since they cost no time."""
    data = []
    for key, value in breakdown.items():
        if value <= 0:
            continue
        hidden = key.endswith("_hidden")
        data.append(_bar(key.replace("_", " "), [value], ["hidden behind compute" if hidden else "step time"],
                         orientation="h", marker=dict(color=time_color(key),
                                                      pattern=dict(shape=HIDDEN if hidden else "")),
                         hovertemplate=f"{key}: %{{x:.3f}} s<extra></extra>"))
    # the legend beside the bars, not under them, where it sat on the x-axis title; in the bar's
    # order, left to right; the figure as tall as the legend needs (about 22 px an entry), so it
    # never scrolls
    return _figure(data, title, "seconds per step", "", height=max(320, 150 + 22 * len(data)), barmode="stack",
                   legend=dict(orientation="v", x=1.02, xanchor="left", y=1, yanchor="top", traceorder="normal"),
                   margin=dict(l=150, r=20, t=60, b=50))


def scaling_plot(xs, rows: list[dict], x: str, title: str, usable_gib: float | None = None) -> Figure:
    """Seconds per step by part and tokens/s/GPU (line, right axis) vs one axis; memory per GPU
    (dotted line, its own labelled axis at the far right) when the rows carry it, with the usable
    memory (`usable_gib`) as a line on that axis and the tokens/s of layouts over it drawn hollow:
    a speed they cannot reach. The parts are
    lines on a log axis when they span two decades or more (a step of minutes beside a sync of
    milliseconds), stacked bars otherwise."""
    labels = [str(v) for v in xs]
    keys = [key for key in rows[0] if key not in ("tokens/s/GPU", "memory GiB") and any(r[key] for r in rows)]
    values = [r[key] for r in rows for key in keys if r[key] > 0]
    wide = bool(values) and max(values) / min(values) >= 100
    if wide:   # lines, not bars: a bar on a log axis has no base, and plotly draws it past the plot area
        data = [dict(type="scatter", name=f"{key} (s)", x=labels, y=[r[key] if r[key] > 0 else None for r in rows],
                     mode="lines+markers", line=dict(dash="dot" if "hidden" in key else "solid", color=time_color(key)),
                     hovertemplate=f"{key}: %{{y:.3g}} s<extra></extra>") for key in keys]
    else:
        data = [_bar(f"{key} (s)", labels, [r[key] for r in rows],
                     marker=dict(color=time_color(key), pattern=dict(shape=HIDDEN if "hidden" in key else "")))
                for key in keys]
    over = [usable_gib is not None and r.get("memory GiB", 0) > usable_gib for r in rows]
    data.append(dict(type="scatter", name="tokens/s/GPU" + (" (hollow: does not fit)" if any(over) else ""), x=labels,
                     y=[r["tokens/s/GPU"] for r in rows], yaxis="y2", mode="lines+markers", line=dict(color="#111"),
                     marker=dict(symbol=["circle-open" if o else "circle" for o in over], size=9)))
    extra = {}
    if "memory GiB" in rows[0]:
        data.append(dict(type="scatter", name="memory per GPU (GiB)", x=labels, y=[r["memory GiB"] for r in rows],
                         yaxis="y3", mode="lines+markers", line=dict(dash="dot", color="#b60")))
        if usable_gib is not None:
            data.append(dict(type="scatter", name=f"usable memory ({usable_gib:.0f} GiB)", x=labels,
                             y=[usable_gib] * len(labels), yaxis="y3", mode="lines", hoverinfo="skip",
                             line=dict(dash="dash", color="#b60", width=1)))
        extra = dict(xaxis=dict(domain=[0, 0.84]),
                     yaxis3=dict(title=dict(text="memory per GPU (GiB)", font=dict(color="#b60")), overlaying="y",
                                 side="right", anchor="free", position=1.0, showgrid=False,
                                 tickfont=dict(color="#b60")))
    return _figure(data, title, x, "seconds per step" + (" (log)" if wide else ""),
                   barmode="stack", yaxis=_log_axis(values) if wide else {},
                   yaxis2=dict(title=dict(text="tokens/s/GPU"), overlaying="y", side="right", showgrid=False,
                               **({"anchor": "x"} if extra else {})),
                   **extra)


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
    """The roofline min(peak, AI x bandwidth) and (name, FLOP/byte, TFLOP/s) points, each point
    its own legend entry (labels printed beside points collided where kernels cluster)."""
    ai = [0.1 * 2 ** (i / 4) for i in range(80)]
    data = [dict(type="scatter", x=ai, y=[min(peak_tflops, a * hbm_tbps) for a in ai], name="roofline", mode="lines",
                 line=dict(color="#111"))]
    data += [dict(type="scatter", x=[p[1]], y=[p[2]], mode="markers", name=p[0], marker=dict(size=11),
                  hovertemplate=f"{escape.plot(p[0])}: %{{x:.3g}} FLOP/byte, %{{y:.3g}} TFLOP/s<extra></extra>")
             for p in points]
    return _figure(data, title, "arithmetic intensity (FLOP/byte)", "TFLOP/s", height=460,
                   xaxis=dict(type="log", dtick=1), yaxis=dict(type="log", dtick=1),
                   legend=dict(orientation="v", x=1.02, xanchor="left", y=1, yanchor="top"),
                   margin=dict(l=55, r=20, t=60, b=50))


def placeholder(message: str) -> Figure:
    """A small empty figure that says why there is nothing to draw (instead of an empty box)."""
    # the plot area must keep a positive height under _figure's margins (160 px left 25 px, and
    # Plotly threw "Something went wrong with axis scaling" replacing a bar chart with it)
    return _figure([], "", height=240, xaxis=dict(visible=False, range=[0, 1]),
                   yaxis=dict(visible=False, range=[0, 1]),
                   annotations=[dict(text=escape.plot(message), showarrow=False, x=0.5, y=0.5, xref="paper",
                                     yref="paper", font=dict(size=14, color="#555"))])


def plans_bar(plans: list[dict]) -> Figure:
    """Each plan's step time by part (the planner's answer)."""
    labels = [f"#{p['rank']} {p['label']}" for p in plans]
    keys = []
    for p in plans:
        keys += [k for k, v in p["step"]["breakdown_s"].items() if v > 0 and k not in keys and not k.endswith("_hidden")]
    data = [_bar(k.replace("_", " "), [p["step"]["breakdown_s"].get(k, 0) for p in plans], labels, orientation="h",
                 marker=dict(color=time_color(k))) for k in keys]
    return _figure(data, "ranked plans: seconds per step by part", "seconds per step", "",
                   height=120 + 48 * len(plans), barmode="stack", yaxis=dict(autorange="reversed"))


def measured_vs_predicted(points: list[dict], metric: str) -> Figure:
    """One trace per node count for measured runs; a point with a `series` (a published table)
    goes in that series' trace, drawn as larger diamonds; the visitor's uploaded runs (`yours`) are
    one trace of raspberry stars, first in the legend and drawn last, over the others. Both axes
    span the same range at the same scale, so y = x is the diagonal, with a +-20% band; log axes
    when the values span a decade or more (a 500 tokens/s run beside a 50,000 one); the legend at
    the side, not over the plot's height."""
    both = [v for p in points for v in (p["measured"], p["predicted"])]
    log = min(both) > 0 and max(both) / min(both) >= 10
    groups: dict = {}
    for p in points:       # 0: measured runs by node count; 1: a published table; 2: the visitor's upload
        kind = (2, "your runs") if p.get("yours") else (1, p["series"]) if p.get("series") else (0, p["nodes"])
        groups.setdefault(kind, []).append(p)
    marker = {0: {}, 1: dict(symbol="diamond", size=11, line=dict(width=1, color="#111")),
              2: dict(symbol="star", size=17, color="#d6336c", line=dict(width=1.5, color="#111"))}
    data = [dict(type="scattergl", x=[p["measured"] for p in pts], y=[p["predicted"] for p in pts], mode="markers",
                 name=f"{key} node{'s' if key > 1 else ''}" if kind == 0 else key, text=[p["label"] for p in pts],
                 marker=marker[kind], legendrank=1 if kind == 2 else 1000,       # the visitor's first in the legend
                 hovertemplate="%{text}<br>measured %{x:.3g}<br>predicted %{y:.3g}<extra></extra>")
            for (kind, key), pts in sorted(groups.items(),      # node counts as numbers (1, 2, 4, ... not 1, 16, 2)
                                           key=lambda g: (g[0][0], g[0][1] if g[0][0] == 0 else 0, str(g[0][1])))]
    lo, hi = min(both), max(both)
    lo, hi = (lo / 1.3, hi * 1.3) if log else (min(0.0, lo), hi * 1.05)
    data.append(dict(type="scatter", x=[lo, hi], y=[lo, hi], mode="lines", name="predicted = measured",
                     line=dict(dash="dot", color="#555"), hoverinfo="skip"))
    for n, f in enumerate((1.2, 0.8)):
        data.append(dict(type="scatter", x=[lo, hi], y=[lo * f, hi * f], mode="lines", name="+-20%",
                         legendgroup="band", showlegend=n == 0, line=dict(dash="dot", color="#bbb", width=1),
                         hoverinfo="skip"))
    span = [math.log10(lo), math.log10(hi)] if log else [lo, hi]
    kind = "log" if log else "linear"

    def title(which):                # "measured peak memory (GiB, log)", not "(GiB) (log)"
        text = f"{which} {metric}"
        if not log:
            return text
        return f"{text[:-1]}, log)" if text.endswith(")") else f"{text} (log)"
    return _figure(data, f"{metric}: measured vs predicted", title("measured"), title("predicted"),
                   height=640, legend=dict(orientation="v", x=1.02, xanchor="left", y=1, yanchor="top"),
                   xaxis=dict(_log_axis(both) if log else {}, type=kind, range=span, constrain="domain"),
                   yaxis=dict(_log_axis(both) if log else {}, type=kind, range=span, scaleanchor="x", scaleratio=1,
                              constrain="domain"))


def budget_plot(options: list[dict], knee, title: str) -> Figure:
    """A run's days and cost vs cluster size (top; cost on the right axis) and its goodput and
    efficiency vs linear (bottom), one point per size that fits; the knee a dashed line on both.
    Sizes span decades, so the x axis is log with a label at each size."""
    fit = sorted((o for o in options if o.get("days")), key=lambda o: o["gpus"])
    xs = [o["gpus"] for o in fit]
    days, cost = [o["days"] for o in fit], [o["cost"] for o in fit]
    hover = "%{x:,} GPUs: %{y:,.3s} "
    data = [dict(type="scatter", x=xs, y=days, name="days to train", mode="lines+markers",
                 line=dict(color="#4c78a8"), hovertemplate=hover + "days<extra></extra>"),
            dict(type="scatter", x=xs, y=cost, name="cost", mode="lines+markers", yaxis="y2",
                 line=dict(color="#f58518", dash="dash"), hovertemplate=hover + "(cost)<extra></extra>"),
            dict(type="scatter", x=xs, y=[100 * o["goodput"] for o in fit], name="goodput %", mode="lines+markers",
                 xaxis="x2", yaxis="y3", line=dict(color="#54a24b"), hovertemplate=hover + "%<extra></extra>"),
            dict(type="scatter", x=xs, y=[100 * o["efficiency"] for o in fit], name="efficiency vs linear %",
                 mode="lines+markers", xaxis="x2", yaxis="y3", line=dict(color="#b279a2"),
                 hovertemplate=hover + "%<extra></extra>")]
    if knee:
        # a trace, not a shape: on a log axis a shape's and an annotation's x are in log10 units
        knee_line = dict(color="#b00", dash="dot")
        data += [dict(type="scatter", x=[knee, knee], y=[min(days), max(days)], mode="lines", line=knee_line,
                      name=f"knee: {knee:,} GPUs", hoverinfo="skip"),
                 dict(type="scatter", x=[knee, knee], y=[0, 100], mode="lines", xaxis="x2", yaxis="y3",
                      line=knee_line, showlegend=False, hoverinfo="skip")]
    ticks = dict(type="log", tickvals=xs, ticktext=[f"{x:,}" for x in xs])
    days_axis, cost_axis = _value_axis(days), _value_axis(cost)
    days_title = "days to train (log)" if days_axis["type"] == "log" else "days to train"
    cost_title = "cost ($, log)" if cost_axis["type"] == "log" else "cost ($)"
    return _figure(data, title, "GPUs (log)", days_title, height=560,
                   xaxis=dict(ticks, anchor="y", domain=[0, 1]),
                   yaxis=dict(days_axis, domain=[0.42, 1]),
                   yaxis2=dict(cost_axis, title=dict(text=cost_title), overlaying="y", side="right",
                               showgrid=False),
                   xaxis2=dict(ticks, anchor="y3", matches="x", title=dict(text="GPUs (log)")),
                   yaxis3=dict(title=dict(text="%"), domain=[0, 0.3], range=[0, 105], anchor="x2"),
                   margin=dict(l=60, r=60, t=60, b=100))
