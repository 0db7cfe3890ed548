"""The CPU smoke run (2 and 4 gloo processes): every strategy runs, every train row carries a
prediction, and every strategy's losses equal the one-process run's (loss equivalence).

Tolerance: 2e-4 absolute on each step's mean loss (fp32; the strategies only reorder sums:
gradient all-reduce, sharded optimizer updates, micro-batch accumulation, TP partial sums).
A gradient scaled wrongly by even 10% (a missed average over data-parallel ranks or micro-
batches) moves the loss of step 2 by about 1e-2 here, fifty times the tolerance.
"""
import time

import pytest
import torch

from benchmarks import results, smoke
from benchmarks.config import RunSpec
from benchmarks.host import Grid
from benchmarks.train import measure

pytestmark = pytest.mark.slow
TOL = 2e-4


@pytest.fixture(scope="module")
def smoke_rows(tmp_path_factory):
    out = tmp_path_factory.mktemp("smoke") / "smoke.jsonl"
    t0 = time.perf_counter()
    code = smoke.smoke("cpu", str(out))
    return code, time.perf_counter() - t0, results.load(out)


def test_smoke_passes_fast_and_covers_every_strategy(smoke_rows):
    code, seconds, loaded = smoke_rows
    assert code == 0 and loaded.problems == [] and seconds < 180
    train = {r["config"]["name"]: r for r in loaded.rows if r["suite"] == "train"}
    assert set(train) == set(smoke.TRAIN) | set(smoke.TRAIN_4)
    schedules = {r["config"]["schedule"] for r in train.values() if r["config"]["pp"] > 1}
    assert len(schedules) >= 3
    assert all("step" in r["prediction"] and "memory" in r["prediction"] for r in train.values())
    assert {r["metrics"]["op"] for r in loaded.rows if r["suite"] == "collectives"} == {
        "all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "p2p"}
    assert any(r["suite"] == "gemm" for r in loaded.rows)


def _reference(config: dict) -> list[float]:
    one = {k: v for k, v in config.items() if k not in ("tp", "pp", "zero", "schedule", "vpp", "split", "name",
                                                       "recompute_ranks", "scenario", "device", "cp", "ep")}
    metrics, _ = measure(RunSpec(**one, device="cpu"), Grid(0, 1, 0, 1), torch.device("cpu"))
    return metrics["losses"]


@pytest.mark.parametrize("name", list(smoke.TRAIN) + list(smoke.TRAIN_4))
def test_loss_matches_one_process(smoke_rows, name):
    row = next(r for r in smoke_rows[2].rows if r["config"].get("name") == name)
    losses = row["metrics"]["losses"]
    ref = _reference(row["config"])
    assert len(losses) == len(ref) == 3 and ref[-1] < ref[0] - 0.02       # the loss does fall
    assert max(abs(a - b) for a, b in zip(losses, ref)) < TOL, (losses, ref)
