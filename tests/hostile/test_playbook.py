"""Hostile input against the app's widgets and URL state, in process: any value sent to any
control (the API takes what a page would never offer), any link, any pasted config.json. Each
ends in a plot or a clear message within a second; no path a visitor types is opened; visitor
text reaches the page only as text."""
import builtins
import io
import json
import os
import time

import gradio as gr
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from playbook import escape, ui
from playbook.url import MAX_VALUE, values_from_query
from playbook.widgets import NOT_IN_LINK, control_problem

SECOND = 1.0
PLAN_SECONDS = 5.0
EVIL_IMG = "<img src=https://example.invalid/pixel.png onerror=alert(1)>"
HOSTILE = [1e308, -1.0, float("nan"), float("inf"), 10**30, 2**63, 0, -1, 0.5, True, None, "x", "", "1e999",
           "/dev/zero", "../../etc/passwd", EVIL_IMG, [], {}, [1, 2], "a" * 300_000,
           10**400, -10**400, "a\x00b", "\ud800"]      # too large for a float; a NUL; a lone surrogate


@pytest.fixture(scope="module")
def widgets():
    return ui.build(gr.Blocks())


def defaults_of(w) -> list:
    return [w.defaults[k] for k in w.controls]


def call(w, values, bound=SECOND) -> tuple:
    t0 = time.perf_counter()
    out = w.handler(*values)
    seconds = time.perf_counter() - t0
    assert seconds < bound, (w.wid, [str(v)[:40] for v in values], seconds)
    return out


def test_any_value_in_any_control_is_answered_with_a_message_within_a_second(widgets):
    for w in widgets:
        keys = list(w.controls)
        w.handler(*defaults_of(w))      # a budget's first answer is planner searches (seconds), then cached
        for i, key in enumerate(keys):
            for bad in HOSTILE:
                values = defaults_of(w)
                values[i] = bad
                refused = control_problem(w.controls[key], bad)
                # a refused value is answered within a second; one the control takes (True in a
                # checkbox) is a new question, and a planner's first answer to it is a search
                # (seconds, README), cached after
                out = call(w, values, SECOND if refused else PLAN_SECONDS)
                note = str(out[-1])
                assert "Something went wrong" not in note, (w.wid, key, str(bad)[:40], note[:300])
                if refused:
                    assert out[0] is None and "Cannot evaluate" in note, (w.wid, key, str(bad)[:40])


def test_step_widgets_refuse_a_dualpipe_without_enough_micro_batches(widgets):
    """DualPipe needs m >= 2p micro-batches; the step widgets said so only after the simulator
    had failed on it (an IndexError)."""
    for w in widgets:
        if w.wid.startswith("step_") and "schedule" in w.controls and "gbs" in w.controls:
            values = defaults_of(w)
            keys = list(w.controls)
            values[keys.index("schedule")], values[keys.index("gbs")] = "dualpipe", 2
            note = str(call(w, values)[-1])
            assert "Something went wrong" not in note and "dualpipe needs microbatches" in note, (w.wid, note[:300])


def test_a_path_typed_into_any_box_is_never_opened(widgets, monkeypatch):
    opened = []
    real_open, real_os_open = builtins.open, os.open
    monkeypatch.setattr(builtins, "open", lambda f, *a, **k: (opened.append(str(f)), real_open(f, *a, **k))[1])
    monkeypatch.setattr(io, "open", builtins.open)
    monkeypatch.setattr(os, "open", lambda f, *a, **k: (opened.append(str(f)), real_os_open(f, *a, **k))[1])
    paths = ["/dev/zero", "/etc/passwd", "../../../../etc/shadow", "~/.ssh/id_rsa", "file:///etc/passwd"]
    for w in widgets:
        for key, comp in w.controls.items():
            if isinstance(comp, gr.Textbox):
                for path in paths:
                    values = defaults_of(w)
                    values[list(w.controls).index(key)] = path
                    call(w, values)
    assert not [f for f in opened if any(p.strip("./~") in f for p in paths)], opened


def test_injected_html_reaches_the_page_only_as_text(widgets):
    config = {"model_type": "llama", "_name_or_path": EVIL_IMG + "[link](https://example.invalid) *bold*",
              "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "intermediate_size": 128,
              "vocab_size": 1000}
    bad_type = {"model_type": EVIL_IMG}
    checked = 0
    for w in widgets:
        if "config" not in w.controls:
            continue
        for cfg in (config, bad_type):
            values = defaults_of(w)
            values[list(w.controls).index("config")] = json.dumps(cfg)
            out = call(w, values)
            page = out[0].to_json() if out[0] is not None else ""
            for text in (str(out[-1]), page):                # no tag survives, in Markdown or in plotly text
                assert "<img" not in text and "<a " not in text, (w.wid, text[:400])
            assert "](https://" not in str(out[-1]), (w.wid, str(out[-1])[:400])   # no Markdown link in the note
            if cfg is config:                                # the name is shown, as text
                assert "&lt;img" in str(out[-1]) + page, (w.wid, str(out[-1])[:400])
            checked += 1
    assert checked >= 4


