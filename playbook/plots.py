"""Plot builders: data in, plotly figure out (no Gradio here)."""
from __future__ import annotations

import plotly.graph_objects as go

ROLES = [("weights_gib", "weights"), ("grads_gib", "gradients"), ("master_gib", "fp32 master"),
         ("optimizer_gib", "Adam moments"), ("activations_gib", "activations"), ("other_gib", "buffers")]


def memory_by_stage(memory: dict, title: str) -> go.Figure:
    """Stacked bar per pipeline stage with capacity and usable-memory lines (memory_dict output)."""
    stages = memory["per_stage"]
    x = [f"stage {s['stage']}" for s in stages]
    fig = go.Figure()
    for key, label in ROLES:
        fig.add_bar(name=label, x=x, y=[s[key] for s in stages],
                    hovertemplate=f"{label}: %{{y:.2f}} GiB<extra></extra>")
    fig.add_hline(y=memory["capacity_gib"], line_dash="solid", line_color="#b00",
                  annotation_text=f"capacity {memory['capacity_gib']:.1f} GiB")
    fig.add_hline(y=memory["usable_gib"], line_dash="dot", line_color="#b60",
                  annotation_text=f"usable {memory['usable_gib']:.1f} GiB (fit rule)")
    fig.update_layout(barmode="stack", title=title, yaxis_title="GiB per GPU", height=420,
                      margin=dict(l=50, r=20, t=60, b=40), legend=dict(orientation="h", y=-0.15))
    return fig


def _layout(fig: go.Figure, title: str, x: str, y: str, height: int = 420) -> go.Figure:
    fig.update_layout(title=title, xaxis_title=x, yaxis_title=y, height=height, margin=dict(l=55, r=20, t=60, b=45),
                      legend=dict(orientation="h", y=-0.2))
    return fig


def stacked_phases(phases, capacity_gib: float, title: str) -> go.Figure:
    """[(phase, {role: GiB})] as stacked bars, with the capacity line."""
    fig = go.Figure()
    x = [p for p, _ in phases]
    for role in phases[0][1]:
        fig.add_bar(name=role, x=x, y=[r[role] for _, r in phases], hovertemplate=f"{role}: %{{y:.2f}} GiB<extra></extra>")
    fig.add_hline(y=capacity_gib, line_color="#b00", annotation_text=f"capacity {capacity_gib:.0f} GiB")
    fig.update_layout(barmode="stack")
    return _layout(fig, title, "", "GiB")


def lines(xs, series: dict, x: str, y: str, title: str, log_x=False, log_y=False, marker_x=None) -> go.Figure:
    fig = go.Figure()
    for name, ys in series.items():
        fig.add_scatter(x=xs, y=ys, name=name, mode="lines+markers")
    if marker_x is not None:
        fig.add_vline(x=marker_x, line_dash="dot", line_color="#555", annotation_text="this setting")
    fig.update_xaxes(type="log" if log_x else "linear")
    fig.update_yaxes(type="log" if log_y else "linear")
    return _layout(fig, title, x, y)


HIDDEN = "/"


def breakdown_bar(breakdown: dict, title: str) -> go.Figure:
    """One horizontal stacked bar of a step: exposed parts solid, hidden (overlapped) ones hatched
    beside it, since they cost no time."""
    fig = go.Figure()
    for key, value in breakdown.items():
        if value <= 0:
            continue
        hidden = key.endswith("_hidden")
        fig.add_bar(name=key.replace("_", " "), y=["hidden behind compute" if hidden else "step time"], x=[value],
                    orientation="h", marker_pattern_shape=HIDDEN if hidden else "",
                    hovertemplate=f"{key}: %{{x:.3f}} s<extra></extra>")
    fig.update_layout(barmode="stack")
    return _layout(fig, title, "seconds per step", "", height=300)


