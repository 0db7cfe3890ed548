"""The benchmark explorer: measured runs by node count, published tables as their own series."""
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


def test_a_model_filter_reports_only_its_own_skipped_runs():
    _, text = explorer.compute({"metric": "tokens/s/GPU", "model": "qwen3", "nodes": "all", "upload": None})
    assert "before nanotron's multi-node PP fix" not in text
    _, text = explorer.compute({"metric": "tokens/s/GPU", "model": "nanotron", "nodes": "all", "upload": None})
    assert "before nanotron's multi-node PP fix" in text and "measured runs" in text
