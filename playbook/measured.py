"""Measured runs against the predictions stored with them: the join chapter 13's explorer draws
and its prose quotes (benchmarks/results/ bundled, the server's `PLAYBOOK_RESULTS`, an upload).
No Gradio here: the chapters' numbers are rendered before Gradio is imported.

Throughput compares tokens/s/GPU; memory compares the measured peak (reserved for nanotron,
allocated for our harness) with the predicted peak, and nanotron's "allocated between steps"
with the predicted resident state (weights, gradients, optimizer state, buffers)."""
from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

from benchmarks import results
from playbook import escape

MAX_UPLOAD_BYTES = 32 * 2**20    # about 10,000 result rows
MAX_UPLOAD_ROWS = 20_000          # lines read of one upload (tiny rows could be millions: seconds and GBs)

METRICS = {"tokens/s/GPU": ("tokens_per_s_per_gpu", "step", "tokens_per_s_per_gpu"),
           "memory between steps (GiB)": ("allocated_between_steps_gib", "memory", None),
           "peak memory (GiB)": ("peak_allocated_gib", "memory", "total_gib")}


def sources() -> tuple:
    """((path, modification stamp) ...) of the server's result files: a change of any file changes it."""
    paths = [str(results.BUNDLED)] + ([os.environ["PLAYBOOK_RESULTS"]] if os.environ.get("PLAYBOOK_RESULTS") else [])
    out = []
    for p in paths:
        path = Path(p).expanduser()
        files = sorted(path.glob("*.jsonl")) if path.is_dir() else [path]
        out.append((p, tuple((str(f), f.stat().st_mtime) for f in files if f.is_file())))
    return tuple(out)


def load_rows(sources: tuple, upload: tuple = ()) -> tuple[list, list]:
    """The server's rows and an upload's, each cached on its own: the server's once per state of
    its files, an upload's (at most MAX_UPLOAD_ROWS rows) for the last few uploads only."""
    rows, problems = _server_rows(sources)
    if upload:
        more, said = _upload_rows(upload)
        return rows + more, problems + said
    return rows, problems


@lru_cache(maxsize=2)
def _server_rows(sources: tuple) -> tuple[list, list]:
    rows, problems = [], []
    for p, files in sources:
        if not files and not Path(p).expanduser().is_dir():
            problems.append(f"{p}: no such file or directory")
        for f, _ in files:
            got = results.load(f)
            rows += got.rows
            problems += got.problems
    return rows, problems


@lru_cache(maxsize=2)
def _upload_rows(upload: tuple) -> tuple[list, list]:
    with open(upload[0], "rb") as fh:
        got = results.load_bytes(fh.read(MAX_UPLOAD_BYTES + 1), "your upload", max_rows=MAX_UPLOAD_ROWS)
    problems = got.problems if got.rows or got.problems else ["your upload: no result rows in it (a results file "
                                                             "holds one JSON object a line, as the harness writes)"]
    # kept without the metrics' per-step lists (times, losses), which no plot draws: a megabyte of
    # them a row held 700 MB per upload
    return [dict(r, metrics={k: v for k, v in r.get("metrics", {}).items() if not isinstance(v, (list, dict))},
                 source=r.get("source") or "your upload", _yours=True) for r in got.rows], problems


def _value(row, metric):
    measured_key, part, pred_key = METRICS[metric]
    m, pred = _obj(row.get("metrics")), _obj(_obj(row.get("prediction")).get(part))
    if metric.startswith("memory between"):
        got = m.get("allocated_between_steps_gib")
        grads = "grads_full_gib" if "grads_full_gib" in pred else "grads_gib"       # between steps: every gradient
        parts = [_number(pred.get(k)) or 0 for k in ("params_gib", grads, "optimizer_gib", "other_gib")]
        want = sum(parts) if pred else None
        return got, want
    if metric.startswith("peak"):
        got = m.get("peak_allocated_gib") or m.get("peak_reserved_gib")
        return got, pred.get(pred_key)
    return m.get(measured_key), pred.get(pred_key)


NUMBER_RANGE = (1e-12, 1e15)     # a metric outside it (0, 5e-324, 1e308, 10**400) is not drawn


