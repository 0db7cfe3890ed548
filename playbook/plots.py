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
