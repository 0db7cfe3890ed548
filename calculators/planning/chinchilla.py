"""Compute-optimal sizing: for a compute budget, the model size and token count that reach the
lowest loss (Chinchilla), and what a smaller model trained longer, cheaper to serve, costs.

Hoffmann et al. 2022, Training Compute-Optimal Large Language Models (arXiv 2203.15556), Approach
3 (section 3.3), fitted the final loss of a model of N parameters trained on D tokens as
L(N, D) = E + A / N^α + B / D^β. Its printed constants (E = 1.69, A = 406.4, B = 410.7, α = 0.34,
β = 0.28) are rounded in a way that biases the fit: at Chinchilla's own budget (Gopher's, 5.76e23
FLOPs) they give 32B parameters on 3.0T tokens, where the paper trained Chinchilla at 70B on 1.4T,
the 20 tokens per parameter of its Approaches 1 and 2. Besiroglu et al. 2024 (Chinchilla Scaling:
A replication attempt, arXiv 2404.10102) refitted Approach 3 on the paper's own runs (240 points
read from its Figure 4): E = 1.8172, A = 482.01, B = 2085.43, α = 0.3478, β = 0.3658, used here.
Minimised under the budget C = 6 N D (FLOPs) at

    N_opt = G (C/6)^(β/(α+β)),   D_opt = (C/6) / N_opt,   G = (α A / (β B))^(1/(α+β)),

N_opt grows as C^0.51 and D_opt as C^0.49; at Chinchilla's budget 72B parameters on 1.3T tokens,
the paper's model. The fit's corpus and budgets (up to 5.76e23 FLOPs) bound what it says.

Over-training: a model f x N_opt reaches the optimum's loss L* after D' tokens, where
B / D'^β = L* - E - A / (f N_opt)^α; it costs 6 f N_opt D' FLOPs to train and 2 f N_opt per token
to serve, so serving repays the extra training after (C' - C) / (2 N_opt (1 - f)) tokens. Below
some f no amount of data reaches L*: the answer says so.
"""
from __future__ import annotations

import math

from ..specs import limits
from ..specs.errors import ConfigError
from ..specs.hardware import GPUSpec
from ..specs.validate import check_fields, keys, number, show

E, A, B, ALPHA, BETA = 1.8172, 482.01, 2085.43, 0.3478, 0.3658
SOURCE = ("Hoffmann et al. 2022's Approach 3 as Besiroglu et al. 2024 refitted it: "
          "L = 1.8172 + 482.01/N^0.3478 + 2085.43/D^0.3658, C = 6ND")
G = (ALPHA * A / (BETA * B)) ** (1 / (ALPHA + BETA))
MFU = 0.40                       # Llama 3 405B: 38 to 43% BF16 MFU (Dubey et al. 2024, Table 4)
SMALLER = (0.5, 0.25, 0.1)       # default fractions of N_opt to compare


def loss(params: float, tokens: float) -> float:
    return E + A / params ** ALPHA + B / tokens ** BETA


def optimal(flops: float) -> tuple[float, float]:
    """(N_opt parameters, D_opt tokens) for a budget of `flops` training FLOPs (C = 6ND)."""
    n = G * (flops / 6) ** (BETA / (ALPHA + BETA))
    return n, flops / (6 * n)


def flops_for(params: float) -> float:
    """The budget whose compute-optimal model has `params` parameters (optimal's inverse)."""
    return 6 * (params / G) ** ((ALPHA + BETA) / BETA)


def tokens_to_reach(params: float, target: float) -> float:
    """Tokens a model of `params` needs to reach loss `target`; inf when it never does."""
    gap = target - E - A / params ** ALPHA
    return (B / gap) ** (1 / BETA) if gap > 0 else math.inf


