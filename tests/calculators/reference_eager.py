"""Two eager PyTorch blocks as the PyTorch-native stacks write them, and two ways of asking
PyTorch what they cost: the element-wise bytes each op moves, and the bytes kept for backward.

- `TitanBlock`: torchtitan's Llama block (nn.RMSNorm, complex RoPE in fp32, SDPA, separate wq,
  wk, wv, and w2(silu(w1 x) * w3 x)); `TitanBlockCuda` the same with its norms keeping what the
  fused CUDA kernel keeps (what a GPU runs; a CPU runs nn.RMSNorm's composite form).
- `HFBlock`: the Hugging Face Llama block DeepSpeed trains (LlamaRMSNorm upcasting to fp32,
  rotate_half RoPE in bf16, SDPA, down(silu(gate x) * up x)).
- `elementwise_bytes` runs a forward and a backward on fake tensors under a TorchDispatchMode and
  sums, over every op that is not a matmul, attention or a view, the bytes of its inputs and
  outputs: what each kernel reads and writes in eager mode.
- `kept_bytes` runs a forward on real (small, CPU) tensors, with or without torchtitan's op-level
  selective activation checkpointing policy, and sums the storages still alive after it: what
  autograd and the checkpoint keep for backward.
"""
from __future__ import annotations

import gc
import math
import weakref

import torch
import torch.nn.functional as F
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

from tests.calculators.reference_kernels import LigerRMSNorm, LigerSiLUMul, TiledMLP

aten = torch.ops.aten
_VIEWS = {"aten::_unsafe_view", "aten::alias", "aten::expand", "aten::permute", "aten::transpose", "aten::t",
          "aten::unsqueeze", "aten::squeeze", "aten::reshape", "aten::_reshape_alias", "aten::view_as_complex",
          "aten::view_as_real", "aten::slice", "aten::select", "aten::detach"}
_FREE = {"aten::empty", "aten::empty_like", "aten::zeros", "aten::ones_like", "aten::new_empty_strided",
         "aten::empty_strided", "aten::zeros_like"}
_MATMUL = {"aten::mm", "aten::addmm", "aten::bmm"}


def _region(block, name, fn, *args):
    """fn(*args), checkpointed when `name` is one of the block's recompute regions. A region that
    ends with the linears reading its output keeps only its inputs: what Megatron's output-
    discarding recompute of a norm or an activation keeps (the linears' outputs are the region's
    own, so they are kept as before)."""
    return checkpoint(fn, *args, use_reentrant=False) if name in block.regions else fn(*args)


def _fan(y, *linears):
    return tuple(linear(y) for linear in linears)


def _mlp(block, h, norm, gate, up, down):
    """The SwiGLU MLP after its norm, with the regions layernorm (the norm with gate and up), act
    (silu(gate) * up with down) and mlp (everything after the norm); or tiled (TiledMLP, in
    ceil(seq / hidden) tiles, as ArcticTraining calls DeepSpeed's); with liger, Liger's SwiGLU."""
    def act(g, u):
        return down(LigerSiLUMul.apply(g, u) if "liger" in block.regions else F.silu(g) * u)
    if "tiled" in block.regions:
        def tile(y):                   # functional: module hooks (FlopCounterMode's) see no tile
            return F.linear(F.silu(F.linear(y, gate.weight)) * F.linear(y, up.weight), down.weight)
        return TiledMLP.apply(tile, norm(h), math.ceil(h.shape[-2] / h.shape[-1]))
    if "layernorm" in block.regions:
        return act(*_region(block, "layernorm", lambda h: _fan(norm(h), gate, up), h))
    return _region(block, "mlp", lambda y: _region(block, "act", act, gate(y), up(y)), norm(h))