def test_escape_leaves_no_markup():
    assert escape.md(EVIL_IMG).startswith("&lt;img") and "<" not in escape.md(EVIL_IMG)
    assert escape.md("dp*tp*pp*cp = 8") == "dp\\*tp\\*pp\\*cp = 8"         # no emphasis eats the stars
    assert "](" not in escape.md("[x](javascript:alert(1))")
    assert "://" not in escape.md("see https://example.invalid")
    assert escape.plot("<a href='x'>t</a>") == "&lt;a href='x'&gt;t&lt;/a&gt;"
    assert len(escape.md("x" * 10_000)) <= escape.LIMIT + 2
    assert "$$" not in escape.md("$$LOSS^{100}_{PAID}$$")         # no display math from a shared link


def test_widget_text_renders_no_math():
    """The widgets' answers quote what a visitor sent: their Markdown turns no delimiter into KaTeX
    (Gradio's default renders $$...$$), whatever md() let through."""
    demo = gr.Blocks()
    ui.build(demo)
    outputs = [b for b in demo.blocks.values() if isinstance(b, gr.Markdown) and b.value in ("", None)]
    assert len(outputs) >= 10
    assert all(b.latex_delimiters == [] for b in outputs), [b.latex_delimiters for b in outputs]


@pytest.mark.parametrize("wid, changes, says", [
    ("memory_1_1", {"config": json.dumps({"model_type": "llama", "num_hidden_layers": 1e9, "hidden_size": 4096,
                                          "num_attention_heads": 32, "intermediate_size": 14336,
                                          "vocab_size": 128256})},
     "num\\_hidden\\_layers must be a whole number from 1 to 1,024"),
    ("step_14_1", {"config": json.dumps({"model_type": "llama", "num_hidden_layers": 10**9, "hidden_size": 4096,
                                         "num_attention_heads": 32, "intermediate_size": 14336,
                                         "vocab_size": 128256})},
     "num\\_hidden\\_layers must be from 1 to 1,024"),
    ("planner_11_1", {"nodes": 10**9}, "must be a whole number from 1 to 131,072"),
    ("planner_11_1", {"gbs": 10**6 * 1000}, "global batch"),
    ("memory_1_1", {"config": "x" * 300_000}, "at most 262,144 characters"),
])
def test_huge_sizes_get_a_clear_message_within_a_second(widgets, wid, changes, says):
    w = next(w for w in widgets if w.wid == wid)
    values = [changes.get(k, w.defaults[k]) for k in w.controls]
    out = call(w, values)
    assert out[0] is None and says in out[-1], out[-1][:500]


def test_sliders_offer_only_values_that_can_be_evaluated(widgets):
    """Chapter 1's dp and chapter 3's nodes: every value the control offers draws a plot (the
    cluster follows dp, or dp follows the cluster, and a batch not shown follows both)."""
    for wid, key in (("memory_1_1", "dp"), ("memory_3_3", "nodes"), ("memory_6_3", "pp"), ("step_11_2", "nodes")):
        w = next(w for w in widgets if w.wid == wid)
        comp = w.controls[key]
        top = 64 if isinstance(comp, gr.Number) else comp.maximum
        for value in [1, 2, 3, 5, 12, 16, 24, int(top)]:
            values = [value if k == key else w.defaults[k] for k in w.controls]
            out = call(w, values)
            note = str(out[-1])
            # a batch the widget shows may not divide over the new dp: the message names the nearest one
            shown_batch = "nearest valid gbs" in note and "gbs" in w.controls
            assert out[0] is not None or "out of memory" in note or "does not fit" in note or \
                "must divide" in note or shown_batch, (wid, key, value, note[:300])
            assert "GPUs but the cluster has" not in note, (wid, key, value)


# -------------------------------------------------------------------------------- the URL state
def test_bad_link_values_are_skipped_one_by_one(widgets):
    slugs = ["pipeline-parallel", "benchmarks"]
    query = {"chapter": "pipeline-parallel", "schedule_6_1.m": "16", "schedule_6_1.p": "1e999",
             "schedule_6_1.v": "inf", "schedule_6_1.b": "nan", "schedule_6_1.schedule": EVIL_IMG,
             "memory_1_1.config": '{"model_type": "llama"}', "memory_1_1.seq": "9" * 5000,
             "explorer_13_1.local": "/dev/zero", "memory_1_1.dp": "16"}
    chapter, settings = values_from_query(query, widgets, slugs)
    assert chapter == "pipeline-parallel"
    assert settings == {("schedule_6_1", "m"): 16, ("memory_1_1", "dp"): 16}


