"""What one layer's backward holds at its peak beyond what the layer kept for it, per micro-batch on
one GPU: the memory model's `working` term (estimate.py), beside the layers' saved activations.

- The bound every block takes unless it is traced: the layer's gradients as large as its saved
  set (`layer_activations(...).total`), which holds nanotron's measured peaks (validation/memory.py).
- Traced: the dense Llama block DeepSpeed trains, Hugging Face's eager modules (bf16 weights, its
  composite RMSNorm, SDPA, SwiGLU) and the same block with Liger-Kernel's norm and SwiGLU
  (elementwise fused). PyTorch runs its forward and backward (tests/calculators/reference_eager.py,
  reference_kernels.py; test_tiled_mlp.py) while every storage an op creates is counted as long as
  it lives, the weights' gradients apart (the gradients' own term). A backward peaks at its start,
  beside everything the layer kept, with the gradient from the layer above (2 h bytes a token) and
  the MLP's gradients: eagerly two T x ffn ones (the down projection's input and the activation's),
  under Liger one (its SwiGLU writes gate's and up's into them); or later, once the MLP's
  intermediates are freed: eagerly the post-attention norm's backward in fp32, 18 h bytes a token
  with the gradients beside it, under Liger (whose norm writes its gradient in place) attention's
  dq, dk and dv. So the eager block holds max(2 h + 4 ffn, 18 h - what its MLP kept) bytes a token,
  not the bound's whole saved set again: on Llama 3 8B's shape 16 h against 50 h.
- A tiled MLP (parallel.tiled_mlp, DeepSpeed's TiledMLP as ALST and ArcticTraining run it) keeps
  only its input and fills the T x h gradient of that input tile by tile, each tile running its
  forward again with autograd: one tile's intermediates and their gradients beside it
  (`tiled_mlp_transient`: the tile's gate, up, activation and product, 8 bytes per element of its
  tokens x ffn, and two of their gradients, 4 more; under Liger's norm that tile is the peak).
- Recompute adds what the recomputed layer re-makes beyond what it kept (`recomputed_extra`): under
  full recompute, what it keeps without recompute but its checkpointed input (the eager norm keeps
  an fp32 copy of its input, not the input: all of it there). Reentrant checkpointing (DeepSpeed's
  own, transformers 4's default) holds the block's output it ran again beside it until that
  backward ends, 2 bytes per element of T x h; transformers 5's non-reentrant checkpoint does not
  (traced): the reentrant count is taken, the larger.
"""
from __future__ import annotations

import math

from .activations import BF16, _ffn_bytes, layer_activations, liger, recomputed_extra, tokens
from ..specs.models import ModelSpec
from ..specs.parallel import ParallelConfig
from ..specs.recompute import policy

HF_NORM_BACKWARD = 18     # bytes per element of T x h at Hugging Face's RMSNorm's backward (traced; 17.99)
TILE_FFN = 12             # bytes per element of a tile's tokens x ffn at its backward's peak (traced)
REENTRANT = 2             # bytes per element of T x h reentrant checkpointing holds beside a re-made layer (traced)


def tiled_mlp_tile(model: ModelSpec, par: ParallelConfig) -> float:
    """Tokens in one tile of a tiled MLP: T split along the sequence into ceil(seq/cp / hidden)
    tiles, as ArcticTraining calls DeepSpeed's TiledMLP (num_shards = ceil(seqlen / hidden), the
    largest over the ranks), every sequence of the micro-batch in each."""
    local = par.seq / par.cp
    return par.mbs * math.ceil(local / math.ceil(local / model.hidden))


def tiled_mlp_transient(model: ModelSpec, par: ParallelConfig, moe_layer: bool) -> float:
    """Bytes a tiled MLP's backward holds beyond what the layer kept: the T x h gradient of its
    input, filled tile by tile, and one tile's eager SwiGLU (ArcticTraining leaves Liger's off under
    tiling) with its gradients, TILE_FFN bytes per element of its tokens x ffn, and its output
    (traced, to the byte where the tile is the peak)."""
    if not par.tiled_mlp or moe_layer:
        return 0.0
    tile = tiled_mlp_tile(model, par)
    return BF16 * tokens(par) * model.hidden + tile * (TILE_FFN * model.ffn / par.tp + BF16 * model.hidden)


def traced_block(model: ModelSpec, par: ParallelConfig, moe_layer: bool) -> str:
    """Which traced block the layer is (deepspeed, not compiled, flash attention, a dense SwiGLU
    layer without MLA): "hf" (Hugging Face's eager modules) or "liger" (Liger-Kernel's, elementwise
    fused); "" for the blocks that take the bound."""
    if par.framework != "deepspeed" or par.compile or not par.flash or moe_layer or model.mlp != "swiglu" or model.mla:
        return ""
    return "liger" if liger(par) else "hf"


def backward_transient(model: ModelSpec, par: ParallelConfig, moe_layer: bool) -> float:
    """Bytes one layer's backward holds beyond what the layer kept (module docstring)."""
    tiled = tiled_mlp_transient(model, par, moe_layer)
    kind = traced_block(model, par, moe_layer)
    if not kind:
        return layer_activations(model, par, moe_layer).total + tiled
    T, h, ffn = tokens(par), model.hidden, model.ffn / par.tp
    grad = BF16 * T * h                                  # the gradient from the layer above
    if par.tiled_mlp:
        mlp, mlp_kept = grad + tiled, 0.0
    else:           # the down projection's input gradient, and eagerly the activation's (Liger's: in place)
        mlp, mlp_kept = grad + (2 if kind == "hf" else 1) * BF16 * T * ffn, _ffn_bytes(model, par) * T * ffn
    later = HF_NORM_BACKWARD * T * h if kind == "hf" else \
        BF16 * T * (h + (model.q_dim + 2 * model.kv_dim) / par.tp)      # attention's: dq, dk and dv
    return max(mlp, later - mlp_kept)


def layer_working(model: ModelSpec, par: ParallelConfig, moe_layer: bool) -> float:
    """The bytes one layer's backward adds at the peak: `backward_transient`, and with recompute
    what the recomputed layer re-materialises beyond what it kept (module docstring)."""
    extra = recomputed_extra(model, par, moe_layer)
    kind = traced_block(model, par, moe_layer)
    if kind and policy(par.framework, par.recompute)[0] == "full":
        made = layer_activations(model, par, moe_layer).total if kind == "hf" else extra
        extra = made + REENTRANT * tokens(par) * model.hidden
    return backward_transient(model, par, moe_layer) + extra