def overtrained(flops: float, fraction: float) -> dict:
    """A model `fraction` x N_opt trained to the optimum's loss: its tokens, FLOPs, the extra
    training compute, and the served tokens after which its cheaper inference repays it."""
    n_opt, d_opt = optimal(flops)
    n = fraction * n_opt
    d = tokens_to_reach(n, loss(n_opt, d_opt))
    if math.isinf(d):
        return {"fraction": fraction, "params": n, "tokens": None, "flops": None, "extra_compute": None,
                "inference_flops_per_token": 2 * n, "break_even_tokens": None,
                "note": "never reaches the compute-optimal loss, however many tokens"}
    extra = 6 * n * d - flops
    saved = 2 * n_opt * (1 - fraction)                         # inference FLOPs saved per token served
    return {"fraction": fraction, "params": n, "tokens": d, "tokens_per_param": d / n, "flops": 6 * n * d,
            "extra_compute": extra / flops, "inference_flops_per_token": 2 * n,
            "break_even_tokens": extra / saved if saved > 0 else None, "note": ""}


OPTIMAL_KEYS = {"flops", "gpu_hours", "params", "hardware", "mfu", "smaller"}


def optimal_answer(request) -> dict:
    """The `optimal` entry point: one of {"flops"}, {"gpu_hours", "hardware": {"gpu"}, "mfu"?} or
    {"params"}; optional "smaller" (fractions of N_opt, default 0.5, 0.25, 0.1)."""
    from ..scenario import parse_hardware
    if not isinstance(request, dict):
        raise ConfigError(f"an optimal request must be a JSON object like {{'flops': 3.8e25}} (got {show(request)})")
    unknown = sorted(map(str, set(request) - OPTIMAL_KEYS))
    if unknown:
        raise ConfigError(f"optimal request has unknown key(s) {keys(unknown)}; "
                          f"use {', '.join(sorted(OPTIMAL_KEYS))}")
    given = [k for k in ("flops", "gpu_hours", "params") if k in request]
    if len(given) != 1:
        raise ConfigError("optimal request: give exactly one of flops, gpu_hours (with hardware.gpu) or params "
                          f"(got {', '.join(given) or 'none'})")
    problems = check_fields(request, "optimal", {k: v for k, v in limits.OPTIMAL.items() if k in request})
    smaller = request.get("smaller", list(SMALLER))
    if not isinstance(smaller, list) or len(smaller) > limits.MAX_SIZES:
        problems.append(f"optimal.smaller must be a list of at most {limits.MAX_SIZES} fractions (got {show(smaller)})")
        smaller = []
    for i, f in enumerate(smaller):
        number(problems, f"optimal.smaller[{i}]", f, 1e-3, 1.0)
    if problems:
        raise ConfigError(problems)
    gpu: GPUSpec | None = None
    if "hardware" in request:
        gpu = parse_hardware(request["hardware"]).gpu
    mfu = request.get("mfu", MFU)
    rate = gpu.bf16_tflops * 1e12 * mfu * 3600 if gpu else None   # FLOPs per GPU-hour
    if "gpu_hours" in request:
        if gpu is None:
            raise ConfigError("optimal request: gpu_hours needs hardware.gpu, to turn hours into FLOPs")
        flops = request["gpu_hours"] * rate
    else:
        flops = request["flops"] if "flops" in request else flops_for(request["params"])
    n, d = optimal(flops)
    return {"flops": flops, "gpu_hours": flops / rate if rate else None, "gpu": gpu.name if gpu else None,
            "mfu": mfu if gpu else None, "params": n, "tokens": d, "tokens_per_param": d / n, "loss": loss(n, d),
            "smaller": [overtrained(flops, f) for f in smaller], "source": SOURCE}


def text(ans: dict) -> str:
    """`optimal_answer`'s answer for people (`python -m calculators optimal --text`)."""
    lines = [f"{ans['flops']:.3g} FLOPs: {ans['params'] / 1e9:,.1f}B parameters on {ans['tokens'] / 1e12:,.2f}T "
             f"tokens ({ans['tokens_per_param']:.0f} per parameter), loss {ans['loss']:.3f}"]
    for s in ans["smaller"]:
        reach = s["note"] if s["tokens"] is None else (
            f"on {s['tokens'] / 1e12:,.3g}T tokens to the same loss: {1 + s['extra_compute']:,.3g} x the compute, "
            f"repaid after {s['break_even_tokens'] / 1e12:,.3g}T tokens served")
        lines.append(f"  {s['fraction']:g} x the size, {s['params'] / 1e9:,.1f}B, {reach}")
    return "\n".join(lines + [f"source: {ans['source']}"])