@settings(max_examples=200, deadline=int(SECOND * 1000), suppress_health_check=[HealthCheck.too_slow,
                                                                                 HealthCheck.function_scoped_fixture])
@given(st.dictionaries(st.text(max_size=30) | st.sampled_from(["chapter", "memory_1_1.dp", "schedule_6_1.m",
                                                              "planner_11_1.nodes", "memory_1_1.sp"]),
                       st.text(max_size=60) | st.sampled_from(["1e999", "-0", "nan", "08", "0x10", " 3 ", "true"]),
                       max_size=8))
def test_any_query_gives_only_values_the_controls_offer(widgets, query):
    _, settings = values_from_query(query, widgets, ["overview"])
    by_id = {w.wid: w for w in widgets}
    for (wid, key), value in settings.items():
        assert key not in NOT_IN_LINK and not control_problem(by_id[wid].controls[key], value)
        assert len(query[f"{wid}.{key}"]) <= MAX_VALUE


# -------------------------------------------------------------------------------- result files
HOSTILE_ROWS = [b"[" * 5000 + b"]" * 5000, b'{"schema": 1, "n": ' + b"9" * 5000 + b"}", b'{"schema": NaN}',
                b"\xff\xfe not utf-8", b"x" * (2 << 20),
                json.dumps({"schema": 1, "suite": "train", "status": "ok", "config": {"scenario": "oops"},
                            "metrics": {"tokens_per_s_per_gpu": "fast"}, "prediction": {"step": []}}).encode(),
                json.dumps({"schema": 1, "suite": "train", "status": "ok",
                            "config": {"scenario": {"model": {"name": EVIL_IMG}, "hardware": {"nodes": "x"},
                                                    "parallel": {"pp": [1]}}, "release": EVIL_IMG},
                            "metrics": {"tokens_per_s_per_gpu": 1e3}, "source": EVIL_IMG,
                            "prediction": {"step": {"tokens_per_s_per_gpu": 2e3}}}).encode()]


def test_an_uploaded_results_file_of_hostile_rows_is_drawn_or_skipped_row_by_row(widgets):
    """Every bad line is skipped with a note, the row of odd fields is drawn (its text escaped),
    and the bundled rows still show; a path outside the upload folder is refused unread."""
    import tempfile

    folder = gr.utils.get_upload_folder()
    os.makedirs(folder, exist_ok=True)
    with tempfile.NamedTemporaryFile("wb", suffix=".jsonl", dir=folder, delete=False) as fh:
        fh.write(b"\n".join(HOSTILE_ROWS) + b"\n")
    try:
        w = next(w for w in widgets if w.wid.startswith("explorer"))
        values = {**w.defaults, "upload": fh.name}
        out = call(w, [values[k] for k in w.controls])
        page, note = out[0].to_json(), str(out[-1])
        assert "<img" not in page + note and "skipped" in note and "measured runs" in note
        assert "&lt;img" in page                                   # the odd row is drawn, as text
        values["upload"] = "/etc/passwd"
        out = call(w, [values[k] for k in w.controls])
        assert out[0] is None and "upload the results file again" in out[-1]
    finally:
        os.unlink(fh.name)


@settings(max_examples=200, deadline=int(SECOND * 1000))
@given(st.lists(st.binary(max_size=200) | st.sampled_from(HOSTILE_ROWS[:4]), max_size=20))
def test_any_bytes_load_as_rows_or_problems(lines):
    from benchmarks import results
    got = results.load_bytes(b"\n".join(lines), "upload")
    assert all(results.row_problem(r) == "" for r in got.rows)
    assert len(got.problems) <= results.MAX_PROBLEMS + 1


def test_every_control_passes_a_value_it_does_not_offer_to_the_widget_even_rebuilt(widgets):
    """Gradio's own preprocess answered a string in a slider with no message, named no control and
    took true for 1; the controls pass what they do not offer to the widget's check, which names
    them. Also a control Gradio rebuilt from its class (an event updating it, as a link does)."""
    kinds = (gr.Dropdown, gr.Radio, gr.Checkbox, gr.Slider, gr.Number)
    seen = set()
    for w in widgets:
        for key, comp in w.controls.items():
            if not isinstance(comp, kinds):
                continue
            args = {k: v for k, v in comp.constructor_args.items() if k != "render"}
            for c in (comp, type(comp)(**args, render=False)):
                for bad in ("Z" * 100, True if not isinstance(c, gr.Checkbox) else "yes", [1]):
                    assert c.preprocess(bad) is bad, (w.wid, key, bad)
                assert c.preprocess(w.defaults[key]) == w.defaults[key], (w.wid, key)
            seen.add(type(comp))
    assert seen == set(kinds)
    w = next(w for w in widgets if w.wid.startswith("schedule_"))
    message = call(w, [("8" if k == "p" else w.defaults[k]) for k in w.controls])[-1]
    assert "p \\(pipeline ranks\\) must be a whole number" in message, message
