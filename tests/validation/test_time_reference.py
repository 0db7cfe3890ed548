"""The time model against the measured nanotron runs (validation/time.py).

What these assert is what the model reaches today, as guards against regressions. The time-model
issue's throughput targets, median <= 15% and p90 <= 35% over all scored runs, are met (7.7% and
34.7% today), and picking (>= 85% of the best); the degraded-fabric jobs alone miss the p90; see
the README's time-model section.
"""
import json
import statistics
import subprocess
import sys
from collections import defaultdict

from benchmarks.results import BUNDLED

from validation.time import check


def test_bus_bandwidth_within_25_percent_with_one_fitted_knob():
    c = check()
    assert len(c.busbw) == 21
    for op, nodes, measured, predicted, fitted in c.busbw:
        assert abs(predicted / measured - 1) <= 0.25, (op, nodes, measured, predicted)
    # all-gather and reduce-scatter are predicted, not fitted
    assert sum(not fitted for *_, fitted in c.busbw) == 14
    # one node: no network in question; compute and the host's issue time (the time-model
    # issue's 15% / 35% hold here)
    runs, median, p90 = c.one_node
    assert runs >= 60 and median <= 0.15 and p90 <= 0.35
    assert c.cells >= 25 and c.pick_ratio >= 0.85     # the picking target


def test_pipeline_runs_before_nanotrons_fix_are_reported_apart():
    """The data's README: compare PP runs within one value of after_pp_fix. The runs before the
    fix ran more than twice as slow as the model predicts; the scored runs meet the median (15%)
    and p90 (35%) targets."""
    c = check()
    runs, signed = c.before_fix
    assert runs >= 400 and signed > 1.0
    assert c.runs >= 1200 and c.median_error <= 0.15 and c.p90_error <= 0.35


def test_nanotron_host_floors_hold_on_the_models_they_were_not_fitted_to():
    """frameworks.host_scale's two factors were fitted on the 1.34B and 3.57B runs; on the larger
    models' runs the median error stays within 20% (19.7% and 6.9% today; the cross-node TP runs
    without a pipeline sit mostly on the degraded fabric, and their fitted runs measure 17.3%).
    Where pipeline and TP both cross nodes the two multiply with no number fitted, in the form
    those runs chose (TP ranks per node to the power): 7.6% and 6.3% today, held to 10%."""
    c = check()
    for (kind, part), (runs, median, _, signed) in c.host_fit.items():
        assert runs >= 40, (kind, part)
        assert median <= (0.10 if kind == "pipeline across nodes, TP across nodes" else 0.20), (kind, part, median)
        assert abs(signed) <= 0.2, (kind, part, signed)


def test_layouts_whose_groups_stay_inside_a_node_meet_the_targets():
    """Without a pipeline and with TP inside a node, the issue's 15% / 35% hold; the layouts whose
    TP or pipeline crosses nodes with TP are where the model stays optimistic (README)."""
    c = check()
    runs, median, p90, _ = c.by_layout["no pipeline, TP inside a node"]
    assert runs >= 250 and median <= 0.15 and p90 <= 0.35
    runs, median, p90, _ = c.by_layout["pipeline inside one node"]
    assert runs >= 30 and median <= 0.15 and p90 <= 0.35
    assert sum(v[0] for v in c.by_layout.values()) == c.runs


def test_on_a_healthy_fabric_the_throughput_targets_hold():
    """Split by the cross-node bandwidth per GPU that each job's own bus-bandwidth measurements
    imply: multi-node jobs with half the NIC or more meet the issue's 15% / 35%; the misses sit in
    the jobs that measured a degraded fabric (README, time-model section)."""
    c = check()
    assert sum(v[0] for v in c.by_fabric.values()) == c.runs
    runs, median, p90, signed = c.by_fabric["multi-node, 25 GB/s or more"]
    assert runs >= 500 and median <= 0.15 and p90 <= 0.35 and abs(signed) <= 0.05
    runs, median, p90, _ = c.by_fabric["multi-node, under 10 GB/s"]
    assert runs >= 300 and p90 > 0.35


def test_script_prints_the_tables():
    out = subprocess.run([sys.executable, "-m", "validation.time"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and "Bus bandwidth" in out.stdout and "Picking" in out.stdout
    assert "By the fabric each job measured" in out.stdout


def test_the_bundled_predictions_are_what_the_benchmarks_chapter_says():
    """Chapter 12: the stored predictions are within about 15% (median) from 1 to 32 nodes and
    about twice too fast at 64 (scored runs: PP runs after nanotron's fix)."""
    errors = defaultdict(list)
    with open(BUNDLED / "nanotron_h100.jsonl") as fh:
        for line in fh:
            row = json.loads(line)
            measured = (row.get("metrics") or {}).get("tokens_per_s_per_gpu")
            predicted = ((row.get("prediction") or {}).get("step") or {}).get("tokens_per_s_per_gpu")
            config = row["config"]
            if not (measured and predicted) or (config["scenario"]["parallel"]["pp"] > 1 and not config["after_pp_fix"]):
                continue
            errors[config["scenario"]["hardware"]["nodes"] <= 32].append(predicted / measured - 1)
    assert len(errors[True]) > 1000 and statistics.median(map(abs, errors[True])) <= 0.16
    assert 1.5 <= 1 + statistics.median(errors[False]) <= 2.5


def test_the_noise_floor_is_what_the_docs_say():
    """Twin runs (only ZeRO 0 vs 1 apart) agree within a few percent on up to 4 nodes and
    scatter from 32 nodes on: at 64 nodes a third of the pairs are over 2x apart, which no model
    of the layout alone can follow (README, time-model section)."""
    twins = check().twins
    assert all(twins[n][1] <= 0.03 for n in (1, 2, 4))
    pairs, median, _, over = twins[64]
    assert pairs >= 20 and median >= 0.15 and over >= pairs / 4
