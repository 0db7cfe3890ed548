"""The Ray backend on a local Ray started here (2 CPUs, no dashboard): configs of world 1 and 2
run as Ray Train runs of 1 and 2 gloo workers, and their rows equal what the local backend
(torchrun) writes for the same configs; a config that raises is an `error` row and the next
one still runs; a run that dies keeps the rows it finished and records the rest with its
status; a second launch runs nothing.

What may differ between the two backends' rows: `host.launcher` (torchrun or ray) and `time`;
and on CPU the measured peak the prediction divides by (host.cpu_tflops, measured in each
process), so the predictions are compared by evaluating both scenarios on the same peak.
"""
import copy
import os
import time

import pytest
import torch

from benchmarks import ray_train, results
from benchmarks.launch import Options, launch
from benchmarks.train import predict

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.slow
TOL = 2e-4                  # the smoke run's loss tolerance (test_smoke.py); here they agree exactly
BASE = {"model": "tiny", "precision": "fp32", "optimizer": "sgd", "lr": 1.0, "steps": 2, "warmup": 0,
        "gbs": 4, "seq": 32}
CONFIGS = [{**BASE, "world": 1},
           {"model": "no-such-model", "world": 2},               # raises (ConfigError): recorded as error
           {**BASE, "world": 2, "zero": 3}]                      # FSDP2 on 2 ranks, after the error


def _write(path, configs):
    path.write_text("".join(results.dumps(c) for c in configs))
    return str(path)


@pytest.fixture(scope="module")
def ray_cluster():
    # Ray Train's controller polls its workers every 2 s by default; 0.2 s ends each run sooner.
    old = os.environ.get("RAY_TRAIN_HEALTH_CHECK_INTERVAL_S")
    os.environ["RAY_TRAIN_HEALTH_CHECK_INTERVAL_S"] = "0.2"
    t0 = time.perf_counter()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    print(f"ray start: {time.perf_counter() - t0:.1f} s")
    yield
    ray.shutdown()
    if old is None:
        del os.environ["RAY_TRAIN_HEALTH_CHECK_INTERVAL_S"]
    else:
        os.environ["RAY_TRAIN_HEALTH_CHECK_INTERVAL_S"] = old


@pytest.fixture(scope="module")
def both(tmp_path_factory, ray_cluster):
    """The same configs launched locally and on Ray: {backend: (exit code, seconds, rows by key, out)}."""
    tmp = tmp_path_factory.mktemp("launch")
    path = _write(tmp / "configs.jsonl", CONFIGS)
    runs = {}
    for backend in ("local", "ray"):
        out = tmp / backend
        t0 = time.perf_counter()
        code = launch(path, Options(backend=backend, out=str(out), device="cpu"))
        seconds = time.perf_counter() - t0
        print(f"{backend} launch: {seconds:.1f} s")
        runs[backend] = code, seconds, {r["key"]: r for r in results.load(out).rows}, out
    return path, runs


def _on_peak(row, gpu):
    scenario = copy.deepcopy(row["config"]["scenario"])
    scenario["hardware"]["gpu"] = gpu
    return scenario


def test_ray_rows_equal_the_local_backends(both):
    _, runs = both
    (code_l, _, local, _), (code_r, seconds, ray_rows, _) = runs["local"], runs["ray"]
    assert code_l == code_r == 1 and set(local) == set(ray_rows) and len(local) == 3
    assert seconds < 120                                   # two Ray Train runs; about 15 s on 2 cores
    for key, mine in local.items():
        theirs = ray_rows[key]
        assert (theirs["status"], theirs.get("error")) == (mine["status"], mine.get("error"))
        assert {k: v for k, v in theirs["host"].items() if k != "launcher"} == \
            {k: v for k, v in mine["host"].items() if k != "launcher"}
        assert (mine["host"]["launcher"], theirs["host"]["launcher"]) == ("torchrun", "ray")
        if mine["status"] != "ok":
            continue
        ours, ref = theirs["metrics"]["losses"], mine["metrics"]["losses"]
        assert len(ours) == 2 and max(abs(a - b) for a, b in zip(ours, ref)) < TOL
        gpu = mine["config"]["scenario"]["hardware"]["gpu"]
        assert _on_peak(theirs, gpu) == mine["config"]["scenario"]
        assert predict(_on_peak(theirs, gpu)) == mine["prediction"]
        assert theirs["prediction"]["memory"] == mine["prediction"]["memory"]


def test_a_config_that_raises_is_an_error_and_the_next_still_runs(both):
    _, runs = both
    out = runs["ray"][3]
    rows = results.load(out / "world2-nodes1.jsonl").rows
    assert [r["status"] for r in rows] == ["error", "ok"]
    assert "unknown model preset 'no-such-model'" in rows[0]["error"]
    assert rows[1]["host"]["gpus"] == 2 and rows[1]["config"]["zero"] == 3


def test_a_second_launch_skips_both_groups(both, capsys):
    path, runs = both
    out = runs["ray"][3]
    before = len(results.load(out).rows)
    capsys.readouterr()
    t0 = time.perf_counter()
    assert launch(path, Options(backend="ray", out=str(out), device="cpu")) == 0
    err = capsys.readouterr().err
    assert time.perf_counter() - t0 < 5 and len(results.load(out).rows) == before
    assert "[1/2] world1-nodes1: skipped" in err and "[2/2] world2-nodes1: skipped" in err


def _dies_after_first_config(setup):
    """Runs the first config as the harness does, then every worker dies out of memory (after rank 0
    has sent its row: a run that dies mid-config has no row to keep)."""
    ray_train.train_loop({**setup, "configs": setup["configs"][:1]})
    torch.distributed.barrier()
    raise torch.OutOfMemoryError("simulated: CUDA out of memory")


def test_a_run_that_dies_keeps_its_rows_and_records_the_rest(ray_cluster, tmp_path, monkeypatch):
    monkeypatch.setattr(ray_train, "train_loop", _dies_after_first_config)
    configs = [{**BASE, "world": 2}, {**BASE, "world": 2, "zero": 2}]
    out = tmp_path / "out"
    t0 = time.perf_counter()
    assert launch(_write(tmp_path / "c.jsonl", configs), Options(backend="ray", out=str(out), device="cpu")) == 1
    print(f"ray launch with a dying run: {time.perf_counter() - t0:.1f} s")
    rows = results.load(out).rows
    assert [r["status"] for r in rows] == ["ok", "oom"]
    assert rows[1]["error"].startswith("the Ray Train run failed on rank ")
    assert rows[1]["error"].endswith("OutOfMemoryError: simulated: CUDA out of memory")


def test_a_failed_runs_status_and_message_name_the_rank_that_ran_out_of_memory():
    from ray.train import ControllerError, WorkerGroupError
    err = WorkerGroupError("2 workers failed", {0: RuntimeError("gloo: connection closed"),
                                                 1: torch.OutOfMemoryError("CUDA out of memory. Tried 2 GiB")})
    assert ray_train.failure(err) == (
        "oom", "the Ray Train run failed on rank 1: OutOfMemoryError: CUDA out of memory. Tried 2 GiB")
    assert ray_train.failure(WorkerGroupError("1 failed", {0: ValueError("bad")}))[0] == "error"
    status, message = ray_train.failure(ControllerError(RuntimeError("placement group removed")))
    assert status == "error" and message.endswith("its controller: RuntimeError: placement group removed")
