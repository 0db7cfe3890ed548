"""An interrupted sweep resumes without repeating finished runs; the memory suite (fake process
group) counts one rank's real state bytes, which equal the calculators' (FSDP2 layout)."""
import json

import pytest

from benchmarks import results
from benchmarks.__main__ import main

pytestmark = pytest.mark.slow
GEMM = {"suite": "gemm", "dtype": "fp32", "iters": 1}


def test_sweep_resumes_where_it_stopped(tmp_path):
    configs = [dict(GEMM, m=s, n=s, k=s) for s in (64, 96, 128)] + [
        {"model": "tiny", "precision": "fp32", "steps": 1, "warmup": 0, "gbs": 2, "seq": 32, "device": "cpu"}]
    out = tmp_path / "out.jsonl"
    first = tmp_path / "first.jsonl"
    first.write_text(json.dumps(configs[0]) + "\n" + json.dumps(configs[1]) + "\n")
    assert main(["sweep", str(first), "--out", str(out), "--device", "cpu"]) == 0
    with open(out, "a") as fh:                      # the interrupted run left a torn line behind
        fh.write('{"schema": 1, "suite": "ge')
    full = tmp_path / "all.jsonl"
    full.write_text("\n".join(json.dumps(c) for c in configs) + "\n")
    assert main(["sweep", str(full), "--out", str(out), "--device", "cpu"]) == 0
    loaded = results.load(out)
    assert len(loaded.problems) == 1                                   # the torn line, reported
    assert [r["suite"] for r in loaded.rows] == ["gemm", "gemm", "gemm", "train"]
    assert len({r["key"] for r in loaded.rows}) == 4                   # nothing ran twice
    assert main(["sweep", str(full), "--out", str(out), "--device", "cpu"]) == 0
    assert len(results.load(out).rows) == 4


def test_a_bad_config_is_recorded_as_an_error_with_its_reason(tmp_path):
    out = tmp_path / "out.jsonl"
    cfg = tmp_path / "c.jsonl"
    cfg.write_text(json.dumps({"model": "tiny", "tp": 3, "device": "cpu", "gbs": 3}) + "\n")
    assert main(["sweep", str(cfg), "--out", str(out), "--device", "cpu"]) == 1
    row = results.load(out).rows[0]
    assert row["status"] == "error" and "not divisible by tp*cp*pp = 3" in row["error"]


def test_memory_suite_state_bytes_equal_the_prediction(tmp_path):
    out = tmp_path / "m.jsonl"
    assert main(["memory", "--device", "cpu", "--precision", "fp32", "--world", "8", "--tp", "2", "--zero", "3",
                 "--model", "tiny", "--gbs", "8", "--out", str(out)]) == 0
    row = results.load(out).rows[0]
    # the state after a step holds every gradient: grads_full_gib (grads_gib is what the peak holds)
    for key, predicted in (("params_gib", "params_gib"), ("grads_gib", "grads_full_gib"),
                           ("optimizer_gib", "optimizer_gib")):
        assert row["metrics"][key] == pytest.approx(row["prediction"]["memory"][predicted], rel=1e-9), key
