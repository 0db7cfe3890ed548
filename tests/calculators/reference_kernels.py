"""Autograd functions that keep and allocate what other stacks' kernels keep and allocate, for the
memory tests to trace in PyTorch on a CPU:

- `TiledMLP`: DeepSpeed's TiledMLP (deepspeed/runtime/sequence_parallel/ulysses_sp.py) as
  ArcticTraining calls it: forward without autograd tile by tile, keeping the input; backward each
  tile's forward again with autograd and its backward, its input gradient into one buffer.
- `LigerRMSNorm`, `LigerSiLUMul`: Liger-Kernel's LigerRMSNormFunction and LigerSiLUMulFunction
  (liger_kernel/ops/rms_norm.py, swiglu.py, 0.8.5). Their Triton kernels work row by row in
  registers; here each runs in blocks of rows, so that only a block's temporaries live beside
  what the kernel itself allocates. The norm keeps its input, its weight and an fp32 rstd a row,
  and its backward writes the input's gradient into the output's (in_place=True, its default);
  SwiGLU keeps gate and up and its backward writes their gradients into them.
"""
from __future__ import annotations

import torch
from torch import nn

ROWS = 256                        # rows a block of the reference computes at once


def _blocks(*tensors):
    """The tensors' views over blocks of ROWS rows (their last dimension kept)."""
    flat = [t.reshape(-1, t.shape[-1]) for t in tensors]
    return zip(*(f.split(ROWS) for f in flat))


class TiledMLP(torch.autograd.Function):
    @staticmethod
    def forward(ctx, fn, x, tiles):
        ctx.fn, ctx.tiles = fn, tiles
        ctx.save_for_backward(x)
        with torch.no_grad():
            return torch.cat([fn(part) for part in x.chunk(tiles, dim=-2)], dim=-2)

    @staticmethod
    def backward(ctx, grad):
        # as DeepSpeed's: the rows of (b * s, h) in tiles, each tile's .grad a view of one x_grad
        (x,) = ctx.saved_tensors
        shape = x.shape
        rows, grad = x.detach().view(-1, shape[-1]), grad.reshape(-1, shape[-1])
        x_grad = torch.zeros_like(rows)
        start = 0
        for part in rows.chunk(ctx.tiles, 0):
            n = part.shape[0]
            part.requires_grad_(True)
            part.grad = x_grad.narrow(0, start, n)
            with torch.enable_grad():
                torch.autograd.backward(ctx.fn(part), grad.narrow(0, start, n))   # weights' gradients in .grad
            start += n
        return None, x_grad.view(shape), None


class _RMSNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, eps):
        y = torch.empty_like(x)
        rstd = torch.empty(x.shape[:-1], dtype=torch.float32).reshape(-1, 1)
        for xb, yb, rb in _blocks(x, y, rstd):
            rb.copy_(torch.rsqrt(xb.float().pow(2).mean(-1, keepdim=True) + eps))
            yb.copy_((xb.float() * rb).to(x.dtype) * weight)
        ctx.save_for_backward(x, weight, rstd)
        return y

    @staticmethod
    def backward(ctx, dy):
        x, weight, rstd = ctx.saved_tensors
        dw = torch.zeros(weight.shape, dtype=torch.float32)
        for xb, db, rb in _blocks(x, dy, rstd):
            xhat = xb.float() * rb
            dxhat = db.float() * weight.float()
            dw += (db.float() * xhat).sum(0)
            db.copy_(rb * (dxhat - xhat * (dxhat * xhat).mean(-1, keepdim=True)))
        return dy, dw.to(weight.dtype), None


class LigerRMSNorm(nn.Module):
    def __init__(self, h):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(h)), 1e-5

    def forward(self, x):
        return _RMSNorm.apply(x, self.weight, self.eps)


class LigerSiLUMul(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b):
        c = torch.empty_like(a)
        for ab, bb, cb in _blocks(a, b, c):
            cb.copy_(torch.nn.functional.silu(ab.float()).to(a.dtype) * bb)
        ctx.save_for_backward(a, b)
        return c

    @staticmethod
    def backward(ctx, dc):
        a, b = ctx.saved_tensors
        for ab, bb, db in _blocks(a, b, dc):
            sig = torch.sigmoid(ab.float())
            silu = ab.float() * sig
            da = db.float() * bb.float() * (sig + silu * (1 - sig))
            bb.copy_(db.float() * silu)
            ab.copy_(da)
        return a, b
