"""The calculators' prediction for each suite's row, torch-free, so that a recorded row can be
predicted again by the current calculators (validation.bundle) exactly as the suite predicted it."""
from __future__ import annotations

from calculators.time.attention import rates
from calculators.time.compute import gemm_time
from calculators.specs.errors import ConfigError
from calculators.scenario import evaluate, parse_hardware, parse_profile

KERNEL_FAMILY = {"flash": "fa2", "cudnn": "cudnn"}        # the calculators' table for each SDPA backend


def scenario(run, hardware: dict, world: int) -> dict:
    """The calculators' scenario of harness run `run` (a RunSpec) on `world` ranks of `hardware`."""
    import dataclasses
    par = dataclasses.asdict(run.parallel(world))
    par["split"], par["recompute_ranks"] = list(par["split"]), list(par["recompute_ranks"])
    model = dataclasses.asdict(run.spec())
    model.pop("source", None)
    return {"model": model, "hardware": hardware, "parallel": par}


def train(scenario_: dict) -> dict:
    try:
        return evaluate(scenario_)
    except ConfigError as exc:
        return {"error": str(exc)}


def gemm(m: int, n: int, k: int, dtype: str, hardware: dict) -> dict:
    cluster = parse_hardware(hardware)
    t = gemm_time(m, n, k, cluster.gpu, parse_profile(hardware, cluster), fp8=dtype == "fp8")
    return {"time_s": t, "tflops": 2 * m * n * k / t / 1e12}


def attention_flops(batch: int, heads: int, seq: int, head_dim: int, causal: bool) -> float:
    """4 B a S^2 d for the forward, halved with the causal mask (flops.py's convention)."""
    f = 4.0 * batch * heads * seq ** 2 * head_dim
    return f / 2 if causal else f


def attention(m: dict, gpu_preset: str | None) -> dict:
    """Forward and backward rates and times from calculators.time.attention's table (H100 only)."""
    family = KERNEL_FAMILY.get(m["backend"])
    if not family or gpu_preset != "H100-80GB":
        return {}
    f = attention_flops(m["batch"], m["heads"], m["seq"], m["head_dim"], m["causal"])
    pf, pb = rates(family, m["seq"], m["head_dim"], m["causal"])
    return {"kernel": family, "forward_tflops": pf, "backward_tflops": pb,
            "forward_s": f / (pf * 1e12), "backward_s": 2.5 * f / (pb * 1e12)}
