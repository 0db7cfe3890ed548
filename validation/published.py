"""Predicted vs published throughput: training runs other than the nanotron set.

    python -m validation.published

The time model was developed against one source (nanotron on one H100 cluster). This checks it,
unchanged and with the default hardware profiles, against runs another framework published:
NVIDIA's Megatron-Bridge and NeMo performance tables (Megatron-Core with Transformer Engine, FP8,
interleaved pipelines, context and expert parallelism, DGX H100 and DGX B200), Megatron-LM's
later MoE recipes for the same Qwen3-30B-A3B on H100, and the Megatron-MoE-ModelZoo's Qwen3-235B-A22B
runs on 256 H100 (DeepEP and all-to-all dispatchers). Nothing is fitted to them.

Each row of validation/data/published_runs.csv is one published run in our schema; the file's
README says where each came from and how its columns were read. A run the calculators cannot
express is listed with the reason and not scored. The tables also give model TFLOP/s per GPU:
divided by tokens/s it is the framework's FLOPs per token, which checks our FLOP count under the
same convention.
"""
from __future__ import annotations

import csv
import statistics
from dataclasses import dataclass
from pathlib import Path

from calculators.time import flops as fl
from calculators.specs.errors import ConfigError
from calculators.specs.hardware import ClusterSpec, gpu_from_name
from calculators.specs.models import ModelSpec
from calculators.specs.parallel import DISPATCHERS, ParallelConfig, check_layout
from calculators.specs.stages import megatron_split
from calculators.specs.presets import model_from_name
from calculators.time.profiles import default_profile
from calculators.time.step import estimate_step

DATA = Path(__file__).parent / "data" / "published_runs.csv"
SOURCES = {
    "megatron-bridge": "NVIDIA Megatron-Bridge performance summary (archive), "
                       "github.com/NVIDIA-NeMo/Megatron-Bridge/blob/main/docs/performance-summary-archive.md",
    "nemo": "NVIDIA NeMo Framework 24.12 performance summary, "
            "docs.nvidia.com/nemo-framework/user-guide/24.12/performance/performance_summary.html",
    "megatron-lm": "Megatron-LM MoE recipes (examples/moe_recipes), model TFLOP/s/GPU measured in "
                   "github.com/NVIDIA/Megatron-LM/pull/5728",
    "megatron-moe-modelzoo": "Megatron-MoE-ModelZoo, Qwen3 best practice (best_practice/Qwen3/readme.md), "
                             "github.com/yanring/Megatron-MoE-ModelZoo",
}
SYSTEMS = {"DGX-H100": "H100-80GB", "DGX-B200": "B200", "H100-SXM": "H100-80GB"}
COLUMNS = ("source", "release", "system", "model", "gpus", "precision", "gbs", "mbs", "seq", "zero", "tp", "pp",
           "cp", "vpp", "ep", "etp", "tp_overlap", "dispatcher", "ep_overlap", "recompute", "tokens_per_s_per_gpu",
           "model_tflops_per_gpu", "split", "note")


@dataclass(frozen=True)
class PublishedRun:
    source: str
    release: str
    system: str
    model: ModelSpec
    cluster: ClusterSpec
    par: ParallelConfig
    tokens_per_s_per_gpu: float
    model_tflops_per_gpu: float
    note: str

    @property
    def label(self) -> str:
        p = self.par
        parts = [f"tp{p.tp}", f"pp{p.pp}"] + [f"{k}{getattr(p, k)}" for k in ("vpp", "cp", "ep") if getattr(p, k) > 1]
        parts += [p.dispatcher] if p.ep > 1 and p.dispatcher != "alltoall" else []
        parts += [f"recompute={p.recompute}"] if p.recompute != "none" else []
        return (f"{self.model.name} {self.system} x{self.cluster.world} {p.precision} "
                f"{' '.join(parts)} mbs{p.mbs} gbs{p.gbs}")


@dataclass(frozen=True)
class Result:
    run: PublishedRun
    predicted: float | None          # tokens/s/GPU; None when the layout cannot be expressed
    reason: str                      # why not, else ""
    flops_ratio: tuple               # our model FLOPs per token over the framework's: causal attention
                                     # counted as half the square (our convention), and as the full square

    @property
    def error(self) -> float | None:
        return None if self.predicted is None else self.predicted / self.run.tokens_per_s_per_gpu - 1


def load_runs(path: Path = DATA) -> list[PublishedRun]:
    """Parse the file; a malformed row raises ValueError naming its line and what to fix."""
    runs = []
    with open(path, newline="") as fh:
        reader = csv.DictReader(fh)
        missing = [c for c in COLUMNS if c not in (reader.fieldnames or ())]
        if missing:
            raise ValueError(f"{path.name}: missing columns {missing}")
        for line, row in enumerate(reader, start=2):
            try:
                runs.append(_run(row))
            except (KeyError, ValueError, ConfigError) as exc:
                raise ValueError(f"{path.name} line {line}: {exc}") from None
    return runs