def scaling_plot(xs, rows: list[dict], x: str, title: str) -> go.Figure:
    """Seconds per step by part (stacked bars) and tokens/s/GPU (line, right axis) vs one axis;
    memory GiB as a dotted line when the rows carry it."""
    fig = go.Figure()
    labels = [str(v) for v in xs]
    for key in rows[0]:
        if key in ("tokens/s/GPU", "memory GiB"):
            continue
        fig.add_bar(name=f"{key} (s)", x=labels, y=[r[key] for r in rows],
                    marker_pattern_shape=HIDDEN if "hidden" in key else "")
    fig.add_scatter(name="tokens/s/GPU", x=labels, y=[r["tokens/s/GPU"] for r in rows], yaxis="y2",
                    mode="lines+markers", line_color="#111")
    if "memory GiB" in rows[0]:
        fig.add_scatter(name="memory per GPU (GiB)", x=labels, y=[r["memory GiB"] for r in rows], yaxis="y3",
                        mode="lines+markers", line_dash="dot", line_color="#b60")
        fig.update_layout(yaxis3=dict(overlaying="y", side="right", position=1.0, showgrid=False, visible=False))
    fig.update_layout(barmode="stack", yaxis2=dict(title="tokens/s/GPU", overlaying="y", side="right", showgrid=False))
    return _layout(fig, title, x, "seconds per step")


KIND_COLOR = {"F": "#4c78a8", "B": "#e45756", "I": "#f58518", "W": "#54a24b"}


def gantt(ops, p: int, title: str, split: bool) -> go.Figure:
    """ops[r] = (kind, stage, mb, start, end): one bar per op, one row per rank."""
    fig = go.Figure()
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
            fig.add_bar(name={"F": "forward", "B": "backward", "I": "backward (input)", "W": "backward (weights)"}[kind],
                        x=xs, base=base, y=ys, orientation="h", marker_color=color, text=text,
                        textposition="inside", insidetextanchor="middle", marker_line_width=0.5,
                        marker_line_color="white", hovertemplate="micro-batch %{text}<extra></extra>")
    fig.update_yaxes(autorange="reversed")
    fig.update_layout(barmode="overlay", bargap=0.15)
    return _layout(fig, title, "time (one rank's forward = 1)", "", height=120 + 32 * p)


def roofline(peak_tflops: float, hbm_tbps: float, points, title: str) -> go.Figure:
    """The roofline min(peak, AI x bandwidth) and (name, FLOP/byte, TFLOP/s) points."""
    ai = [0.1 * 2 ** (i / 4) for i in range(80)]
    fig = go.Figure()
    fig.add_scatter(x=ai, y=[min(peak_tflops, a * hbm_tbps) for a in ai], name="roofline", mode="lines",
                    line_color="#111")
    fig.add_scatter(x=[p[1] for p in points], y=[p[2] for p in points], text=[p[0] for p in points],
                    mode="markers+text", textposition="top center", name="kernels (time model)",
                    marker=dict(size=10, color="#e45756"))
    fig.update_xaxes(type="log")
    fig.update_yaxes(type="log")
    return _layout(fig, title, "arithmetic intensity (FLOP/byte)", "TFLOP/s")


def plans_bar(plans: list[dict]) -> go.Figure:
    """Each plan's step time by part (the planner's answer)."""
    fig = go.Figure()
    labels = [f"#{p['rank']} {p['label']}" for p in plans]
    keys = []
    for p in plans:
        keys += [k for k, v in p["step"]["breakdown_s"].items() if v > 0 and k not in keys and not k.endswith("_hidden")]
    for k in keys:
        fig.add_bar(name=k.replace("_", " "), y=labels, x=[p["step"]["breakdown_s"].get(k, 0) for p in plans],
                    orientation="h")
    fig.update_yaxes(autorange="reversed")
    fig.update_layout(barmode="stack")
    return _layout(fig, "ranked plans: seconds per step by part", "seconds per step", "", height=120 + 48 * len(plans))


def measured_vs_predicted(points: list[dict], metric: str) -> go.Figure:
    fig = go.Figure()
    by_nodes: dict = {}
    for p in points:
        by_nodes.setdefault(p["nodes"], []).append(p)
    for nodes in sorted(by_nodes):
        pts = by_nodes[nodes]
        fig.add_scattergl(x=[p["measured"] for p in pts], y=[p["predicted"] for p in pts], mode="markers",
                          name=f"{nodes} node{'s' if nodes > 1 else ''}", text=[p["label"] for p in pts],
                          hovertemplate="%{text}<br>measured %{x:.3g}<br>predicted %{y:.3g}<extra></extra>")
    lo = min(min(p["measured"], p["predicted"]) for p in points)
    hi = max(max(p["measured"], p["predicted"]) for p in points)
    fig.add_scatter(x=[lo, hi], y=[lo, hi], mode="lines", name="predicted = measured", line=dict(dash="dot", color="#555"))
    return _layout(fig, f"{metric}: measured vs predicted", f"measured {metric}", f"predicted {metric}")
