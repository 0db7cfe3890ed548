"""Predicted vs measured on our own harness's runs on one H100 (benchmarks/results/h100_harness.jsonl,
made by `python -m validation.bundle` from validation/data/h100_harness/, whose README says how each
row was measured).

    python -m validation.harness

Prints six tables: training steps on one GPU (step time, MFU, peak allocated memory against the
predicted total, and whether the calculators called it fitting), the memory suite's ranks of
multi-GPU layouts (state bytes and peak), GEMMs (measured over predicted TFLOP/s, by dtype),
attention kernels (measured over the table's TFLOP/s, by kernel), one GPU's share of MoE layers
(measured over predicted seconds, by part) and the eager MoE permutation kernel by kernel on an H100
and an H200 (validation/data/h100_harness/moe_permute_*.jsonl, predicted by
benchmarks.predict.permute_seconds). Errors are (predicted -
measured) / measured: positive means the calculators are slow (time) or high (memory).
"""
from __future__ import annotations

import json
import statistics
import sys
import types
from dataclasses import dataclass
from pathlib import Path

from benchmarks import predict, results
from calculators.memory.estimate import USABLE_FRACTION
from calculators.scenario import parse_hardware, parse_profile
from validation.bundle import HARNESS_OUT


def _rows(suite: str) -> list[dict]:
    return [r for r in results.load(HARNESS_OUT).rows if r["suite"] == suite]


@dataclass
class TrainCheck:
    ok: int
    oom: int
    time_errors: list            # (label, error) per ok run
    memory_errors: list          # (label, predicted - measured GiB) per ok run
    fit_calls: list              # (label, status, predicted total GiB, called fitting)

    @property
    def time_median(self) -> float:
        return statistics.median(abs(e) for _, e in self.time_errors)

    @property
    def time_worst(self) -> float:
        return max(abs(e) for _, e in self.time_errors)

    @property
    def fit_accuracy(self) -> float:
        return sum((s == "ok") == fit for _, s, _, fit in self.fit_calls) / len(self.fit_calls)


def _label(row: dict) -> str:
    cfg = row["config"]
    return (f"{cfg['model']} seq {cfg['seq']} mbs {cfg['mbs']} {cfg['recompute']}"
            f"{' compile' if cfg.get('compile') else ''}"
            f"{' fused AdamW' if 'fused' in str(row['metrics'].get('optimizer', '')) else ''}")


def train_check() -> TrainCheck:
    times, mems, fits = [], [], []
    rows = _rows("train")
    for r in rows:
        p, m, label = r["prediction"], r["metrics"], _label(r)
        if "memory" not in p:
            continue
        total = p["memory"]["total_gib"]
        fits.append((label, r["status"], total, total <= USABLE_FRACTION * p["memory"]["capacity_gib"]))
        if r["status"] == "ok":
            times.append((label, (p["step"]["time_s"] - m["step_time_s"]) / m["step_time_s"]))
            mems.append((label, total - m["peak_allocated_gib"]))
    return TrainCheck(sum(r["status"] == "ok" for r in rows), sum(r["status"] == "oom" for r in rows),
                      times, mems, fits)


def ratios(suite: str, key: str, group: str) -> dict[str, list[float]]:
    """measured / predicted `key` per value of metrics[group]."""
    out: dict[str, list[float]] = {}
    for r in _rows(suite):
        if r["status"] == "ok" and r["prediction"].get(key):
            out.setdefault(str(r["metrics"][group]), []).append(r["metrics"][key] / r["prediction"][key])
    return out


PERMUTE_DATA = {"H100-80GB": Path(__file__).parent / "data" / "h100_harness" / "moe_permute_h100.jsonl",
                "H200-141GB": Path(__file__).parent / "data" / "h100_harness" / "moe_permute_h200.jsonl"}


def permute_check() -> list[tuple[str, str, str, float, float]]:
    """(gpu, shape, sequence, predicted / measured forward, predicted / measured backward) for each
    whole eager permutation timed by benchmarks/sessions/moe_permute.py: torchtitan's of mid-2025
    (no expert parallelism) and torchtitan 0.3's with the reorders of expert parallelism 8."""
    out = []
    for gpu, path in PERMUTE_DATA.items():
        cluster = parse_hardware({"gpu": gpu})
        profile = parse_profile({"gpu": gpu}, cluster)
        for line in path.read_text().splitlines():
            r = json.loads(line)
            if r["part"] not in ("torchtitan", "torchtitan_ep"):
                continue
            spec = types.SimpleNamespace(hidden=r["hidden"], moe=types.SimpleNamespace(top_k=r["top_k"]))
            ep = 8 if r["part"] == "torchtitan_ep" else 1
            t = {way: predict.permute_seconds(spec, r["tokens"], ep, way, cluster.gpu, profile)
                 for way in ("forward", "backward")}
            out.append((gpu, r["shape"], r["part"], t["forward"] / r["forward_s"], t["backward"] / r["backward_s"]))
    return out


