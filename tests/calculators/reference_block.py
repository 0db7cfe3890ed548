"""A reference transformer layer in plain PyTorch, as one tensor-parallel rank runs it.

Used to check calculators/memory/activations.py and calculators/time/flops.py against what PyTorch itself
saves and computes. The rank-local shard has heads/tp, kv_heads/tp and ffn/tp; with sequence
parallelism its input holds tokens/tp and the two TP boundaries behave as Megatron's do:
- `ColumnParallel`: all-gather the sequence shard, multiply; save the *shard* for backward and
  all-gather again there (Megatron's LinearWithGradAccumulationAndAsyncCommunication);
- `RowParallel`: multiply, then reduce-scatter back to the shard; saves its input.
The collectives are emulated on one process (repeat for all-gather, a slice for reduce-scatter):
shapes and saved tensors are those of a real rank; values are not. Norms are fused (save input
and rstd), attention is PyTorch's SDPA (flash on CPU) or an explicit softmax core.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from calculators.specs.models import ModelSpec


class RMSNormFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, eps):
        rstd = torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps)
        ctx.save_for_backward(x, w, rstd)
        return (x.float() * rstd).to(x.dtype) * w

    @staticmethod
    def backward(ctx, g):
        x, w, rstd = ctx.saved_tensors
        xhat = x.float() * rstd
        gw = (g.float() * xhat).sum(dim=tuple(range(g.dim() - 1))).to(w.dtype)
        gx = g.float() * w.float()
        gx = rstd * (gx - xhat * (gx * xhat).mean(-1, keepdim=True))
        return gx.to(x.dtype), gw, None


class ColumnParallel(torch.autograd.Function):
    """(T/t, h) shard -> all-gather -> one output per weight, each (T, out). Saves the shard."""

    @staticmethod
    def forward(ctx, x, tp_sp, *weights):
        full = x.repeat(tp_sp, 1) if tp_sp > 1 else x
        ctx.tp_sp = tp_sp
        ctx.save_for_backward(x, *weights)
        return tuple(full @ w.t() for w in weights)

    @staticmethod
    def backward(ctx, *grads):
        x, *weights = ctx.saved_tensors
        full = x.repeat(ctx.tp_sp, 1) if ctx.tp_sp > 1 else x
        gx = sum(g @ w for g, w in zip(grads, weights))
        gx = gx[: x.shape[0]] if ctx.tp_sp > 1 else gx          # reduce-scatter back to the shard
        return (gx, None, *[g.t() @ full for g in grads])


class RowParallel(torch.autograd.Function):
    """(T, in) -> multiply -> reduce-scatter to (T/t, h). Saves its input (no copy)."""

    @staticmethod
    def forward(ctx, x, w, tp_sp, shape):
        ctx.tp_sp = tp_sp
        ctx.save_for_backward(x, w)
        y = x.reshape(shape) @ w.t()
        return y[: y.shape[0] // tp_sp] if tp_sp > 1 else y

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        g = g.repeat(ctx.tp_sp, 1) if ctx.tp_sp > 1 else g
        x2 = x.reshape(g.shape[0], -1)
        return (g @ w).reshape(x.shape), g.t() @ x2, None, None


def rope(x, cos, sin):                      # x: (b, heads, s, d)
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


class ReferenceLayer(nn.Module):
    def __init__(self, m: ModelSpec, tp: int = 1, sp: bool = False, moe: bool = False, flash: bool = True,
                 dtype=torch.bfloat16):
        super().__init__()
        self.m, self.tp, self.sp, self.moe, self.flash = m, tp, sp, moe, flash
        self.a, self.k, self.d = m.heads // tp, m.kv_heads // tp, m.head_dim
        h = m.hidden

        def p(*shape):
            return nn.Parameter(torch.empty(*shape, dtype=dtype))
        self.norm1, self.norm2 = p(h), p(h)
        self.wq, self.wk, self.wv = p(self.a * self.d, h), p(self.k * self.d, h), p(self.k * self.d, h)
        self.wo = p(h, self.a * self.d)
        if not moe:
            f = m.ffn // tp
            self.w_gate, self.w_up, self.w_down = p(f, h), p(f, h), p(h, f)
        else:
            e = m.moe
            self.router = p(e.experts, h)
            self.experts = nn.ParameterList(
                [p(e.expert_ffn, h) for _ in range(2 * e.experts)] + [p(h, e.expert_ffn) for _ in range(e.experts)])

    def forward(self, x, cos, sin, mask=None):     # x: (T_local, h) with T = b * s tokens
        b, s = self.batch, self.seq
        t_sp = self.tp if self.sp else 1
        y = RMSNormFn.apply(x, self.norm1, 1e-5)
        q, k, v = ColumnParallel.apply(y, t_sp, self.wq, self.wk, self.wv)   # (T, a*d), (T, k*d) x2
        q = rope(q.view(b, s, self.a, self.d).transpose(1, 2), cos, sin)     # (b, a, s, d)
        k = rope(k.view(b, s, self.k, self.d).transpose(1, 2), cos, sin)
        v = v.view(b, s, self.k, self.d).transpose(1, 2)
        if self.flash:
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        else:
            rep = self.a // self.k
            k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
            scores = (q @ k.transpose(-1, -2)) * (1 / math.sqrt(self.d))     # (b, a, s, s)
            o = torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1) @ v
        x = x + RowParallel.apply(o.transpose(1, 2), self.wo, t_sp, (b * s, self.a * self.d))
        y = RMSNormFn.apply(x, self.norm2, 1e-5)
        return x + (self.moe_mlp(y, t_sp) if self.moe else self.mlp(y, t_sp))

    def mlp(self, y, t_sp):
        g, u = ColumnParallel.apply(y, t_sp, self.w_gate, self.w_up)         # (T, f/t) each
        return RowParallel.apply(F.silu(g) * u, self.w_down, t_sp, (g.shape[0], g.shape[1]))

    def moe_mlp(self, y, t_sp):
        """Dropless token choice with balanced routing (static shapes): permute, experts, combine."""
        e = self.m.moe
        T = y.shape[0]
        probs = torch.softmax(F.linear(y, self.router).float(), dim=-1)       # (T, E) fp32
        top, idx = probs.topk(e.top_k, dim=-1)                                 # (T, K)
        weights = (top / top.sum(-1, keepdim=True)).to(y.dtype)
        order = idx.flatten().argsort()                                        # (T*K,) grouped by expert
        src = order // e.top_k                                                 # token of each slot
        xs = y[src]                                                            # (T*K, h) dispatched
        outs = []
        for j, chunk in enumerate(xs.chunk(e.experts)):
            g = chunk @ self.experts[j].t()
            u = chunk @ self.experts[e.experts + j].t()
            outs.append((F.silu(g) * u) @ self.experts[2 * e.experts + j].t())
        ys = torch.cat(outs)[order.argsort()]                                  # back to (token, k) order
        return (ys.view(T, e.top_k, -1) * weights.unsqueeze(-1)).sum(1)


def saved_activation_bytes(layer: ReferenceLayer, batch: int, seq: int) -> int:
    """Bytes of every distinct storage autograd saves in one forward, parameters and constants excluded."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode(allow_non_fake_inputs=True):
        tokens = batch * seq // (layer.tp if layer.sp else 1)
        layer.batch, layer.seq = batch, seq
        cos = torch.randn(seq, layer.d, dtype=torch.bfloat16)
        sin = torch.randn(seq, layer.d, dtype=torch.bfloat16)
        mask = torch.ones(seq, seq, dtype=torch.bool).triu(1)
        excluded = {t.untyped_storage()._cdata for t in (cos, sin, mask)}
        x = torch.randn(tokens, layer.m.hidden, dtype=torch.bfloat16, requires_grad=True)
        fake_params = {n: torch.empty(p.shape, dtype=p.dtype, requires_grad=True)
                       for n, p in layer.named_parameters()}
        excluded |= {t.untyped_storage()._cdata for t in fake_params.values()}
        seen: dict[int, int] = {}

        def pack(t):
            key = t.untyped_storage()._cdata
            if key not in excluded:
                seen[key] = t.untyped_storage().nbytes()
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            torch.func.functional_call(layer, fake_params, (x, cos, sin, mask))
        return sum(seen.values())
