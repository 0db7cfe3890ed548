"""A Llama-style decoder built from a calculators ModelSpec; it knows nothing of parallelism.

GQA attention with RoPE through `scaled_dot_product_attention`, SwiGLU MLP, RMSNorm, untied or
tied embeddings, and an optional token-choice MoE MLP (a loop over experts: simple, not fast).
Layers sit in a ModuleDict keyed "0".."L-1" so a pipeline stage is the same model with the other
layers deleted, and every parameter's name is the same in every layout.

Weights are initialised per parameter from a generator seeded with (seed, parameter name), so a
stage, a TP shard or the whole model on one process all start from the same numbers: the
loss-equivalence tests depend on this.

Shapes: B micro-batch, T tokens, h hidden, nh heads, nkv kv heads, hd head dim, V vocab.
"""
from __future__ import annotations

import zlib

import torch
import torch.nn.functional as F
from torch import nn

from calculators.specs.errors import ConfigError
from calculators.specs.models import ModelSpec


def check_supported(spec: ModelSpec) -> None:
    problems = []
    if spec.mla is not None:
        problems.append("the harness model has no MLA attention; use a GQA model")
    if spec.mlp != "swiglu" or spec.norm != "rmsnorm" or spec.bias or spec.qkv_bias or spec.positions:
        problems.append("the harness model is Llama-style: swiglu MLP, rmsnorm, no biases, RoPE positions")
    if spec.moe is not None and (spec.moe.shared_experts or spec.moe.dense_layers or spec.moe.moe_every != 1):
        problems.append("the harness MoE layer has no shared experts, dense layers or moe_every != 1")
    if problems:
        raise ConfigError(problems)


def rope_table(seq: int, head_dim: int, theta: float = 500000.0) -> torch.Tensor:
    """(T, hd/2, 2): cos and sin of each position and frequency."""
    inv = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
    angles = torch.outer(torch.arange(seq, dtype=torch.float32), inv)            # (T, hd/2)
    return torch.stack([angles.cos(), angles.sin()], dim=-1)


def apply_rope(x: torch.Tensor, rope: torch.Tensor) -> torch.Tensor:
    """x: (B, T, n, hd); rope: (T, hd/2, 2). Rotates pairs (x[2i], x[2i+1])."""
    pairs = x.float().unflatten(-1, (-1, 2))                                     # (B, T, n, hd/2, 2)
    cos, sin = rope[None, :, None, :, 0], rope[None, :, None, :, 1]
    x0, x1 = pairs[..., 0], pairs[..., 1]
    out = torch.stack([x0 * cos - x1 * sin, x0 * sin + x1 * cos], dim=-1)
    return out.flatten(-2).type_as(x)


class CoreAttention(nn.Module):
    """softmax(QK^T)V, causal; its own module so "selective" recompute can wrap just this."""

    def forward(self, q, k, v):                                                   # (B, n, T, hd)
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)


class Attention(nn.Module):
    def __init__(self, spec: ModelSpec):
        super().__init__()
        hd = spec.head_dim
        self.head_dim = hd
        self.wq = nn.Linear(spec.hidden, spec.heads * hd, bias=False)
        self.wk = nn.Linear(spec.hidden, spec.kv_heads * hd, bias=False)
        self.wv = nn.Linear(spec.hidden, spec.kv_heads * hd, bias=False)
        self.wo = nn.Linear(spec.heads * hd, spec.hidden, bias=False)
        self.core = CoreAttention()

    def forward(self, x, rope):
        B, T, _ = x.shape
        # -1 heads: with tensor parallelism each rank holds nh/tp and nkv/tp of them
        q = self.wq(x).view(B, T, -1, self.head_dim)                             # (B, T, nh, hd)
        k = self.wk(x).view(B, T, -1, self.head_dim)                             # (B, T, nkv, hd)
        v = self.wv(x).view(B, T, -1, self.head_dim)
        q, k = apply_rope(q, rope), apply_rope(k, rope)
        y = self.core(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))   # (B, nh, T, hd)
        return self.wo(y.transpose(1, 2).reshape(B, T, -1))                      # (B, T, h)


