"""FLOPs per token and per step, matmul by matmul; MFU and HFU.

Conventions (to be stated wherever a FLOPs, MFU or HFU number is shown):
- A matmul of a (n x k) by (k x m) costs 2 n k m FLOPs; each weight matrix in
  ModelSpec.layer_matmuls costs 2 * fan_in * fan_out per token it touches (MoE experts: top_k).
- Attention core (QK^T and scores.V) per token at position i costs 2 * a * i * (d_qk + d_v). With
  causal masking (`causal=True`, the default) a kernel that skips masked blocks does on average
  half of the full s x s work, so the count is 2 * a * (s/2) * (d_qk + d_v); `causal=False` counts
  the full square, as PyTorch's FlopCounterMode and Megatron's reports do.
- Training = forward + backward = 3x forward (backward computes input and weight gradients).
- MFU counts model FLOPs only; HFU adds what recompute runs again (recomputed_flops_per_token: full
  the layers' forward, core_attn the attention core's, op_sac the matmuls it does not keep).
  Norms, activations and the optimizer are not counted.
"""
from __future__ import annotations

from ..specs.models import ModelSpec
from ..specs.recompute import matmul_modules, modules, policy, sac_recomputes_attention, sac_saved


def layer_matmul_flops(model: ModelSpec, moe_layer: bool) -> float:
    """Forward FLOPs per token of one layer's weight matmuls (router and experts included)."""
    return sum(2.0 * m.fan_in * m.fan_out * m.used for m in model.layer_matmuls(moe_layer))


def attention_flops(model: ModelSpec, seq: int, causal: bool = True) -> float:
    """Forward FLOPs per token of one layer's attention core (QK^T and softmax.V), averaged over
    the layers: a causal token attends to seq/2 others on average; on a sliding-window layer of
    span w < seq, to w - w(w-1)/(2 seq) (the mean of min(i, w) over positions i), the pairs
    FlashAttention's local attention computes, where it skips the blocks outside the window; on a
    chunked layer (Llama 4), to the tokens before it in its own block of w: the mean of
    ((i - 1) mod w) + 1, about w/2."""
    return sum(attention_flops_by_layer(model, seq, causal))


def attention_flops_by_layer(model: ModelSpec, seq: int, causal: bool = True) -> tuple[float, float]:
    """attention_flops in two shares: (the layers attending to the whole sequence, the windowed
    or chunked layers); the second is 0 without a window shorter than the sequence."""
    d_qk = model.q_dim // model.heads
    d_v = model.attn_out_dim // model.heads
    context = seq / 2 if causal else seq
    w, local = model.window, model.window_layers
    if causal and local and w < seq:
        blocks, rest = divmod(seq, w)
        near = (blocks * w * (w + 1) / 2 + rest * (rest + 1) / 2) / seq if model.chunked else \
            w - w * (w - 1) / (2 * seq)
        return (2.0 * model.heads * ((model.layers - local) * context / model.layers) * (d_qk + d_v),
                2.0 * model.heads * (local * near / model.layers) * (d_qk + d_v))
    return 2.0 * model.heads * context * (d_qk + d_v), 0.0


def forward_flops_per_token(model: ModelSpec, seq: int, causal: bool = True) -> float:
    layers = model.dense_mlp_layers * layer_matmul_flops(model, False)
    if model.moe_layers:
        layers += model.moe_layers * layer_matmul_flops(model, True)
    attn = model.layers * attention_flops(model, seq, causal)
    return layers + attn + 2.0 * model.hidden * model.vocab


def model_flops_per_token(model: ModelSpec, seq: int, causal: bool = True) -> float:
    """Training FLOPs per token for MFU: 3x forward."""
    return 3.0 * forward_flops_per_token(model, seq, causal)


def recomputed_flops_per_token(model: ModelSpec, seq: int, recompute: str, causal: bool = True,
                               framework: str = "megatron", tiled_mlp: bool = False) -> float:
    """Forward FLOPs per token that recompute runs again (calculators/specs/recompute.py): full the
    layers' forward (1/N of it with layer:N), core_attn the attention core, op_sac the matmuls it
    does not keep (every second one, the router, the experts), a module list its modules'; a tiled
    MLP (DeepSpeed's TiledMLP) its dense MLPs' forward once more, whatever the policy."""
    if tiled_mlp:
        return _module_flops(model, seq, ("mlp",), causal) + recomputed_flops_per_token(model, seq, recompute,
                                                                                         causal, framework)
    kind, every = policy(framework, recompute)
    if kind == "modules":
        return _module_flops(model, seq, modules(recompute), causal)
    if kind == "full":
        return (forward_flops_per_token(model, seq, causal) - 2.0 * model.hidden * model.vocab) / every
    if kind == "core_attn":
        return model.layers * attention_flops(model, seq, causal)
    if kind == "op_sac":
        total = 0.0
        for moe, n in ((False, model.dense_mlp_layers), (True, model.moe_layers)):
            mms = model.layer_matmuls(moe) if n else ()
            total += n * sum(2.0 * m.fan_in * m.fan_out * m.used for m, kept in zip(mms, sac_saved(mms)) if not kept)
        core = model.layers * attention_flops(model, seq, causal) if sac_recomputes_attention(recompute) else 0.0
        return total + core
    return 0.0


def _module_flops(model: ModelSpec, seq: int, mods: tuple, causal: bool) -> float:
    """Forward FLOPs per token a Megatron module list runs again: its modules' matmuls (mlp the
    dense MLP's, moe the MoE block's, shared_experts the shared experts', mla_up_proj MLA's q_b and
    kv_b) and core_attn the attention core; norms and activations count no FLOPs."""
    total = model.layers * attention_flops(model, seq, causal) if "core_attn" in mods else 0.0
    for moe, n in ((False, model.dense_mlp_layers), (True, model.moe_layers)):
        for m in (model.layer_matmuls(moe) if n else ()):
            if set(matmul_modules(m.name, moe)) & set(mods):
                total += n * 2.0 * m.fan_in * m.fan_out * m.used
    return total


def hardware_flops_per_token(model: ModelSpec, seq: int, recompute: str, causal: bool = True,
                             framework: str = "megatron", tiled_mlp: bool = False) -> float:
    """Training FLOPs per token actually executed, for HFU: model FLOPs plus recompute."""
    return model_flops_per_token(model, seq, causal) + recomputed_flops_per_token(model, seq, recompute, causal,
                                                                                  framework, tiled_mlp)


def flops_per_step(model: ModelSpec, seq: int, gbs: int, causal: bool = True) -> float:
    return model_flops_per_token(model, seq, causal) * seq * gbs


def mfu(tokens_per_s_per_gpu: float, model: ModelSpec, seq: int, peak_tflops: float, causal: bool = True) -> float:
    """Model FLOPs utilisation: achieved model FLOP/s per GPU over the dense peak."""
    return tokens_per_s_per_gpu * model_flops_per_token(model, seq, causal) / (peak_tflops * 1e12)


def hfu(tokens_per_s_per_gpu: float, model: ModelSpec, seq: int, recompute: str, peak_tflops: float,
        causal: bool = True, framework: str = "megatron", tiled_mlp: bool = False) -> float:
    """Hardware FLOPs utilisation: as MFU, counting recomputed FLOPs too."""
    return tokens_per_s_per_gpu * hardware_flops_per_token(model, seq, recompute, causal, framework, tiled_mlp) / (
        peak_tflops * 1e12)
