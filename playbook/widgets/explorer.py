"""Benchmark explorer: measured vs predicted for every result row, bundled (benchmarks/results/),
the server's own results directory (`PLAYBOOK_RESULTS`, set by whoever runs the app) and a file
the visitor uploads (drawn as one trace of raspberry stars, with its own median error), filtered by
model, node count and status. A visitor never names a path: an
upload is read only from Gradio's upload folder, at most MAX_UPLOAD_BYTES, as JSON Lines. Measured runs
are drawn per node count; rows from a published table (their config names a `release`) are their
own series, one per release, with their own median error.

Each row carries the prediction the calculators made when it was recorded (the result schema's
`prediction`), so this plot is one join away (playbook/measured.py) and costs nothing to redraw.
"""
from __future__ import annotations

import os
import re

import gradio as gr

from calculators.specs.errors import ConfigError
from playbook import escape
from playbook.measured import MAX_UPLOAD_BYTES, METRICS, match, sources
from playbook.plots import measured_vs_predicted

from . import Widget, controls_row, wire

CONTROLS = {
    "metric": (lambda v: gr.Radio(list(METRICS), value=v, label="compare"), "tokens/s/GPU"),
    "model": (lambda v: gr.Textbox(v, label="model name contains (empty: all)"), ""),
    "nodes": (lambda v: gr.Dropdown(["all", "1", "2", "4", "8", "16", "32", "64"], value=v, label="nodes"), "all"),
    "upload": (lambda v: gr.File(v, label="add your results (.jsonl, as the harness writes them)",
                                 file_types=[".jsonl"], type="filepath", height=150), None),
}


def _upload(value) -> tuple:
    """(path, size, mtime) of an uploaded file, or () for none. Only a regular file inside
    Gradio's upload folder is accepted: a value that names anything else is refused unread."""
    if value in (None, "", []):
        return ()
    if isinstance(value, list) and len(value) == 1:
        value = value[0]
    if not isinstance(value, str):
        raise ConfigError("the upload must be one results file (.jsonl)")
    folder = os.path.realpath(gr.utils.get_upload_folder())
    try:                                           # a NUL byte or a lone surrogate is no path
        path = os.path.realpath(value)
        inside = os.path.commonpath([folder, path]) == folder and os.path.isfile(path)
    except (ValueError, UnicodeError):
        inside = False
    if not inside:
        raise ConfigError("that upload is no longer on the server: upload the results file again")
    st = os.stat(path)
    if st.st_size > MAX_UPLOAD_BYTES:
        raise ConfigError(f"the uploaded file is {st.st_size / 2**20:,.1f} MiB; the limit is "
                          f"{MAX_UPLOAD_BYTES // 2**20} MiB: upload fewer rows, or run the app yourself with "
                          "PLAYBOOK_RESULTS pointing at them")
    return (path, st.st_size, st.st_mtime)


LINE_REF = re.compile(r" line \d+\)$")


def compute(v: dict):
    pts, notes, problems = match(sources(), _upload(v.get("upload")), v["metric"], v["model"] or "", v["nodes"])
    if not pts:
        raise ConfigError("no measured rows match these filters: widen them (model, nodes) or add results")

    def median_error(ps):
        errs = sorted(abs(p["predicted"] / p["measured"] - 1) for p in ps)
        return f"median |predicted/measured - 1| = **{errs[len(errs) // 2]:.1%}**"

    yours = [p for p in pts if p["yours"]]
    measured = [p for p in pts if not p["series"] and not p["yours"]]
    tables = [p for p in pts if p["series"] and not p["yours"]]
    parts = [f"Raspberry stars: **your {len(yours)} run{'s' if len(yours) > 1 else ''}**; {median_error(yours)}."] \
        if yours else []
    parts += [f"{len(measured):,} measured runs; {median_error(measured)}. Their predictions are the ones stored with "
             f"each run (default hardware profile: the nominal network, which the runs on many nodes did not "
             f"reach)."] if measured else []
    if tables:
        parts.append(f"Diamonds: {len(tables)} runs from published tables (other frameworks and GPUs, nothing "
                     f"fitted to them); {median_error(tables)}.")
    # a source once, however many of its rows are drawn: "torchtitan-perf-2024-04 (… csv line 2)" and
    # "(… line 3)" cite one table
    cited = sorted({LINE_REF.sub(")", p["source"]).removesuffix(" ()") for p in pts})
    text = " ".join(parts) + " Sources: " + "; ".join(escape.md(s, 300) for s in cited[:8]) + \
        (f" and {len(cited) - 8} more" if len(cited) > 8 else "")
    text += "".join(f"\n\n> skipped {p}" for p in notes)      # ours
    text += "".join(f"\n\n> skipped {escape.md(p, 300)}" for p in problems[:5])       # the files' (a visitor's upload)
    return measured_vs_predicted(pts, v["metric"]), text


def build(wid: str, params: dict) -> Widget:
    with gr.Group():
        controls, defaults = controls_row(params, CONTROLS)
        plot = gr.Plot(label="measured vs predicted")
        text = gr.Markdown(latex_delimiters=[])
    return wire(Widget(wid, controls, defaults), compute, [plot, text])
