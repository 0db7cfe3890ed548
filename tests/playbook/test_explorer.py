"""The benchmark explorer: measured runs by node count, published tables as their own series."""
import pytest

from calculators.specs.errors import ConfigError
from playbook.widgets import explorer


def _traces(fig) -> dict:
    data = fig["data"] if isinstance(fig, dict) else fig.to_dict()["data"]
    return {t["name"]: t for t in data}


def test_published_runs_are_a_series_of_their_own_with_their_error():
    fig, text = explorer.compute({"metric": "tokens/s/GPU", "model": "llama3", "nodes": "all", "upload": None})
    traces = _traces(fig)
    published = [t for name, t in traces.items() if name.startswith("published: ")]
    assert published and all(t["marker"]["symbol"] == "diamond" for t in published)
    assert any("DGX-H100" in label for t in published for label in t["text"])
    assert "published tables" in text and "measured runs" not in text     # no nanotron model is a llama3


def test_each_source_is_cited_once_however_many_of_its_rows_are_drawn():
    _, text = explorer.compute({"metric": "peak memory (GiB)", "model": "llama3", "nodes": "all", "upload": None})
    cited = text.split(" Sources: ")[1].split("\n")[0].split(" and ")[0].split("; ")
    assert len(cited) == len(set(cited)) and not any(" line " in c for c in cited), cited
    assert len(cited) >= 3 and all("published" in c for c in cited), cited


def test_a_model_filter_reports_only_its_own_skipped_runs():
    _, text = explorer.compute({"metric": "tokens/s/GPU", "model": "qwen3", "nodes": "all", "upload": None})
    assert "before nanotron's multi-node PP fix" not in text
    _, text = explorer.compute({"metric": "tokens/s/GPU", "model": "nanotron", "nodes": "all", "upload": None})
    assert "before nanotron's multi-node PP fix" in text and "measured runs" in text


def _upload(tmp_name: str, data: bytes) -> str:
    import os

    import gradio as gr
    folder = gr.utils.get_upload_folder()
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, tmp_name)
    with open(path, "wb") as fh:
        fh.write(data)
    return path


def test_hostile_rows_in_an_upload_are_skipped_or_not_drawn_never_an_error():
    """Rows the loader accepts but the plot cannot use (no metrics or prediction, a metric too large
    for a float or beyond any real range) are not drawn; a huge upload of tiny rows stops at
    MAX_UPLOAD_ROWS and says so."""
    import json
    import os

    from playbook import measured
    ok = {"schema": 1, "suite": "train", "status": "ok",
          "config": {"scenario": {"model": {"name": "x"}, "hardware": {"nodes": 1}, "parallel": {}}}}
    rows = [{k: v for k, v in ok.items()},
            dict(ok, metrics={"tokens_per_s_per_gpu": 10**400}, prediction={"step": {"tokens_per_s_per_gpu": 1e308}}),
            dict(ok, metrics={"tokens_per_s_per_gpu": 5e-324}, prediction={"step": {"tokens_per_s_per_gpu": 1000}})]
    data = "\n".join(json.dumps(r) if i != 1 else json.dumps(r).replace("1e+308", "1e308") for i, r in enumerate(rows))
    path = _upload("hostile_rows.jsonl", data.encode())
    try:
        fig, text = explorer.compute({"metric": "tokens/s/GPU", "model": "", "nodes": "all", "upload": path})
        assert "Something went wrong" not in text and "Infinity" not in json.dumps(fig.to_dict() if hasattr(
            fig, "to_dict") else fig, default=str)
        assert "skipped 3 of your rows: their tokens/s/GPU or its prediction is missing" in text
    finally:
        os.remove(path)
    path = _upload("many_rows.jsonl", b"{}\n" * (measured.MAX_UPLOAD_ROWS + 10))
    try:
        _, said = measured._upload_rows((path, os.path.getsize(path), os.path.getmtime(path)))
        assert any(f"more than {measured.MAX_UPLOAD_ROWS:,} rows" in s for s in said)
    finally:
        os.remove(path)
    # an upload is held without the per-step lists no plot draws (a megabyte of them a row held 700 MB)
    steps = dict(ok, metrics={"tokens_per_s_per_gpu": 10.0, "step_times_s": [1.0] * 100_000})
    path = _upload("long_rows.jsonl", (json.dumps(steps) + "\n").encode() * 8)
    try:
        held, _ = measured._upload_rows((path, os.path.getsize(path), os.path.getmtime(path)))
        assert len(held) == 8 and all(r["metrics"] == {"tokens_per_s_per_gpu": 10.0} for r in held)
    finally:
        os.remove(path)


def test_a_visitors_runs_are_their_own_orange_stars_with_their_own_error():
    """An upload's rows are drawn as one trace of their own over the others, and the text gives
    their median error first, even when a row names a source or a published release."""
    import json
    import os

    from benchmarks.results import BUNDLED
    row = json.loads((BUNDLED / "nanotron_h100.jsonl").read_text().splitlines()[0])
    assert row["suite"] == "train" and row["status"] == "ok"
    row["config"]["release"] = "mine <b>v1</b>"
    path = _upload("my_runs.jsonl", json.dumps(row).encode())
    try:
        fig, text = explorer.compute({"metric": "tokens/s/GPU", "model": "", "nodes": "all", "upload": path})
    finally:
        os.remove(path)
    mine = [t for t in fig["data"] if t.get("name") == "your runs"]
    assert len(mine) == 1 and len(mine[0]["x"]) == 1 and mine[0]["marker"]["symbol"] == "star"
    assert fig["data"].index(mine[0]) == max(i for i, t in enumerate(fig["data"]) if t.get("type") == "scattergl")
    assert text.startswith("Raspberry stars: **your 1 run**; median |predicted/measured - 1| = ")


def test_new_filter_strings_on_an_upload_keep_no_new_copies_of_its_points():
    """A visitor's filter text is not a cache key: 40 model filters over one upload of 3,000 drawable
    rows hold about what one does (each had kept its own list of the points, 48 MB a filter on a
    28 MB upload). Hits are still counted right per filter."""
    import json
    import os
    import tracemalloc

    row = {"schema": 1, "suite": "train", "status": "ok", "metrics": {"tokens_per_s_per_gpu": 1000.0},
           "prediction": {"step": {"tokens_per_s_per_gpu": 1100.0}},
           "config": {"scenario": {"model": {"name": "m" * 100}, "hardware": {"nodes": 1}, "parallel": {"dp": 1}}}}
    path = _upload("many_filters.jsonl", "\n".join(json.dumps(row) for _ in range(3000)).encode())
    try:
        explorer.compute({"metric": "tokens/s/GPU", "model": "m", "nodes": "all", "upload": path})
        tracemalloc.start()
        base = tracemalloc.get_traced_memory()[0]
        for i in range(2, 42):
            _, text = explorer.compute({"metric": "tokens/s/GPU", "model": "m" * i, "nodes": "all", "upload": path})
            assert "3,000" in text or "3000" in text, text[:300]
        grown = tracemalloc.get_traced_memory()[0] - base
        tracemalloc.stop()
        assert grown < 5e6, grown
        with pytest.raises(ConfigError, match="no measured rows match"):     # 101 characters: a name holds 100
            explorer.compute({"metric": "tokens/s/GPU", "model": "m" * 101, "nodes": "all", "upload": path})
    finally:
        os.remove(path)