class TitanBlock(nn.Module):
    def __init__(self, h, heads, kv_heads, ffn, head_dim=None):
        super().__init__()
        d = head_dim or h // heads
        self.a, self.k, self.d = heads, kv_heads, d
        self.attention_norm, self.ffn_norm = nn.RMSNorm(h, eps=1e-5), nn.RMSNorm(h, eps=1e-5)
        self.wq, self.wk = nn.Linear(h, heads * d, bias=False), nn.Linear(h, kv_heads * d, bias=False)
        self.wv, self.wo = nn.Linear(h, kv_heads * d, bias=False), nn.Linear(heads * d, h, bias=False)
        self.w1, self.w3, self.w2 = (nn.Linear(h, ffn, bias=False), nn.Linear(h, ffn, bias=False),
                                     nn.Linear(ffn, h, bias=False))

    def rope(self, x, cis):                            # x: (b, s, heads, d); cis: (s, 1, d/2) complex64
        x_ = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
        return torch.view_as_real(x_ * cis).flatten(3).type_as(x)

    regions: tuple = ()                                # recompute regions (see _region)

    def forward(self, x, cis):
        b, s, _ = x.shape
        q, k, v = _region(self, "layernorm", lambda x: _fan(self.attention_norm(x), self.wq, self.wk, self.wv), x)
        q = self.rope(q.view(b, s, self.a, self.d), cis)
        k = self.rope(k.view(b, s, self.k, self.d), cis)
        v = v.view(b, s, self.k, self.d)
        o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True,
                                           enable_gqa=True)
        h = x + self.wo(o.transpose(1, 2).reshape(b, s, -1))
        return h + _mlp(self, h, self.ffn_norm, self.w1, self.w3, self.w2)

    def tables(self, s):
        return torch.randn(s, 1, self.d // 2, dtype=torch.complex64)


class _FusedRMSNormKeeps(torch.autograd.Function):
    """RMSNorm keeping what PyTorch's fused CUDA kernel keeps (FusedRmsNormBackward0: the input and
    the per-row rstd, measured on an H100 with PyTorch 2.11, validation/data/h100_harness/
    saved_bytes_*.json). On a CPU nn.RMSNorm runs the composite form, which keeps more."""

    @staticmethod
    def forward(ctx, x, weight, eps):
        rstd = torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps)
        ctx.save_for_backward(x, weight, rstd)
        return (x.float() * rstd).type_as(x) * weight

    @staticmethod
    def backward(ctx, grad):                       # not run by the tests: they count what is kept
        x, weight, rstd = ctx.saved_tensors
        xf, g = x.float(), grad.float() * weight.float()
        xhat = xf * rstd
        dx = rstd * (g - xhat * (g * xhat).mean(-1, keepdim=True))
        return dx.type_as(x), (grad.float() * xhat).sum(tuple(range(grad.dim() - 1))).type_as(weight), None


class CudaRMSNorm(nn.RMSNorm):
    def forward(self, x):
        return _FusedRMSNormKeeps.apply(x, self.weight, self.eps)


class TitanBlockCuda(TitanBlock):
    """torchtitan's block as it runs on a GPU: nn.RMSNorm dispatches to the fused kernel there."""

    def __init__(self, h, heads, kv_heads, ffn, head_dim=None):
        super().__init__(h, heads, kv_heads, ffn, head_dim)
        self.attention_norm, self.ffn_norm = CudaRMSNorm(h, eps=1e-5), CudaRMSNorm(h, eps=1e-5)


class CompositeRMSNorm(nn.RMSNorm):
    """nn.RMSNorm as PyTorch 2.4 to 2.7 ran it on a GPU (and every version on a CPU): ATen's
    composite rms_norm, op by op (upcast, pow, mean, add eps, rsqrt, multiply, weight, downcast)."""

    def forward(self, x):
        xf = x.to(torch.float32)
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight).type_as(x)


class TitanBlockComposite(TitanBlock):
    """torchtitan's block with the norms PyTorch 2.7 and earlier ran: what EAGER["fsdp2"] counts, on
    any device (on 2.8 and later a GPU's nn.RMSNorm is one fused kernel)."""

    def __init__(self, h, heads, kv_heads, ffn, head_dim=None):
        super().__init__(h, heads, kv_heads, ffn, head_dim)
        self.attention_norm, self.ffn_norm = CompositeRMSNorm(h, eps=1e-5), CompositeRMSNorm(h, eps=1e-5)


@torch.library.custom_op("reference::fused_rms_norm", mutates_args=())
def _fused_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """PyTorch 2.8's fused RMSNorm as one op: reads x and the weight, writes y and the fp32 rstd."""
    xf = x.float()
    rstd = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return (xf * rstd * weight).to(x.dtype), rstd


@_fused_rms_norm.register_fake
def _(x, weight, eps):
    return torch.empty_like(x), x.new_empty((*x.shape[:-1], 1), dtype=torch.float32)


