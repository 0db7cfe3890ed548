"""The whole book as one Gradio page: a tab per chapter, its text and its live widgets, and the
URL state. `build()` runs inside a gr.Blocks context (app.py composes and launches)."""
from __future__ import annotations

import json

import gradio as gr

from playbook import book
from playbook.url import wire_url
from playbook.widgets import (activations, budget, connect, explorer, memory, network, planner, scaling, schedule,
                              step, timeline)

WIDGETS = {"memory": memory.build, "timeline": timeline.build, "activations": activations.build,
           "dp": scaling.build_dp, "tp": scaling.build_tp, "schedule": schedule.build,
           "collectives": network.build_collectives, "roofline": network.build_roofline, "step": step.build,
           "planner": planner.build, "explorer": explorer.build, "budget": budget.build}
LATEX = [{"left": "$$", "right": "$$", "display": True}, {"left": "$", "right": "$", "display": False}]


def build() -> list:
    """Builds every chapter; returns the widgets (for tests and the URL state)."""
    chapters = book.chapters()
    widgets = []
    with gr.Tabs() as tabs:
        for ch in chapters:
            with gr.Tab(f"{ch.order} {ch.tab}", id=ch.slug) as tab:
                heading = f"# {ch.order}. {ch.title}\n\n"
                for n, seg in enumerate(ch.segments):
                    if seg[0] == "text":
                        gr.Markdown(heading + seg[1], latex_delimiters=LATEX, header_links=True)
                        heading = ""
                    else:
                        _, name, params = seg
                        if name not in WIDGETS:
                            raise ValueError(f"chapter {ch.slug}: unknown widget {name!r}; known: {', '.join(WIDGETS)}")
                        widgets.append(WIDGETS[name](f"{name}_{ch.order}_{n}", params))
                        connect(widgets[-1], tab.select)
            tab.select(None, js=f"() => window.pbChapter({json.dumps(ch.slug)})")
    wire_url(tabs, widgets, [c.slug for c in chapters])
    return widgets
