"""Predicted vs published GPU-hours: whole training runs whose totals were published.

    python -m validation.budget

Each line of validation/data/published_totals.jsonl is one run: a budget request in the
calculators' own schema (model, GPU, tokens, sequence length, final global batch, GPUs) and the
published total; the data's README says where each figure comes from. The budget
(calculators/planning/budget.py) plans the run with the default profiles and goodput, and nothing here is
fitted to these totals. Where the cluster size was not published, the run is planned over a range
of sizes and the published total compared with the range (0 when inside). Where the layout was
published, the run is also planned with the planner held to it (`layout_constraints`), which
separates the time model's error from the planner's choice.

A published total and our prediction count different things, and the table says so: the tokens
per second a total implies (tokens / GPU-hours) beside the predicted one show whether the
throughput or the accounting differs.
"""
from __future__ import annotations

import json
import os
import statistics
from dataclasses import dataclass
from pathlib import Path

from calculators.planning.budget import budget_answer

DATA = Path(__file__).parent / "data" / "published_totals.jsonl"
SOURCES = {
    "llama3.1-card": "Meta, Llama 3.1 model card (github.com/meta-llama/llama-models, models/llama3_1/MODEL_CARD.md): "
                     "training time 1.46M, 7.0M, 30.84M H100-80GB GPU-hours; Dubey et al. 2024, The Llama 3 Herd of "
                     "Models, section 3.3 and Table 4 (layout and batch of the 405B run)",
    "deepseek-v3": "DeepSeek-AI 2024, DeepSeek-V3 Technical Report (arXiv 2412.19437), Table 1 and sections 3.1-3.2: "
                   "2,664K H800 GPU-hours of pre-training on 14.8T tokens (2,788K with context extension and "
                   "post-training), 2,048 H800; section 3.3: AdamW's moments tracked in BF16 (moment_dtype), master weights and gradients "
                   "retained in FP32 (master_dtype fp32)",
    "llama1": "Touvron et al. 2023, LLaMA: Open and Efficient Foundation Language Models: 380 tokens/s/GPU on "
              "2,048 A100-80GB (efficient implementation), 1,022,362 GPU-hours for 65B (carbon footprint table)",
    "llama2": "Touvron et al. 2023, Llama 2: Open Foundation and Fine-Tuned Chat Models, Table 1 and section 2.2.1",
    "bloom": "BigScience 2022, BLOOM: A 176B-Parameter Open-Access Multilingual Language Model (arXiv 2211.05100), "
             "training section: 1,082,990 compute hours on 48 nodes of 8 A100-80GB over 3.5 months",
    "falcon": "TII, Falcon 180B announcement (huggingface.co/blog/falcon-180b): 3.5T tokens on up to 4,096 GPUs, "
              "about 7,000,000 GPU-hours; Almazrouei et al. 2023, The Falcon Series of Open Language Models",
}


@dataclass(frozen=True)
class Row:
    run: dict                    # the data line
    options: list                # the budget's options (one per size asked)
    at_layout: dict | None       # the option planned with the published layout, if one was published

    @property
    def predicted(self) -> list[float]:
        return [o["gpu_hours"] for o in self.options if o["gpu_hours"]]

    @property
    def error(self) -> float:
        """Predicted over published, minus 1; over a range of sizes, from the range's nearer end (0 inside)."""
        lo, hi, pub = min(self.predicted), max(self.predicted), self.run["published_gpu_hours"]
        return 0.0 if lo <= pub <= hi else (lo if pub < lo else hi) / pub - 1

    @property
    def layout_error(self) -> float | None:
        return None if not self.at_layout else self.at_layout["gpu_hours"] / self.run["published_gpu_hours"] - 1

    @property
    def implied_tps(self) -> float:
        """Tokens per second per GPU the published total implies."""
        return self.run["request"]["tokens"] / (self.run["published_gpu_hours"] * 3600)


def load(path: Path = DATA) -> list[dict]:
    runs = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if line.strip():
            run = json.loads(line)
            if run["source"] not in SOURCES:
                raise ValueError(f"{path.name} line {n}: source {run['source']!r} is not one of {sorted(SOURCES)}")
            runs.append(run)
    return runs


def check(path: Path = DATA, workers: int = os.cpu_count() or 1) -> list[Row]:
    rows = []
    for run in load(path):
        options = budget_answer(run["request"], workers)["options"]
        at_layout = None
        if run.get("layout_constraints"):
            request = {**run["request"], "constraints": {**run["request"].get("constraints", {}),
                                                         **run["layout_constraints"]}}
            at_layout = budget_answer(request, workers)["options"][0]
        rows.append(Row(run, options, at_layout))
    return rows


def _millions(x: float) -> str:
    return f"{x / 1e6:.3g}M"


def table(rows: list[Row]) -> str:
    """The Markdown table README.md quotes."""
    out = ["| run | GPUs | tokens (as published) | layout as published | predicted layout | tokens/s/GPU "
           "predicted / implied | goodput | GPU-hours predicted | published | error | at the published layout |",
           "|---" * 11 + "|"]
    for r in rows:
        fit = [o for o in r.options if o["gpu_hours"]]
        spread = len(fit) > 1
        sizes = f"{fit[0]['gpus']:,} to {fit[-1]['gpus']:,} (assumed)" if spread else f"{fit[0]['gpus']:,}"
        layout = "best at each size" if spread else f"`{fit[0]['plan']}`"
        tps = " to ".join(f"{o['tokens_per_s_per_gpu']:,.0f}" for o in (fit[0], fit[-1])[:1 + spread])
        good = " to ".join(f"{o['goodput']:.1%}" for o in (fit[0], fit[-1])[:1 + spread])
        hours = " to ".join(_millions(o["gpu_hours"]) for o in (fit[0], fit[-1])[:1 + spread])
        at = (f"{r.layout_error:+.0%}, {r.at_layout['tokens_per_s_per_gpu']:,.0f} tokens/s/GPU: "
              f"`{r.at_layout['plan']}`") if r.at_layout else ""
        out.append(f"| {r.run['run']} | {sizes} {r.run['hardware']} | {r.run['tokens_as_published']} | "
                   f"{r.run['layout_as_published']} | {layout} | {tps} / {r.implied_tps:,.0f} | {good} | {hours} | "
                   f"{_millions(r.run['published_gpu_hours'])} | {r.error:+.0%} | {at} |")
    return "\n".join(out)


def summary(rows: list[Row]) -> str:
    known = [r.error for r in rows if len(r.predicted) == 1]
    ranged = [r for r in rows if len(r.predicted) > 1]
    inside = sum(1 for r in ranged if r.error == 0)
    return (f"Runs with their cluster size published ({len(known)}): median error {statistics.median(known):+.0%}, "
            f"median absolute {statistics.median(map(abs, known)):.0%}, largest {max(known, key=abs):+.0%}. "
            f"Runs planned over a range of sizes ({len(ranged)}): the published total inside the range for {inside}, "
            f"above it for {sum(1 for r in ranged if r.error < 0)}, "
            f"below it for {sum(1 for r in ranged if r.error > 0)}.")


def main() -> None:
    rows = check()
    print("Sources:\n" + "\n".join(f"- {k}: {v}" for k, v in SOURCES.items()) + "\n")
    print(table(rows) + "\n")
    print(summary(rows))


if __name__ == "__main__":
    main()
