"""CUDA-event timing, and torch.profiler's kernel times, shared by the session scripts in this
folder (imported by name: each script runs with this folder first on its path)."""
import statistics

import torch


def timed(fn, target_ms=25.0, reps=5):
    """(median seconds of one fn() call, the batches' spread over the median): after a warm-up, a
    call sizes batches of back-to-back calls to about `target_ms`, and `reps` batches are timed."""
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    torch.cuda.synchronize()
    n = max(1, min(200, int(target_ms / max(start.elapsed_time(end), 1e-3))))
    times = []
    for _ in range(reps):
        start.record()
        for _ in range(n):
            fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / n)
    return statistics.median(times) / 1e3, (max(times) - min(times)) / statistics.median(times)


def kernel_times(fn, runs=5, width=100):
    """{kernel name (its first `width` characters): GPU seconds per run} of fn, from torch.profiler,
    after one call to warm up."""
    from torch.profiler import ProfilerActivity, profile
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(runs):
            fn()
        torch.cuda.synchronize()
    out = {}
    for e in prof.key_averages():
        t = getattr(e, "self_device_time_total", None) or getattr(e, "self_cuda_time_total", 0)
        if t > 0:
            out[e.key[:width]] = out.get(e.key[:width], 0.0) + t / 1e6 / runs
    return out
