"""Whole runs against their published GPU-hours (validation/budget.py): the budget, with the default
profiles and goodput and nothing fitted, against Llama 3.1, DeepSeek-V3, LLaMA, Llama 2, BLOOM and
Falcon; and README's table against the script's."""
import re
from pathlib import Path

import pytest

from validation.budget import check, main, summary, table

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def rows():
    return {r.run["run"]: r for r in check()}


def test_every_run_is_planned_at_its_published_size(rows):
    assert len(rows) >= 10
    for r in rows.values():
        assert r.predicted and all(p > 0 for p in r.predicted), r.run["run"]
        assert all(o["error"] is None for o in r.options), r.run["run"]


def test_runs_whose_throughput_is_the_total_are_predicted_within_15_percent(rows):
    """Llama 3.1 405B and DeepSeek-V3 (layout, tokens and cluster published): at their published
    layout within 15% (405B, whose recompute is not published: within -25%); the planner's own layout may beat the run's (405B: CP 2 and one layer per
    virtual stage come out 35% faster than Meta's layout, 21% fewer GPU-hours) but not by more
    than 25% of the GPU-hours, nor fall behind it by more than 15%. LLaMA 65B (no layout published; its total is its published throughput):
    the planner's layout by the same rule (-14% today; with its bound on a pipeline counting
    interleaving the planner finds faster layouts, -13% to -16% as it improves, and Meta's is not
    published). README explains the others, whose totals count more."""
    for run in ("Llama 3.1 405B", "DeepSeek-V3 (pre-training)"):
        assert -0.25 <= rows[run].error <= 0.15, (run, rows[run].error)
    assert abs(rows["DeepSeek-V3 (pre-training)"].layout_error) <= 0.15
    # Meta publishes no recompute: at its layout the model fits without any only at ZeRO-2, whose
    # reduce-scatter every micro-batch costs more than full recompute at ZeRO-0 (+2%); when ZeRO-2
    # reduced once a step it fitted for free, 21% faster than the GPU-hours imply
    assert -0.25 <= rows["Llama 3.1 405B"].layout_error <= 0.15, rows["Llama 3.1 405B"].layout_error
    assert -0.25 <= rows["LLaMA 65B"].error <= 0.15, rows["LLaMA 65B"].error
    assert rows["LLaMA 65B"].implied_tps == pytest.approx(380, rel=0.01)      # 1.4T tokens / 1,022,362 GPU-hours
    # BLOOM's throughput at its published layout is its measured ~150 TFLOP/s per GPU (6 x 176B x tokens/s);
    # its total counts 3.5 months of 384 GPUs, restarts and all
    bloom = rows["BLOOM 176B"].at_layout
    assert 6 * 176e9 * bloom["tokens_per_s_per_gpu"] / 1e12 == pytest.approx(150, rel=0.15)


def test_readme_quotes_the_scripts_table(rows):
    """Each row of README's table, its predicted GPU-hours and error, within 3% and 3 points of what
    the script prints now (other parts of the model move these figures a little)."""
    readme = (ROOT / "README.md").read_text()
    for line in table(list(rows.values())).splitlines()[2:]:
        name = line.split(" | ")[0][2:]
        quoted = next((x for x in readme.splitlines() if x.startswith(f"| {name} |")), None)
        assert quoted, f"README lacks the row of {name}"
        cells, now = quoted.split(" | "), line.split(" | ")
        for col, close in ((7, lambda a, b: abs(a - b) <= 0.03 * a),          # GPU-hours predicted: 3%
                           (9, lambda a, b: abs(a - b) <= 3)):                 # error: 3 points
            ours = [float(x) for x in re.findall(r"[-+]?\d+\.?\d*", now[col])]
            theirs = [float(x) for x in re.findall(r"[-+]?\d+\.?\d*", cells[col])]
            assert len(ours) == len(theirs) and all(map(close, ours, theirs)), (name, cells[col], now[col])
    assert summary(list(rows.values())).split(":")[0] in readme


def test_script_prints_the_table(rows, capsys):
    main()                            # the plans are cached by the fixture's run
    out = capsys.readouterr().out
    assert "| Llama 3.1 405B |" in out and "Sources:" in out and "Runs with their cluster size published" in out
