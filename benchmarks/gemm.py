"""The gemm suite: TFLOP/s of (M x K) @ (K x N) per shape and dtype, against the dense peak and
the calculators' GEMM model (compute.gemm_time), on one device.

Shapes are given as MxNxK, or drawn from models (`model_shapes`): the projections a layer runs,
fused as the framework runs them (q, k and v as one GEMM; gate and up as one), each TP rank's
shard, for M tokens. fp8 runs `torch._scaled_mm` (e4m3 operands, per-tensor scales, bf16 out),
the kernel torchao's float8 training calls, on GPUs that have it (Hopper and later).

Timing (on a GPU): CUDA events around each product, after warm-up, the median of the repeats;
operands rotate among enough copies that they exceed the L2 (a 50 MB L2 would otherwise serve
small operands from cache, which training does not).
"""
from __future__ import annotations

import statistics
import time

import torch

from calculators.specs.errors import ConfigError
from calculators.specs.frameworks import fused_matmuls
from calculators.specs.presets import model_from_name

from . import host, predict

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32, "fp8": torch.float8_e4m3fn}
L2_BYTES = 64 * 2**20          # at least the largest L2 of the GPUs we run (H100 50 MB, H200 60 MB)


def whole_numbers(text: str, what: str, largest: int = 1 << 24) -> list[int]:
    """'1,2,4' -> [1, 2, 4]; anything but whole numbers from 1 to `largest` is a ConfigError naming `what`."""
    out = []
    for item in str(text).split(","):
        try:
            n = int(float(item))
        except ValueError:
            n = 0
        if not 1 <= n <= largest or float(item) != n:
            raise ConfigError(f"{what} must be whole numbers from 1 to {largest:,}, comma-separated (got {item.strip()!r})")
        out.append(n)
    return out


def model_shapes(models: str, tps: str, tokens: int, framework: str = "megatron") -> list[tuple[str, int, int, int]]:
    """(label, M, N, K) of each fused dense projection of each model at each TP size: the
    column-parallel ones split N, the row-parallel ones split K."""
    out = []
    whole_numbers(str(tokens), "--tokens")
    for name in models.split(","):
        spec = model_from_name(name)
        for tp in whole_numbers(tps, "--tps", 1024):
            for mm in fused_matmuls(spec.layer_matmuls(False), framework):
                n, k = mm.fan_out, mm.fan_in
                if mm.tp == "col":
                    n //= tp
                elif mm.tp == "row":
                    k //= tp
                out.append((f"{name} tp{tp} {mm.name}", tokens, n, k))
    return out


def cases(shapes: str, dtypes, iters: int, models: str = "", tps: str = "1", tokens: int = 8192) -> list[dict]:
    out = []
    for dt in dtypes:
        if dt not in DTYPES:
            raise ConfigError(f"dtype {dt!r} must be one of {', '.join(DTYPES)}")
    parsed = []
    for shape in (s for s in shapes.split(",") if s.strip()):
        try:
            m, n, k = (int(x) for x in shape.lower().split("x"))
        except ValueError:
            raise ConfigError(f"shape {shape!r} must be MxNxK, e.g. 8192x8192x8192") from None
        parsed.append(("", m, n, k))
    if models:
        parsed += model_shapes(models, tps, tokens)
    for label, m, n, k in parsed:
        for dt in dtypes:
            case = {"m": m, "n": n, "k": k, "dtype": dt, "iters": iters}
            if label:
                case["name"] = label
            out.append(case)
    return out


def _product(a, b, dtype):
    if dtype is torch.float8_e4m3fn:
        one = torch.ones((), device=a[0].device)
        return lambda i: torch._scaled_mm(a[i], b[i], scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    return lambda i: a[i] @ b[i]


def _operands(m, n, k, dtype, device):
    """Enough (a, b) copies that cycling through them exceeds the L2. b is column-major, as
    _scaled_mm requires (for bf16 the same layout as nn.Linear's x @ W.T)."""
    size = (m * k + k * n) * torch.empty((), dtype=dtype).element_size()
    copies = 1 if device.type == "cpu" else max(1, min(8, -(-2 * L2_BYTES // size)))
    make = torch.float32 if dtype is torch.float8_e4m3fn else dtype
    a = [torch.randn(m, k, device=device, dtype=make).to(dtype) for _ in range(copies)]
    b = [torch.randn(n, k, device=device, dtype=make).to(dtype).t() for _ in range(copies)]
    return a, b


def time_fn(fn, copies: int, iters: int, device: torch.device) -> float:
    """Median seconds of one fn(i) call: `iters` timed batches after 3 warm-ups (CUDA events on a
    GPU). A batch queues enough calls back to back to last about a millisecond, so that a short
    kernel is timed as the GPU runs it, not as fast as the host can launch it."""
    for i in range(3):
        fn(i % copies)
    if device.type != "cuda":
        t0 = time.perf_counter()
        for i in range(iters):
            fn(i % copies)
        return (time.perf_counter() - t0) / iters
    torch.cuda.synchronize(device)
    t0 = time.perf_counter()
    fn(0)
    torch.cuda.synchronize(device)
    batch = max(1, min(100, int(1e-3 / max(time.perf_counter() - t0, 1e-6))))
    times = []
    for i in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for j in range(batch):
            fn((i * batch + j) % copies)
        end.record()
        times.append((start, end))
    torch.cuda.synchronize(device)
    return statistics.median(s.elapsed_time(e) for s, e in times) / 1e3 / batch


def measure(case: dict, g: host.Grid, device: torch.device) -> tuple[dict, dict]:
    m, n, k, dtype = case["m"], case["n"], case["k"], DTYPES[case["dtype"]]
    if device.type == "cpu" and dtype != torch.float32:
        raise ConfigError("on CPU measure fp32 GEMMs (--dtypes fp32): bf16 CPU kernels say nothing about GPUs")
    fp8 = case["dtype"] == "fp8"
    if fp8 and torch.cuda.get_device_capability(device) < (8, 9):
        raise ConfigError("fp8 GEMMs need compute capability 8.9 or later (Ada, Hopper, Blackwell)")
    a, b = _operands(m, n, k, dtype, device)
    seconds = time_fn(_product(a, b, dtype), len(a), case.get("iters", 20), device)
    tflops = 2 * m * n * k / seconds / 1e12
    hw = host.hardware(device, g)
    peak = host.peak_tflops(hw, "fp8" if fp8 else "bf16")
    metrics = {"m": m, "n": n, "k": k, "dtype": case["dtype"], "time_s": seconds, "tflops": tflops,
               "fraction_of_peak": tflops / peak if case["dtype"] != "fp32" or device.type == "cpu" else None}
    return metrics, predict.gemm(m, n, k, case["dtype"], hw)
