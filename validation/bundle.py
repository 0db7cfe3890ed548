"""Convert the Ultra-Scale Playbook's nanotron runs, and the runs NVIDIA published for Megatron-
Bridge and NeMo, into benchmark result rows (our schema), with their citation and the calculators'
prediction, for benchmarks/results/.

    python -m validation.bundle        # rewrites benchmarks/results/nanotron_h100.jsonl, published.jsonl,
                                       # h100_harness.jsonl and published_more.jsonl

Runs with a clear outcome only: measured (status ok: tokens/s/GPU, MFU from our FLOPs
convention, memory allocated between steps and peak reserved, GiB, and the bus bandwidths the
job measured) and out of memory (status oom). Runs that timed out or crashed for other reasons
are left out (validation/data/README.md). The prediction is the calculators' answer at the time
of conversion, trimmed to the estimate contract's keys; the app recomputes the current one.
Published runs (validation/published.py) carry tokens/s/GPU and the framework's own model TFLOP/s
per GPU; a layout the calculators cannot express carries the reason as its prediction's error.
Our own harness's runs on one H100 (validation/data/h100_harness/, as the suites wrote them) keep
their measurements; their scenario and prediction are made again from the recorded run with the
current harness and calculators (benchmarks/predict.py), so that they stay one join away.
The published runs of other stacks (validation/stacks.py) carry their tokens/s/GPU (and peak
memory where published), their source and line, and the family the explorer draws them in.
"""
from __future__ import annotations

import csv
import dataclasses
import sys
from pathlib import Path

from benchmarks import results
from calculators.specs.errors import ConfigError
from calculators.specs.hardware import GPU_PRESETS
from calculators.time.flops import model_flops_per_token
from calculators.scenario import evaluate
from validation import published
from validation.nanotron import CLUSTER_PROFILE, DATA, SOURCE, load_runs

OUT = results.BUNDLED / "nanotron_h100.jsonl"
PUBLISHED_OUT = results.BUNDLED / "published.jsonl"
HARNESS_OUT = results.BUNDLED / "h100_harness.jsonl"
STACKS_OUT = results.BUNDLED / "published_more.jsonl"
HARNESS_DATA = Path(__file__).parent / "data" / "h100_harness"
HARNESS_SOURCE = "this project's harness on one H100 80GB, 2026-11-25 (validation/data/h100_harness)"
HARNESS_FILES = ("gemm", "attention", "train", "train_fused_adamw", "memory", "moe")
MEMORY_KEYS = ("params_gib", "grads_gib", "grads_full_gib", "optimizer_gib", "activations_gib", "other_gib",
               "total_gib", "capacity_gib", "fits")
STEP_KEYS = ("time_s", "tokens_per_s_per_gpu", "mfu", "hfu", "tflops_per_gpu", "bubble_fraction")


def _scenario(run) -> dict:
    model = dataclasses.asdict(run.model)
    model.pop("source")
    par = dataclasses.asdict(run.par)
    par["split"], par["recompute_ranks"] = list(par["split"]), list(par["recompute_ranks"])
    gpu = run.cluster.gpu
    # a GPU the product has no preset for (validation.gpus) goes as the custom GPU object it is
    gpu = gpu.name if gpu.name in GPU_PRESETS else dataclasses.asdict(gpu)
    return {"model": model, "hardware": {"gpu": gpu, "nodes": run.cluster.nodes,
                                         "gpus_per_node": run.cluster.gpus_per_node}, "parallel": par}


def _prediction(scenario: dict) -> dict:
    try:
        answer = evaluate(scenario)
    except ConfigError as exc:        # a few runs use layouts the calculators refuse (pp > layers)
        return {"error": str(exc)}
    return {"memory": {k: answer["memory"][k] for k in MEMORY_KEYS},
            "step": {k: answer["step"][k] for k in STEP_KEYS}}


def rows() -> list[dict]:
    with open(DATA, newline="") as fh:
        dates = {r["job_id"]: r["date"] for r in csv.DictReader(fh)}
    out = []
    for run in load_runs():
        if run.outcome not in ("ok", "oom"):
            continue
        scenario = _scenario(run)
        scenario["hardware"]["profile"] = CLUSTER_PROFILE     # its measured all-gather and reduce-scatter
        metrics = {}
        if run.outcome == "ok":
            tps = run.tokens_per_s_per_gpu
            metrics = {"tokens_per_s_per_gpu": tps,
                       "step_time_s": run.par.tokens_per_step / (tps * run.par.world) if tps else None,
                       "mfu": tps * model_flops_per_token(run.model, run.par.seq) / 989.4e12 if tps else None,
                       "allocated_between_steps_gib": run.mem_alloc_gib, "peak_reserved_gib": run.mem_reserved_gib,
                       "busbw_gbps": run.busbw}
        row = results.make_row("train", {"job": run.job, "framework": "nanotron", "after_pp_fix": run.after_pp_fix,
                                         "scenario": scenario}, run.outcome, metrics=metrics,
                               prediction=_prediction(scenario), error="out of memory" if run.outcome == "oom" else "",
                               host={"device": "cuda", "gpu": "H100 80GB HBM3", "gpus": run.par.world,
                                     "nodes": run.cluster.nodes}, source=SOURCE)
        row["time"] = dates.get(run.job) or "unknown"
        out.append(row)
    return out


