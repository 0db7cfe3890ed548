"""The bundled results load cleanly and are what the converter makes of the cited source."""
from benchmarks import results
from validation import bundle


def test_bundled_nanotron_results_are_the_converted_source():
    loaded = results.load(results.BUNDLED)
    assert loaded.problems == []
    bundled = [r for r in loaded.rows if r["config"].get("framework") == "nanotron"]
    fresh = bundle.rows()
    assert len(bundled) == len(fresh) > 3000
    for a, b in zip(bundled, fresh):
        assert (a["status"], a["config"], a["metrics"], a["source"]) == (b["status"], b["config"], b["metrics"], b["source"])
    ok = [r for r in bundled if r["status"] == "ok"]
    assert all(r["metrics"]["tokens_per_s_per_gpu"] > 0 for r in ok)
    assert all("step" in r["prediction"] or "error" in r["prediction"] for r in bundled)
    assert "Ultra-Scale Playbook" in bundled[0]["source"]


def test_bundled_published_runs_are_the_converted_tables_with_their_predictions():
    from validation import published
    loaded = results.load(results.BUNDLED / "published.jsonl")
    assert loaded.problems == []
    fresh = bundle.published_rows()
    assert len(loaded.rows) == len(fresh) == len(published.load_runs()) >= 20
    for a, b, check in zip(loaded.rows, fresh, published.check()):
        assert (a["config"], a["metrics"], a["source"]) == (b["config"], b["metrics"], b["source"])
        assert a["metrics"]["tokens_per_s_per_gpu"] == check.run.tokens_per_s_per_gpu
        if check.predicted is None:                  # not expressible: the reason travels with the row
            assert a["prediction"]["error"] == check.reason
        else:                                        # the bundled prediction is validation.published's
            assert a["prediction"]["step"]["tokens_per_s_per_gpu"] == check.predicted


def test_bundled_runs_of_other_stacks_are_validation_stacks_with_its_predictions():
    """published_more.jsonl: every run validation.stacks reads with a measured throughput, its
    prediction the one validation.stacks scores (or the reason it cannot be expressed), drawn by
    the explorer in its family's series."""
    from validation import stacks
    loaded = results.load(results.BUNDLED / "published_more.jsonl")
    assert loaded.problems == []
    fresh = bundle.stacks_rows()
    scored = [stacks.score(r) for r in stacks.load()[0] if r.measured]
    assert len(loaded.rows) == len(fresh) == len(scored) >= 300
    for a, b, s in zip(loaded.rows, fresh, scored):
        assert (a["config"], a["metrics"], a["source"]) == (b["config"], b["metrics"], b["source"])
        assert a["config"]["line"] == s.run.line and a["metrics"]["tokens_per_s_per_gpu"] == s.run.measured
        if s.predicted is None:
            assert a["prediction"]["error"]
        else:
            assert a["prediction"]["step"]["tokens_per_s_per_gpu"] == s.predicted
    assert len({r["config"]["release"] for r in loaded.rows}) <= 8        # a legend one can read
