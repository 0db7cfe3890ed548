"""The moe suite on a CPU: which cases it makes and refuses, that its grouped kernel computes what
the per-expert loop does, and that its prediction is the calculators' own cost of each part."""
import json

import pytest
import torch

from benchmarks import host, predict
from benchmarks.__main__ import main
from benchmarks.moe import cases, measure
from benchmarks.results import row_problem
from calculators.scenario import parse_hardware, parse_profile
from calculators.specs.errors import ConfigError
from calculators.specs.parallel import ParallelConfig
from calculators.time.compute import expert_tokens, gemm_time


def test_cases_keep_the_layouts_that_divide_and_say_which_they_leave_out():
    todo, skipped = cases("qwen3-30b-a3b,mixtral-8x7b", "8,32", "4096", ["bf16"])
    assert [(c["model"], c["ep"]) for c in todo] == [("qwen3-30b-a3b", 8), ("qwen3-30b-a3b", 32), ("mixtral-8x7b", 8)]
    assert len(skipped) == 1 and "mixtral-8x7b ep 32" in skipped[0] and "8 experts" in skipped[0]


@pytest.mark.parametrize("args, words", [
    (("llama3-8b", "8", "4096", ["bf16"]), "has no experts"),
    (("qwen3-30b-a3b", "3", "4096", ["bf16"]), "no case left"),
    (("qwen3-30b-a3b", "8", "4096", ["fp8"]), "FP8 experts are not timed yet"),
    (("qwen3-30b-a3b", "8", "-5", ["bf16"]), "--tokens"),
    (("no-such-model", "8", "4096", ["bf16"]), "no-such-model"),
])
def test_cases_refuse_what_they_cannot_time(args, words):
    with pytest.raises(ConfigError, match=words):
        cases(*args)


def test_a_cpu_run_times_every_part_and_the_grouped_kernel_matches_the_loop():
    torch.manual_seed(0)
    g = host.grid()
    case = cases("qwen3-30b-a3b", "64", "16", ["fp32"], iters=1)[0][0]
    metrics, prediction = measure(case, g, torch.device("cpu"))
    assert metrics["grouped_error"] == ""          # it ran, and its output equals the loop's
    assert metrics["local_experts"] == 2 and metrics["tokens_per_expert"] == 64 == prediction["tokens_per_expert"]
    for part in ("router", "permute", "experts", "experts_loop"):
        assert metrics[f"{part}_s"] > 0 and metrics[f"{part}_forward_s"] > 0
        assert prediction[f"{part}_s"] > prediction[f"{part}_forward_s"] > 0


def test_the_prediction_is_the_calculators_cost_of_the_same_gemms():
    hardware = {"gpu": "H100-80GB", "nodes": 1, "gpus_per_node": 8}
    spec = predict.moe_model("deepseek-v3")
    p = predict.moe("deepseek-v3", 32, 8192, "bf16", hardware)
    n = expert_tokens(spec, ParallelConfig(dp=32, ep=32, seq=8192, gbs=32), 8192)
    assert n == p["tokens_per_expert"] == 32 * 8192 * 8 / 256
    cluster = parse_hardware(hardware)
    gpu, profile = cluster.gpu, parse_profile(hardware, cluster)
    gemms = gemm_time(n, 2 * 2048, 7168, gpu, profile, count=8) + gemm_time(n, 7168, 2048, gpu, profile, count=8)
    assert gemms < p["experts_forward_s"] < 1.2 * gemms      # the SwiGLU's bytes are the rest
    assert p["experts_s"] - p["experts_forward_s"] > 2 * gemms     # backward: both gradients' GEMMs
    assert p["router_forward_s"] == gemm_time(8192, 256, 7168, gpu, profile)


def test_the_cli_writes_valid_rows(tmp_path, capsys):
    out = tmp_path / "moe.jsonl"
    assert main(["moe", "--models", "tiny-moe", "--eps", "2", "--tokens", "8", "--dtypes", "fp32",
                 "--device", "cpu", "--iters", "1", "--out", str(out)]) == 0
    row = json.loads(out.read_text())
    assert row_problem(row) == "" and row["suite"] == "moe" and row["status"] == "ok"
    assert "experts" in capsys.readouterr().out
    assert main(["moe", "--models", "tiny-moe", "--eps", "3", "--tokens", "8", "--device", "cpu"]) == 2


def test_a_grouped_kernel_that_is_missing_or_wrong_is_reported_not_timed(monkeypatch):
    g = host.grid()
    case = cases("tiny-moe", "2", "8", ["fp32"], iters=1)[0][0]
    monkeypatch.setattr(torch, "_grouped_mm", lambda a, b, offs: torch.zeros(a.shape[0], b.shape[-1]))
    metrics, _ = measure(case, g, torch.device("cpu"))
    assert "differs from the per-expert loop's" in metrics["grouped_error"]
    assert "experts_s" not in metrics and metrics["experts_loop_s"] > 0

    def missing(*args, **kwargs):
        raise RuntimeError("grouped_mm is not supported on this device\nmore")
    monkeypatch.setattr(torch, "_grouped_mm", missing)
    metrics, _ = measure(case, g, torch.device("cpu"))
    assert metrics["grouped_error"] == "grouped_mm is not supported on this device"


def test_a_recorded_row_is_predicted_again_by_the_current_calculators(tmp_path):
    """validation.bundle re-predicts the harness's rows; a moe row gets predict.moe on the H100."""
    from validation.bundle import _repredict
    out = tmp_path / "moe.jsonl"
    assert main(["moe", "--models", "tiny-moe", "--eps", "2", "--tokens", "8", "--dtypes", "fp32",
                 "--device", "cpu", "--iters", "1", "--out", str(out)]) == 0
    row = _repredict(json.loads(out.read_text()))
    assert row["prediction"] == predict.moe("tiny-moe", 2, 8, "fp32", {"gpu": "H100-80GB"})


@pytest.mark.parametrize("iters", ["-3", "0", "1e9", "abc"])
def test_timing_suites_refuse_a_repeat_count_that_is_not_a_small_whole_number(iters, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["moe", "--iters", iters, "--device", "cpu"])
    assert exit_.value.code == 2 and "--iters: must be a whole number from 1 to 10,000" in capsys.readouterr().err


def test_a_cpu_refuses_a_preset_layer_it_would_take_hours_on():
    """Qwen3-30B-A3B's layer at 4,096 tokens is tens of TFLOP per timing; on a CPU the case fails
    at once with what to run instead, and the suite goes on."""
    case = cases("qwen3-30b-a3b", "8", "4096", ["fp32"], iters=10)[0][0]
    with pytest.raises(ConfigError, match="tiny-moe"):
        measure(case, host.grid(), torch.device("cpu"))

