"""Eager sequences that Megatron-Core runs outside its fused kernels for gpt-oss, written here from
the operations those paths perform (not copied). The calculators count their bytes from PyTorch's
own trace of these functions (tests/calculators/test_gpt_oss_torch.py) and a GPU session times the
same functions (benchmarks/sessions/gpt_oss_passes.py).

- glu_clamp: the clamp of the experts' GLU input, its gate half from above, its linear half on both
  sides, the two concatenated again (the clamp_value path, eager before the compiled activation).
- expert_bias: the experts' second bias, per local expert: its rows plus the bias times each row's
  routing probability, concatenated, in the probabilities' dtype and cast back to bf16 (TEGroupedMLP's
  unpacked bias path).
- unfused_rope: rotary embedding as Megatron applies it where Transformer Engine's fused kernel is
  not taken (a YaRN mscale other than 1, as gpt-oss's): cos and sin of the frequencies scaled by
  mscale in their dtype and cast to the input's, then t * cos + rotate_half(t) * sin, the rotated
  part concatenated with the rest of the head.
"""
from __future__ import annotations

import torch


def glu_clamp(x: torch.Tensor, limit: float = 7.0) -> torch.Tensor:
    gate, linear = x.chunk(2, -1)
    return torch.cat((gate.clamp(max=limit), linear.clamp(min=-limit, max=limit)), -1)


def expert_bias(rows: torch.Tensor, bias: torch.Tensor, probs: torch.Tensor, counts: list) -> torch.Tensor:
    parts = zip(torch.split(rows, counts), bias, torch.split(probs, counts))
    return torch.cat([r + b * p for r, b, p in parts]).to(torch.bfloat16)


def unfused_rope(t: torch.Tensor, freqs: torch.Tensor, mscale: float = 1.0) -> torch.Tensor:
    """t: (seq, batch, heads, head dim); freqs: (seq, 1, 1, rotary dim), fp32."""
    rot = freqs.shape[-1]
    t, rest = t[..., :rot], t[..., rot:]
    cos, sin = ((f(freqs) * mscale).to(t.dtype) for f in (torch.cos, torch.sin))
    first, second = t.chunk(2, -1)
    return torch.cat((t * cos + torch.cat((-second, first), -1) * sin, rest), -1)