def _run(row: dict) -> PublishedRun:
    if row["source"] not in SOURCES:
        raise ValueError(f"source {row['source']!r} is not one of {sorted(SOURCES)}")
    if row["system"] not in SYSTEMS:
        raise ValueError(f"system {row['system']!r} is not one of {sorted(SYSTEMS)}")
    ints = {k: int(row[k]) for k in ("gpus", "gbs", "mbs", "seq", "zero", "tp", "pp", "cp", "vpp", "ep", "etp")}
    if row["tp_overlap"] not in ("yes", "no"):
        raise ValueError(f"tp_overlap must be yes or no (got {row['tp_overlap']!r})")
    if row["ep_overlap"] not in ("", "yes", "no"):
        raise ValueError(f"ep_overlap must be yes, no or empty (got {row['ep_overlap']!r})")
    if row["dispatcher"] not in ("", *DISPATCHERS):
        raise ValueError(f"dispatcher must be empty (no experts) or one of {DISPATCHERS} (got {row['dispatcher']!r})")
    if row["split"] not in ("", "megatron"):
        raise ValueError(f"split must be empty (even) or megatron (got {row['split']!r})")
    gpus, per_node = ints["gpus"], 8
    model = model_from_name(row["model"])
    stages = ints["pp"] * ints["vpp"]
    split = megatron_split(model.layers, stages) if row["split"] == "megatron" else ()
    par = ParallelConfig(dp=gpus // (ints["tp"] * ints["pp"] * ints["cp"]), tp=ints["tp"], pp=ints["pp"],
                         cp=ints["cp"], ep=ints["ep"], etp=ints["etp"], vpp=ints["vpp"], zero=ints["zero"],
                         sp=ints["tp"] > 1, tp_overlap=row["tp_overlap"] == "yes", mbs=ints["mbs"], gbs=ints["gbs"],
                         dispatcher=row["dispatcher"] or "alltoall", ep_overlap=row["ep_overlap"] == "yes",
                         recompute=row["recompute"] or "none",
                         seq=ints["seq"], precision=row["precision"],
                         schedule="interleaved" if ints["vpp"] > 1 else "1f1b", framework="megatron", split=split,
                         grad_dtype="bf16" if row["source"] == "megatron-bridge" else "")   # recipes.BF16_GRADS
    cluster = ClusterSpec(gpu_from_name(SYSTEMS[row["system"]]), nodes=max(1, gpus // per_node),
                          gpus_per_node=min(per_node, gpus))
    return PublishedRun(source=row["source"], release=row["release"], system=row["system"],
                        model=model, cluster=cluster, par=par,
                        tokens_per_s_per_gpu=float(row["tokens_per_s_per_gpu"]),
                        model_tflops_per_gpu=float(row["model_tflops_per_gpu"]), note=row["note"])


def predict(run: PublishedRun) -> Result:
    theirs = run.model_tflops_per_gpu * 1e12 / run.tokens_per_s_per_gpu
    ratio = tuple(fl.model_flops_per_token(run.model, run.par.seq, causal) / theirs for causal in (True, False))
    try:
        check_layout(run.model, run.cluster, run.par)
        step = estimate_step(run.model, run.cluster, run.par, default_profile(run.cluster.gpu.name))
    except ConfigError as exc:
        return Result(run, None, str(exc), ratio)
    return Result(run, step.tokens_per_s_per_gpu, "", ratio)


def check(path: Path = DATA) -> list[Result]:
    return [predict(r) for r in load_runs(path)]


def flops_convention(r: Result, tol: float = 0.02) -> str:
    """Which attention convention makes our FLOPs per token match the framework's, within tol."""
    causal, full = r.flops_ratio
    return ("causal" if abs(causal - 1) <= tol else "full square" if abs(full - 1) <= tol else
            f"neither ({causal:.3f} / {full:.3f})")


def summary(results: list[Result]) -> dict:
    """{group: (runs, median abs error, max abs error, median signed)} over the scored runs."""
    out = {}

    def moe(r):
        return r.run.model.moe is not None

    groups = {"all": lambda r: True, "dense": lambda r: not moe(r), "mixture of experts": moe}
    groups.update({f"mixture of experts, {src}": (lambda r, src=src: moe(r) and r.run.source == src)
                   for src in SOURCES})
    for name, keep in groups.items():
        es = [r.error for r in results if r.error is not None and keep(r)]
        if es:
            out[name] = (len(es), statistics.median(map(abs, es)), max(map(abs, es)), statistics.median(es))
    return out


def main() -> None:
    results = check()
    print("Sources:\n" + "\n".join(f"- {k}: {v}" for k, v in SOURCES.items()) + "\n")
    print("| run | release | published tok/s/GPU | predicted | error | FLOPs/token agree when attention is |\n"
          "|---|---|---|---|---|---|")
    for r in results:
        pred = f"{r.predicted:,.0f}" if r.predicted is not None else "not expressible"
        err = f"{r.error:+.0%}" if r.error is not None else ""
        print(f"| {r.run.label} | {r.run.source} {r.run.release} | {r.run.tokens_per_s_per_gpu:,.0f} | {pred} | "
              f"{err} | {flops_convention(r)} |")
    print("\n| runs | scored | median abs error | largest abs error | median signed |\n|---|---|---|---|---|")
    for name, (n, med, worst, signed) in summary(results).items():
        print(f"| {name} | {n} | {med:.1%} | {worst:.1%} | {signed:+.1%} |")
    skipped = [r for r in results if r.predicted is None]
    if skipped:
        print(f"\nNot expressible ({len(skipped)}):")
        for r in skipped:
            print(f"- {r.run.label}: {r.reason}")


if __name__ == "__main__":
    main()
