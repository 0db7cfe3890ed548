"""Sustained rate of one kernel on one GPU, back to back for SECONDS, per window of launches, to
compare a microbenchmark's short burst with a training run's sustained load (clocks and power come
from nvidia-smi, sampled beside it by h100.sh).

    python sustained.py SECONDS [gemm | attention]

- gemm: bf16 8192^3 products, 50 a window.
- attention: cuDNN's fused attention through scaled_dot_product_attention, forward and backward,
  causal, 32k tokens, 32 query heads of 128 (the chunk of a Llama 3 8B layer that long-context
  runs spend their time in), 2 a window. The published kernel tables it is compared with time
  short bursts (cudnn-frontend's SDPA benchmark of 2025 slept ten times a kernel's time after
  each launch; its current one times 10 launches), the GPU's first, cool seconds; a step of a
  long-context run never rests. FLOPs count the
  causal half of the square, forward 1 and backward 2.5 units, as calculators/time/attention.py.
"""
import sys
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


def gemm_window():
    n = 8192
    a = [torch.randn(n, n, device="cuda", dtype=torch.bfloat16) for _ in range(2)]
    b = [torch.randn(n, n, device="cuda", dtype=torch.bfloat16) for _ in range(2)]

    def run():
        for i in range(50):
            a[i % 2] @ b[i % 2]
        return 50 * 2 * n**3
    return run


def attention_window(seq: int = 32768, heads: int = 32, head_dim: int = 128):
    shape = (1, heads, seq, head_dim)
    q, k, v = (torch.randn(shape, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    grad = torch.randn(shape, device="cuda", dtype=torch.bfloat16)
    forward = 4 * seq * seq * heads * head_dim / 2          # causal: half the square

    def run():
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            for _ in range(2):
                out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                out.backward(grad)
        return 2 * 3.5 * forward
    return run


def main() -> None:
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 20
    kernel = sys.argv[2] if len(sys.argv) > 2 else "gemm"
    run = {"gemm": gemm_window, "attention": attention_window}[kernel]()
    t_end = time.time() + seconds
    windows = []
    while time.time() < t_end:
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        flops = run()
        e.record()
        e.synchronize()
        windows.append((time.time(), flops / (s.elapsed_time(e) / 1e3) / 1e12))
    t0 = windows[0][0]
    for t, r in windows:
        print(f"sustained {kernel} t={t - t0:6.2f}s {r:7.1f} TFLOP/s")


if __name__ == "__main__":
    main()
