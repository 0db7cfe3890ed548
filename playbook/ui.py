"""The whole book as a Gradio app of pages: a page per chapter (the first at the root, the others at
their slug: /pipeline-parallel), its text and its live widgets, a navigation bar, and the URL
state. `build(demo)` adds them to a gr.Blocks (app.py composes and launches).

A page per chapter, not a tab per chapter: a browser loads only the open chapter's components, so
the first widget draws about as soon as on a bare Gradio page (with every chapter in one page's
config, 1.3 to 1.4 times as late: the frontend walks all of them before drawing any), and each
chapter has an address of its own."""
from __future__ import annotations

import contextlib
import threading

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
INTRO = ("# LLM training playbook\nMemory, compute and communication of training large language models on GPU "
         "clusters, computed live by one set of calculators. Every setting is in the URL: copy it to share what "
         "you see.")


def nav_name(ch) -> str:
    return f"{ch.order} {ch.tab}"


def build(demo: gr.Blocks) -> list:
    """Adds every chapter to `demo` as a page; returns the widgets (for tests and the URL state)."""
    chapters = book.chapters()
    slugs = [c.slug for c in chapters]
    widgets = []
    pages = chapters[1:]
    with _deferred_app(demo) if pages else contextlib.nullcontext():
        with demo:
            gr.Markdown(INTRO)
            widgets += _chapter(demo, chapters[0], nav_name(chapters[0]), slugs)
        for ch in pages[:-1]:
            with demo.route(nav_name(ch), ch.slug):
                widgets += _chapter(demo, ch, nav_name(chapters[0]), slugs)
    for ch in pages[-1:]:                       # this exit builds the config and the app, once
        with demo.route(nav_name(ch), ch.slug):
            widgets += _chapter(demo, ch, nav_name(chapters[0]), slugs)
    return widgets


@contextlib.contextmanager
def _deferred_app(demo: gr.Blocks):
    """Gradio builds the page's config and a whole FastAPI app each time a `with demo` or
    `with demo.route(...)` block exits (Blocks.__exit__), and launch() builds both again: with 14
    pages that was 6 s of a 9 s start on a 2-core machine, all thrown away. Inside this block the
    exits of `demo` skip both (any other Blocks builds as usual); the last page's exit, outside it,
    builds them as Gradio would. One build at a time (_DEFERRING)."""
    import gradio.blocks as blocks
    original = blocks.App.__dict__["create_app"]            # the staticmethod itself, to put back
    build_app = original.__func__
    with _DEFERRING:
        blocks.App.create_app = staticmethod(lambda b, *a, **k: None if b is demo else build_app(b, *a, **k))
        demo.get_config_file = lambda: {}
        try:
            yield
        finally:
            blocks.App.create_app = original
            del demo.get_config_file


_DEFERRING = threading.Lock()


def _chapter(demo: gr.Blocks, ch, home: str, slugs: list) -> list:
    """One chapter's page: the navigation bar, its text and widgets, each drawn when the page loads."""
    gr.Navbar(main_page_name=home)
    heading = f"# {ch.order}. {ch.title}\n\n"
    widgets = []
    for n, seg in enumerate(ch.segments):
        if seg[0] == "text":
            gr.Markdown(heading + seg[1], latex_delimiters=LATEX, header_links=True)
            heading = ""
        else:
            _, name, params = seg
            if name not in WIDGETS:
                raise ValueError(f"chapter {ch.slug}: unknown widget {name!r}; known: {', '.join(WIDGETS)}")
            widgets.append(WIDGETS[name](book.widget_id(name, ch.order, n), params))
            connect(widgets[-1], demo.load)
    wire_url(widgets, slugs, ch.slug)
    return widgets