def _number(x):
    """A positive metric a plot can draw: ints too large for a float, and values a log axis
    widened by 30% would turn into Infinity, are not."""
    lo, hi = NUMBER_RANGE
    return x if type(x) in (int, float) and lo < x < hi else None


def _obj(x) -> dict:
    return x if isinstance(x, dict) else {}


def match(sources: tuple, upload: tuple, metric: str, model: str, nodes_filter: str) -> tuple[list, list, list]:
    """The (measured, predicted) points of the rows that match the model and nodes filters. The
    filters are applied on each call to the points cached per state of the files (a filter string
    is a visitor's: caching on it let each new one keep another copy of an upload's points)."""
    pts, before, undrawn, problems = _points(sources, upload, metric)

    def kept(name: str, nodes: int) -> bool:
        return not (model and model.lower() not in name.lower() or nodes_filter != "all" and str(nodes) != nodes_filter)
    chosen = [p for p in pts if kept(p["model"], p["nodes"])]
    before_fix, not_drawn = sum(kept(*k) for k in before), sum(kept(*k) for k in undrawn)
    note = [f"{before_fix} pipeline-parallel runs made before nanotron's multi-node PP fix: they measured "
            "that bug (the data's README: compare PP runs within one value of after_pp_fix)"] if before_fix else []
    note += [f"{not_drawn} of your rows: their {metric} or its prediction is missing or not a positive number "
             f"from {NUMBER_RANGE[0]:g} to {NUMBER_RANGE[1]:g}"] if not_drawn else []
    return chosen, note, list(problems)


@lru_cache(maxsize=4)
def _points(sources: tuple, upload: tuple, metric: str) -> tuple[tuple, tuple, tuple, tuple]:
    """Every drawable point of the files for `metric`, with (model, nodes) of the rows skipped as
    measured before nanotron's PP fix and of the visitor's rows that cannot be drawn. A row's fields
    are read defensively: whatever a schema-valid row holds, it is drawn or skipped."""
    rows, problems = load_rows(sources, upload)
    pts, before_fix, undrawn = [], [], []
    for r in rows:
        if r["suite"] != "train" or r["status"] != "ok":
            continue
        sc = _obj(r["config"].get("scenario"))
        name = str(_obj(sc.get("model")).get("name", ""))[:100]
        nodes = _obj(sc.get("hardware")).get("nodes", 1)
        nodes = int(nodes) if _number(nodes) and float(nodes).is_integer() else 1
        pp = _obj(sc.get("parallel")).get("pp", 1)
        if metric == "tokens/s/GPU" and _obj(r["config"]).get("after_pp_fix") is False and _number(pp) and pp > 1:
            before_fix.append((name, nodes))          # nanotron's multi-node PP bug, not the model's error
            continue
        got, want = _value(r, metric)
        got, want = _number(got), _number(want)
        if got and want:
            release = _obj(r["config"]).get("release")
            pts.append({"measured": got, "predicted": want, "model": name, "nodes": nodes,
                        "label": escape.plot(_label(r, name), 300),
                        "source": str(r.get("source") or "your run")[:300],
                        "series": escape.plot(f"published: {str(release)[:80]}") if release else "",
                        "yours": r.get("_yours") is True})
        elif r.get("_yours") is True:
            undrawn.append((name, nodes))
    return tuple(pts), tuple(before_fix), tuple(undrawn), tuple(problems)


def _label(row: dict, name: str) -> str:
    """The hover text: the layout, and for a published table's row also its system and release."""
    c = row["config"]
    par = _obj(_obj(c.get("scenario")).get("parallel"))
    extra = "".join(f" {k}{par[k]}" for k in ("vpp", "cp", "ep") if (_number(par.get(k)) or 1) > 1)
    text = (f"{name} dp{par.get('dp')} tp{par.get('tp')} pp{par.get('pp')}{extra} mbs{par.get('mbs')} "
            f"zero{par.get('zero')}")
    if c.get("release"):
        text += f" {par.get('precision', '')}, {c.get('system', '')} x{row.get('host', {}).get('gpus', '?')} ({c['release']})"
    return text