@torch.library.custom_op("reference::fused_rms_norm_grad_input", mutates_args=())
def _norm_grad_input(dy: torch.Tensor, x: torch.Tensor, rstd: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    xhat, g = x.float() * rstd, dy.float() * weight.float()
    return (rstd * (g - xhat * (g * xhat).mean(-1, keepdim=True))).to(x.dtype)


@_norm_grad_input.register_fake
def _(dy, x, rstd, weight):
    return torch.empty_like(x)


@torch.library.custom_op("reference::fused_rms_norm_grad_weight", mutates_args=())
def _norm_grad_weight(dy: torch.Tensor, x: torch.Tensor, rstd: torch.Tensor) -> torch.Tensor:
    return (dy.float() * x.float() * rstd).sum(tuple(range(dy.dim() - 1))).to(dy.dtype)


@_norm_grad_weight.register_fake
def _(dy, x, rstd):
    return dy.new_empty(dy.shape[-1:])


def _fused_norm_setup(ctx, inputs, output):
    x, weight, _ = inputs
    ctx.save_for_backward(x, output[1], weight)


def _fused_norm_backward(ctx, dy, _drstd):
    x, rstd, weight = ctx.saved_tensors
    return _norm_grad_input(dy, x, rstd, weight), _norm_grad_weight(dy, x, rstd), None


_fused_rms_norm.register_autograd(_fused_norm_backward, setup_context=_fused_norm_setup)


class FusedRMSNorm(nn.RMSNorm):
    """nn.RMSNorm as a GPU runs it since PyTorch 2.8 (pytorch pull request 153666), as the ops its
    kernels are, for a trace on any device: one forward kernel (vectorized_layer_norm_kernel),
    two backward (layer_norm_grad_input_kernel, GammaBetaBackward), each reading and writing its
    tensors once (the kernels' names from our H200's profile, call 22)."""

    def forward(self, x):
        return _fused_rms_norm(x, self.weight, self.eps)[0]


class TitanBlockFusedNorm(TitanBlock):
    """torchtitan's block on PyTorch 2.8 and later: its norms are FusedRMSNorm's kernels."""

    def __init__(self, h, heads, kv_heads, ffn, head_dim=None):
        super().__init__(h, heads, kv_heads, ffn, head_dim)
        self.attention_norm, self.ffn_norm = FusedRMSNorm(h, eps=1e-5), FusedRMSNorm(h, eps=1e-5)


class _HFNorm(nn.Module):
    def __init__(self, h):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(h)), 1e-5

    def forward(self, x):
        dtype = x.dtype
        x = x.to(torch.float32)
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