def main() -> int:
    c = train_check()
    print(f"Training on one H100 (eager or torch.compile, AdamW foreach unless said, bf16 autocast): {c.ok} ran, "
          f"{c.oom} out of memory\n")
    print(f"{'run':58s} {'step s':>7s} {'pred':>7s} {'error':>7s} {'MFU':>6s} {'peak GiB':>9s} {'pred':>6s}")
    for r in _rows("train"):
        if r["status"] != "ok" or "step" not in r["prediction"]:
            continue
        m, p = r["metrics"], r["prediction"]
        print(f"{_label(r):58s} {m['step_time_s']:7.3f} {p['step']['time_s']:7.3f} "
              f"{(p['step']['time_s'] - m['step_time_s']) / m['step_time_s']:+7.1%} {m['mfu']:6.1%} "
              f"{m['peak_allocated_gib']:9.1f} {p['memory']['total_gib']:6.1f}")
    print(f"\nstep time: median |error| {c.time_median:.1%}, largest {c.time_worst:.1%}")
    under = [d for _, d in c.memory_errors]
    print(f"peak allocated: predicted total minus measured peak, median {statistics.median(under):+.1f} GiB "
          f"(from {min(under):+.1f} to {max(under):+.1f})")
    print(f"fit / out of memory called correctly (total <= {USABLE_FRACTION:.0%} of capacity): "
          f"{c.fit_accuracy:.0%} of {len(c.fit_calls)}")
    for label, status, total, fit in c.fit_calls:
        if (status == "ok") != fit:
            print(f"  wrong call: {label}: {status}, predicted {total:.1f} GiB")
    print("\nOne rank of multi-GPU layouts (memory suite, fake process group)\n")
    print(f"{'layout':44s} {'state GiB':>9s} {'pred':>6s} {'peak GiB':>9s} {'pred':>6s}")
    for r in _rows("memory"):
        cfg, m, p = r["config"], r["metrics"], r["prediction"].get("memory", {})
        if r["status"] != "ok" or not p:
            continue
        label = (f"{cfg['model']} world {cfg['world']} tp {cfg['tp']} cp {cfg['cp']} zero {cfg['zero']} "
                 f"{cfg['recompute']}")
        state = m["params_gib"] + m["grads_gib"] + m["optimizer_gib"]
        pstate = p["params_gib"] + p.get("grads_full_gib", p["grads_gib"]) + p["optimizer_gib"]
        print(f"{label:44s} {state:9.2f} {pstate:6.2f} {m['peak_allocated_gib']:9.1f} {p['total_gib']:6.1f}")
    print("\nGEMMs: measured / predicted TFLOP/s (median, range)")
    for dtype, xs in ratios("gemm", "tflops", "dtype").items():
        print(f"  {dtype}: {statistics.median(xs):.2f} ({min(xs):.2f} to {max(xs):.2f}) over {len(xs)} shapes")
    print("\nAttention: measured / table TFLOP/s (median, range)")
    for key in ("forward_tflops", "backward_tflops"):
        for backend, xs in ratios("attention", key, "backend").items():
            print(f"  {backend} {key.split('_')[0]}: {statistics.median(xs):.2f} ({min(xs):.2f} to {max(xs):.2f}) "
                  f"over {len(xs)} cases")
    print("\nMoE layers, one GPU's share (moe suite): measured / predicted seconds, forward + backward (median, range)")
    for part in ("router", "permute", "experts", "experts_loop"):
        xs = ratios("moe", f"{part}_s", "model")
        flat = [x for v in xs.values() for x in v]
        if flat:
            print(f"  {part:13s} {statistics.median(flat):.2f} ({min(flat):.2f} to {max(flat):.2f}) "
                  f"over {len(flat)} cases")
    print("\nEager MoE permutation, kernel by kernel: predicted / measured seconds")
    for gpu, shape, seq, fwd, bwd in permute_check():
        print(f"  {gpu:11s} {shape:18s} {seq:14s} forward {fwd:.2f}  backward {bwd:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
