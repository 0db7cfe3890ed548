"""The attention suite: forward and backward time of PyTorch's `scaled_dot_product_attention` by
kernel (flash: PyTorch's FlashAttention-2; cudnn: cuDNN's fused attention; efficient; math),
sequence length, head dim, GQA ratio and causal masking, against calculators.time.attention's rates.

The default cases follow the FlashAttention papers' setup, so that our rows sit beside the
published figures the calculators use: batch x sequence = 16k tokens (batch 1 past 16k), hidden
2048 (heads = 2048 / head dim), bf16. FLOPs: 4 * B * heads * S^2 * head_dim for the forward,
halved with the causal mask (the calculators' convention, flops.py), 2.5 times that for the
backward (the backward recomputes the scores).

A GQA case runs with `enable_gqa=True` when the kernel takes it; otherwise with k and v expanded
to every query head (`gqa_mode: "expanded"`), which is what a model without native GQA support
does and costs the same attention FLOPs.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from calculators.specs.errors import ConfigError

from . import host, predict
from .gemm import time_fn, whole_numbers

BACKENDS = ("flash", "cudnn", "efficient", "math")
TOKENS = 16384
HIDDEN = 2048


def cases(seqs: str, head_dims: str, gqa: str, backends: str, causal: str = "true", iters: int = 10) -> list[dict]:
    out = []
    for backend in backends.split(","):
        if backend not in BACKENDS:
            raise ConfigError(f"backend {backend!r} must be one of {', '.join(BACKENDS)}")
    for seq in whole_numbers(seqs, "--seqs", 1 << 20):
        for head_dim in whole_numbers(head_dims, "--head-dims", HIDDEN):
            for ratio in whole_numbers(gqa, "--gqa", HIDDEN):
                for c in causal.split(","):
                    for backend in backends.split(","):
                        heads = HIDDEN // head_dim
                        if heads % ratio:
                            raise ConfigError(f"gqa {ratio} must divide the {heads} heads of head dim {head_dim}")
                        out.append({"backend": backend, "seq": seq, "head_dim": head_dim, "heads": heads,
                                    "kv_heads": heads // ratio, "batch": max(1, TOKENS // seq),
                                    "causal": c.strip().lower() in ("1", "true", "yes"), "iters": iters})
    return out


def _kernel(backend: str):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    return sdpa_kernel({"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
                        "efficient": SDPBackend.EFFICIENT_ATTENTION, "math": SDPBackend.MATH}[backend])


def _attention(q, k, v, case, native_gqa: bool):
    if not native_gqa and k.shape[1] != q.shape[1]:
        rep = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
    return F.scaled_dot_product_attention(q, k, v, is_causal=case["causal"], enable_gqa=native_gqa and
                                          k.shape[1] != q.shape[1])


def measure(case: dict, g: host.Grid, device: torch.device) -> tuple[dict, dict]:
    if device.type != "cuda":
        raise ConfigError("the attention suite times GPU kernels: run it on a GPU")
    B, H, Hkv, S, D = case["batch"], case["heads"], case["kv_heads"], case["seq"], case["head_dim"]
    q = torch.randn(B, H, S, D, device=device, dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn(B, Hkv, S, D, device=device, dtype=torch.bfloat16, requires_grad=True)
    v = torch.randn(B, Hkv, S, D, device=device, dtype=torch.bfloat16, requires_grad=True)
    grad = torch.randn(B, H, S, D, device=device, dtype=torch.bfloat16)
    mode = "native" if Hkv != H else "mha"
    with _kernel(case["backend"]):
        try:
            _attention(q, k, v, case, True)
        except RuntimeError:
            if Hkv == H:
                raise
            mode = "expanded"

        def forward(_):
            with torch.no_grad():
                _attention(q, k, v, case, mode == "native")

        def both(_):
            out = _attention(q, k, v, case, mode == "native")
            torch.autograd.grad(out, (q, k, v), grad)

        iters = case.get("iters", 10)
        fwd = time_fn(forward, 1, iters, device)
        total = time_fn(both, 1, iters, device)
    f = predict.attention_flops(B, H, S, D, case["causal"])
    bwd = max(total - fwd, 1e-9)
    metrics = {"seq": S, "head_dim": D, "heads": H, "kv_heads": Hkv, "batch": B, "causal": case["causal"],
               "backend": case["backend"], "gqa_mode": mode, "forward_s": fwd, "backward_s": bwd,
               "forward_tflops": f / fwd / 1e12, "backward_tflops": 2.5 * f / bwd / 1e12}
    return metrics, predict.attention(metrics, host.gpu_preset(device))
