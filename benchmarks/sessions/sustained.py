"""Sustained bf16 GEMM rate on one GPU: 8192^3 products back to back for SECONDS, the rate per
window of 50 products, to compare a microbenchmark's short burst with a training run's
sustained load (clocks and power come from nvidia-smi, sampled beside it by h100.sh)."""
import sys
import time

import torch

seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 20
n = 8192
a = [torch.randn(n, n, device="cuda", dtype=torch.bfloat16) for _ in range(2)]
b = [torch.randn(n, n, device="cuda", dtype=torch.bfloat16) for _ in range(2)]
t_end = time.time() + seconds
windows = []
while time.time() < t_end:
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for i in range(50):
        a[i % 2] @ b[i % 2]
    e.record()
    e.synchronize()
    windows.append((time.time(), 50 * 2 * n**3 / (s.elapsed_time(e) / 1e3) / 1e12))
t0 = windows[0][0]
for t, r in windows:
    print(f"sustained t={t - t0:6.2f}s {r:7.1f} TFLOP/s")