def published_rows() -> list[dict]:
    out = []
    for run in published.load_runs():
        scenario = _scenario(run)
        metrics = {"tokens_per_s_per_gpu": run.tokens_per_s_per_gpu,
                   "step_time_s": run.par.tokens_per_step / (run.tokens_per_s_per_gpu * run.par.world),
                   "framework_model_tflops_per_gpu": run.model_tflops_per_gpu}
        row = results.make_row("train", {"framework": "megatron", "release": f"{run.source} {run.release}",
                                         "system": run.system, "scenario": scenario}, "ok", metrics=metrics,
                               prediction=_prediction(scenario),
                               host={"device": "cuda", "gpu": run.cluster.gpu.name, "gpus": run.par.world,
                                     "nodes": run.cluster.nodes}, source=published.SOURCES[run.source])
        row["time"] = "published"
        out.append(row)
    return out


# validation.stacks' sources by family: the explorer draws a series per family (35 sources are too
# many to tell apart); each row keeps its own source and citation
_HF = "Hugging Face Llama (Snowflake ALST, cudnn-frontend)"
FAMILIES = (("dgxc-benchmarking", "NeMo (DGX Cloud benchmarks)"), ("megatron-bridge", "Megatron-Bridge tables"),
            ("nemo-automodel", "NeMo AutoModel"), ("nemo", "NeMo tables"), ("megatron", "Megatron-LM"),
            ("torchao", "torchao (torchtitan)"), ("arxiv-2506.13996-alst", _HF), ("cudnn-frontend", _HF),
            ("", "PyTorch FSDP2 / torchtitan"))


def stacks_rows() -> list[dict]:
    """validation.stacks' runs with a measured throughput, each with its prediction (or the reason
    it cannot be expressed), in published_more.csv's order."""
    from validation import stacks
    out = []
    for run in stacks.load()[0]:
        if not run.measured:
            continue
        scenario = _scenario(run)
        metrics = {"tokens_per_s_per_gpu": run.measured}
        if run.memory_gib:
            metrics["peak_reserved_gib" if run.memory_kind == "reserved" else "peak_allocated_gib"] = run.memory_gib
        family = next(name for prefix, name in FAMILIES if run.source.startswith(prefix))
        row = results.make_row("train", {"framework": run.par.framework, "release": family, "line": run.line,
                                         "scenario": scenario}, "ok", metrics=metrics,
                               prediction=_prediction(scenario),
                               host={"device": "cuda", "gpu": run.cluster.gpu.name, "gpus": run.cluster.world,
                                     "nodes": run.cluster.nodes},
                               source=f"{run.source} (validation/data/published_more.csv line {run.line})")
        row["time"] = "published"
        out.append(row)
    return out


def _repredict(row: dict) -> dict:
    """`row` with the scenario and prediction the current harness and calculators give it."""
    from benchmarks import predict
    from benchmarks.config import RunSpec
    row, cfg, m = dict(row), dict(row["config"]), row["metrics"]
    if row["suite"] in ("train", "memory"):
        world = cfg["world"] if row["suite"] == "memory" else row["host"]["gpus"]
        nodes = max(1, world // 8) if row["suite"] == "memory" else row["host"]["nodes"]
        # rows the suites recorded without a scenario (a run out of memory, before the suite
        # predicted ahead of running) get the hardware the suite would have described
        hardware = cfg.get("scenario", {}).get("hardware") or {"gpu": "H100-80GB", "nodes": nodes,
                                                                "gpus_per_node": world // nodes}
        run = RunSpec.from_dict({k: v for k, v in cfg.items() if k not in ("scenario", "world", "rank")})
        cfg["scenario"] = predict.scenario(run, hardware, world, row.get("host", {}).get("torch"))
        answer = predict.train(cfg["scenario"])
        row["prediction"] = answer if "error" in answer else {"memory": answer["memory"], "step": answer["step"]}
    elif row["suite"] == "gemm" and row["status"] == "ok":
        row["prediction"] = predict.gemm(m["m"], m["n"], m["k"], m["dtype"], {"gpu": "H100-80GB"})
    elif row["suite"] == "attention" and row["status"] == "ok":
        row["prediction"] = predict.attention(m, "H100-80GB")
    elif row["suite"] == "moe" and row["status"] == "ok":
        row["prediction"] = predict.moe(m["model"], m["ep"], m["tokens"], m["dtype"], {"gpu": "H100-80GB"})
    row["config"] = cfg
    row["source"] = HARNESS_SOURCE
    return row


def harness_rows() -> list[dict]:
    """Our harness's H100 rows, in suite order, each predicted by the current calculators."""
    loaded = results.load(*(HARNESS_DATA / f"{name}.jsonl" for name in HARNESS_FILES))
    if loaded.problems:
        raise ValueError(f"{HARNESS_DATA}: {loaded.problems}")
    return [_repredict(r) for r in loaded.rows]


def _write(path: Path, data: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w") as fh:
        for r in data:
            fh.write(results.dumps(r))
    tmp.replace(path)
    print(f"wrote {len(data)} rows to {path}")


def main(path: Path = OUT, published_path: Path = PUBLISHED_OUT, harness_path: Path = HARNESS_OUT,
         stacks_path: Path = STACKS_OUT) -> int:
    _write(path, rows())
    _write(published_path, published_rows())
    _write(harness_path, harness_rows())
    _write(stacks_path, stacks_rows())
    return 0


if __name__ == "__main__":
    sys.exit(main())