class FeedForward(nn.Module):
    """SwiGLU: w2(silu(w1 x) * w3 x)."""

    def __init__(self, hidden: int, ffn: int):
        super().__init__()
        self.w1 = nn.Linear(hidden, ffn, bias=False)
        self.w3 = nn.Linear(hidden, ffn, bias=False)
        self.w2 = nn.Linear(ffn, hidden, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class MoE(nn.Module):
    """Token-choice top-k routing over E SwiGLU experts (dropless; loop over experts)."""

    def __init__(self, spec: ModelSpec):
        super().__init__()
        self.top_k = spec.moe.top_k
        self.router = nn.Linear(spec.hidden, spec.moe.experts, bias=False)
        self.experts = nn.ModuleList(FeedForward(spec.hidden, spec.moe.expert_ffn) for _ in range(spec.moe.experts))

    def forward(self, x):
        B, T, h = x.shape
        flat = x.reshape(-1, h)                                                   # (B*T, h)
        probs = self.router(flat).float().softmax(-1)                             # (B*T, E)
        weight, chosen = probs.topk(self.top_k, dim=-1)                           # (B*T, K)
        weight = (weight / weight.sum(-1, keepdim=True)).type_as(x)
        out = torch.zeros_like(flat)
        for e, expert in enumerate(self.experts):
            token, slot = torch.where(chosen == e)
            if token.numel():
                out.index_add_(0, token, expert(flat[token]) * weight[token, slot, None])
        return out.view(B, T, h)


class Block(nn.Module):
    def __init__(self, spec: ModelSpec):
        super().__init__()
        self.attention_norm = nn.RMSNorm(spec.hidden, eps=1e-5)
        self.attention = Attention(spec)
        self.ffn_norm = nn.RMSNorm(spec.hidden, eps=1e-5)
        self.feed_forward = MoE(spec) if spec.moe else FeedForward(spec.hidden, spec.ffn)

    def forward(self, x, rope):
        x = x + self.attention(self.attention_norm(x), rope)
        return x + self.feed_forward(self.ffn_norm(x))


class Transformer(nn.Module):
    """tokens (B, T) -> logits (B, T, V). A pipeline stage lacks some of the parts (None)."""

    def __init__(self, spec: ModelSpec, seq: int):
        super().__init__()
        check_supported(spec)
        self.spec = spec
        self.tok_embeddings = nn.Embedding(spec.vocab, spec.hidden)
        self.layers = nn.ModuleDict({str(i): Block(spec) for i in range(spec.layers)})
        self.norm = nn.RMSNorm(spec.hidden, eps=1e-5)
        self.output = nn.Linear(spec.hidden, spec.vocab, bias=False)
        if spec.tied_embeddings:
            self.output.weight = self.tok_embeddings.weight
        self.register_buffer("rope", rope_table(seq, spec.head_dim), persistent=False)

    def forward(self, h):
        # first stage: token ids in; other stages: hidden states from the previous stage
        if self.tok_embeddings is not None:
            h = self.tok_embeddings(h)                                            # (B, T, h)
        for layer in self.layers.values():
            h = layer(h, self.rope)
        if self.norm is not None:
            h = self.norm(h)
        if self.output is not None:
            h = self.output(h).float()                                            # (B, T, V) fp32 logits
        return h


WRAPPER_PREFIXES = ("_checkpoint_wrapped_module.", "_orig_mod.", "module.")


def canonical_name(name: str) -> str:
    """A parameter's name without the prefixes checkpointing, compile and DDP insert."""
    for prefix in WRAPPER_PREFIXES:
        name = name.replace(prefix, "")
    return name


def init_weights(model: nn.Module, seed: int = 0, std: float = 0.02) -> None:
    """Same numbers for the same parameter name whatever the layout.

    A sharded (DTensor) parameter gets its slice of the full tensor the one-process model would
    have: the full tensor is drawn one parameter at a time and each rank keeps its shard."""
    from torch.distributed.tensor import DTensor, distribute_tensor
    with torch.no_grad():
        for name, p in model.named_parameters():
            name = canonical_name(name)
            gen = torch.Generator(device=p.device).manual_seed(seed * 1_000_003 + zlib.crc32(name.encode()))
            full = torch.empty(p.shape, dtype=p.dtype, device=p.device)
            if name.endswith("norm.weight"):
                full.fill_(1.0)
            else:
                full.normal_(0.0, std, generator=gen)
            if isinstance(p, DTensor):
                p.to_local().copy_(distribute_tensor(full, p.device_mesh, p.placements, src_data_rank=None).to_local())
            else:
                p.copy_(full)


def loss_fn(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy over the micro-batch's tokens."""
    return F.cross_entropy(logits.flatten(0, 1), labels.flatten())