def _rotate_half(x):
    return torch.cat((-x[..., x.shape[-1] // 2:], x[..., : x.shape[-1] // 2]), dim=-1)


class HFBlock(nn.Module):
    def __init__(self, h, heads, kv_heads, ffn, head_dim=None):
        super().__init__()
        d = head_dim or h // heads
        self.a, self.k, self.d = heads, kv_heads, d
        self.input_layernorm, self.post_attention_layernorm = _HFNorm(h), _HFNorm(h)
        self.q_proj, self.k_proj = nn.Linear(h, heads * d, bias=False), nn.Linear(h, kv_heads * d, bias=False)
        self.v_proj, self.o_proj = nn.Linear(h, kv_heads * d, bias=False), nn.Linear(heads * d, h, bias=False)
        self.gate_proj, self.up_proj, self.down_proj = (nn.Linear(h, ffn, bias=False), nn.Linear(h, ffn, bias=False),
                                                        nn.Linear(ffn, h, bias=False))

    regions: tuple = ()                                # recompute regions (see _region)

    def forward(self, x, tables):
        cos, sin = tables
        b, s, _ = x.shape
        q, k, v = _region(self, "layernorm", lambda x: _fan(self.input_layernorm(x), self.q_proj, self.k_proj,
                                                            self.v_proj), x)
        q = q.view(b, s, self.a, self.d).transpose(1, 2)
        k = k.view(b, s, self.k, self.d).transpose(1, 2)
        v = v.view(b, s, self.k, self.d).transpose(1, 2)
        q, k = q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        h = x + self.o_proj(o.transpose(1, 2).contiguous().reshape(b, s, -1))
        return h + _mlp(self, h, self.post_attention_layernorm, self.gate_proj, self.up_proj, self.down_proj)

    def tables(self, s):
        return torch.randn(1, 1, s, self.d, dtype=torch.bfloat16), torch.randn(1, 1, s, self.d, dtype=torch.bfloat16)


class LigerHFBlock(HFBlock):
    """HFBlock as Liger-Kernel patches it (AutoLigerKernelForCausalLM): LigerRMSNorm and Liger's SwiGLU
    (reference_kernels). Liger's RoPE rotates q and k in place; the eager one here keeps the same
    tensors (its products keep cos and sin), so it stays."""

    def __init__(self, h, heads, kv_heads, ffn, head_dim=None):
        super().__init__(h, heads, kv_heads, ffn, head_dim)
        self.input_layernorm, self.post_attention_layernorm = LigerRMSNorm(h), LigerRMSNorm(h)
        self.regions = ("liger",)


class _Bytes(TorchDispatchMode):
    """Bytes read and written, and kernels, by every op that is not a matmul, attention or a view."""

    def __init__(self):
        super().__init__()
        self.bytes, self.kernels = 0, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = func._schema.name
        if name in _VIEWS or name in _FREE or name in _MATMUL or "attention" in name or name.startswith("prim::") \
                or func.is_view:
            return out
        leaves = torch.utils._pytree.tree_leaves((args, kwargs, out))
        self.bytes += sum(t.numel() * t.element_size() for t in leaves if isinstance(t, torch.Tensor))
        self.kernels += 1
        return out


def elementwise_bytes(block_cls, h, heads, kv_heads, ffn, head_dim, batch, seq) -> dict:
    """{"forward"/"backward": (bytes, kernels)} of one block's non-matmul ops, from PyTorch itself."""
    with torch.device("meta"):
        block = block_cls(h, heads, kv_heads, ffn, head_dim).to(torch.bfloat16)
    out = {}
    with FakeTensorMode(allow_non_fake_inputs=True):
        params = {n: torch.empty(p.shape, dtype=torch.bfloat16, requires_grad=True) for n, p in block.named_parameters()}
        x = torch.randn(batch, seq, h, dtype=torch.bfloat16, requires_grad=True)
        tables = block.tables(seq)
        with _Bytes() as fwd:
            y = torch.func.functional_call(block, params, (x, tables))
        with _Bytes() as bwd:
            y.backward(torch.ones_like(y))
    out["forward"], out["backward"] = (fwd.bytes, fwd.kernels), (bwd.bytes, bwd.kernels)
    return out


def torchtitan_op_sac_policy(save_attention: bool = True):
    """torchtitan's SelectiveAC (mode op) policy: must-save the outputs of compute-intensive ops
    (mm, SDPA) except every second mm of the block, recompute everything else. Without
    `save_attention` no SDPA kernel is saved, as when the one that runs is missing from the list."""
    from torch._functorch.partitioners import get_default_op_list
    save = {op.default for op in get_default_op_list().compute_intensive_ops}
    save.add(aten._scaled_dot_product_flash_attention_for_cpu.default)   # on CPU, what stands for the CUDA flash op
    if not save_attention:
        save = {op for op in save if "scaled_dot_product" not in str(op)}
    mm = (aten.mm.default, aten.linear.default)

    def context():
        count = {"forward": 0, "recompute": 0}

        def policy(ctx, func, *args, **kwargs):
            mode = "recompute" if ctx.is_recompute else "forward"
            if func in mm:
                count[mode] += 1
            if func in save and not (func in mm and count[mode] % 2 == 0):
                return CheckpointPolicy.MUST_SAVE
            return CheckpointPolicy.PREFER_RECOMPUTE
        return create_selective_checkpoint_contexts(policy)
    return context


class _Alive(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.refs = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in torch.utils._pytree.tree_leaves(out):
            if isinstance(t, torch.Tensor):
                self.refs.append((weakref.ref(t.untyped_storage()), t.untyped_storage().nbytes()))
        return out


REGIONS = ("layernorm", "act", "mlp")


def kept_bytes(block_cls, h, heads, kv_heads, ffn, head_dim, batch, seq, policy: str = "none") -> int:
    """Bytes of the storages created in one forward that are still alive after it (the output's
    own excluded): what backward keeps, under `policy` none, op_sac (torchtitan's), op_sac+core_attn
    (the same with no attention kernel saved), full, or one of
    REGIONS checkpointed inside the block (Megatron's recompute modules layernorm, moe_act on the
    same SwiGLU, mlp)."""
    torch.manual_seed(0)
    block = block_cls(h, heads, kv_heads, ffn, head_dim).to(torch.bfloat16)
    if policy in REGIONS:
        block.regions, policy = (policy,), "none"

    x = torch.randn(batch, seq, h, dtype=torch.bfloat16, requires_grad=True)
    tables = block.tables(seq)
    existing = {t.untyped_storage().data_ptr() for t in [x, *block.parameters(),
                                                          *torch.utils._pytree.tree_leaves(tables)]}
    alive = _Alive()
    with alive:
        if policy == "none":
            y = block(x, tables)
        else:
            context = torchtitan_op_sac_policy(policy == "op_sac") if policy.startswith("op_sac") else None
            kwargs = {"context_fn": context} if context else {}
            y = checkpoint(block, x, tables, use_reentrant=False, **kwargs)
    out_storage = y.untyped_storage()
    gc.collect()
    seen, total = set(existing), 0
    for ref, nbytes in alive.refs:
        storage = ref()
        if storage is None or storage is out_storage or storage.data_ptr() in seen:
            continue
        seen.add(storage.data_ptr())
        total += nbytes
    return total
