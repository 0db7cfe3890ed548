"""The gemm suite: TFLOP/s of (M x K) @ (K x N) per shape and dtype, against the dense peak and
the calculators' GEMM model (compute.gemm_time), on one device."""
from __future__ import annotations

import time

import torch

from calculators.compute import gemm_time
from calculators.errors import ConfigError
from calculators.scenario import parse_hardware, parse_profile

from . import host

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def cases(shapes: str, dtypes, iters: int) -> list[dict]:
    out = []
    for shape in shapes.split(","):
        try:
            m, n, k = (int(x) for x in shape.lower().split("x"))
        except ValueError:
            raise ConfigError(f"shape {shape!r} must be MxNxK, e.g. 8192x8192x8192") from None
        for dt in dtypes:
            if dt not in DTYPES:
                raise ConfigError(f"dtype {dt!r} must be one of {', '.join(DTYPES)}")
            out.append({"m": m, "n": n, "k": k, "dtype": dt, "iters": iters})
    return out


def measure(case: dict, g: host.Grid, device: torch.device) -> tuple[dict, dict]:
    m, n, k, dtype = case["m"], case["n"], case["k"], DTYPES[case["dtype"]]
    if device.type == "cpu" and dtype != torch.float32:
        raise ConfigError("on CPU measure fp32 GEMMs (--dtypes fp32): bf16 CPU kernels say nothing about GPUs")
    a = torch.randn(m, k, device=device, dtype=dtype)
    b = torch.randn(k, n, device=device, dtype=dtype)
    for _ in range(3):
        a @ b
    iters = case.get("iters", 20)
    host.synchronize(device)
    t0 = time.perf_counter()
    for _ in range(iters):
        a @ b
    host.synchronize(device)
    seconds = (time.perf_counter() - t0) / iters
    tflops = 2 * m * n * k / seconds / 1e12
    hw = host.hardware(device, g)
    peak = host.peak_tflops(hw, "bf16")
    metrics = {"m": m, "n": n, "k": k, "dtype": case["dtype"], "time_s": seconds, "tflops": tflops,
               "fraction_of_peak": tflops / peak if case["dtype"] in ("bf16", "fp16") or device.type == "cpu" else None}
    cluster = parse_hardware(hw)
    predicted = gemm_time(m, n, k, cluster.gpu, parse_profile(hw, cluster))
    return metrics, {"time_s": predicted, "tflops": 2 * m * n * k / predicted / 1e12}
