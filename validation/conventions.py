"""How a source counts the model FLOPs behind the TFLOP/s it publishes, so that a table that gives
only TFLOP/s per GPU can be read as tokens/s per GPU (its FLOPs per token, not ours). NeMo 2.0's
FLOPs callback counts dense GPT-style models with the same terms as Megatron's formula.

Megatron-LM logs `num_floating_point_operations` (megatron/training/training.py): 3 passes x 2
FLOPs per multiply-add over the attention projections, the attention core, the MLP or the experts
a token is routed to (shared experts included, the router not), and the logits over the vocabulary
padded to a multiple of 128 x tp. Its attention core counted the whole s x s square until
2025-03-06 and half of it (the causal mask's non-zero part) from then on (commit 8873b55d6a,
"Fixes in number of floating-point operation estimates for MoE and attention layer").
Multi-latent attention has its own branch there; those tables are not read here.
"""
from __future__ import annotations

import math

# (source_id, words of its framework_version) -> whether the count it used took the causal half of
# the attention square: Megatron's from 8873b55d6a (2025-03-06) on; NeMo 2.0's FLOPs callback
# (nemo/utils/flops_formulas.py llama3, as of 811bd0e64d, 2025-03) is Megatron's earlier form,
# the whole square, term for term. NeMo 24.03's long-context table (NeMo 1.x) states no count.
TFLOPS_CONVENTIONS = {
    ("megatron-core-moe-readme-2024-08", ""): False,      # Megatron-Core v0.8, 2024
    ("megatron-lm-readme-scaling-2024-07", ""): False,    # Megatron-Core r0.8.0, 2024-07
    ("megatron-moe-modelzoo-qwen3-longctx", ""): True,    # Megatron-Core main, 2026-05
    ("megatron-moe-modelzoo-qwen3-gb200", ""): True,
    ("nemo-long-context", "NeMo 25.04"): False,           # NeMo 2.0's llama3 formula
}


def convention(source: str, version: str) -> bool | None:
    """Whether a source's TFLOP/s counted the causal half (True), the whole square (False), or
    None where its count is not known."""
    return next((half for (src, words), half in TFLOPS_CONVENTIONS.items() if src == source and words in version),
                None)


def megatron_flops_per_token(model, seq: int, causal_half: bool, tp: int = 1) -> float:
    """Megatron-LM's num_floating_point_operations for one token of a GQA or MHA model (dense or
    MoE), in the form it has had since 2025-03-06, and before it with the full square."""
    if model.mla:
        raise ValueError("Megatron counts multi-latent attention in a branch of its own, not read here")
    h, layers = model.hidden, model.layers
    q_proj = model.q_dim
    attention = (1 + model.kv_heads / model.heads + seq / h / (2 if causal_half else 1)) * q_proj / h
    swiglu = 1.5 if model.mlp == "swiglu" else 1.0
    mlp = model.ffn * model.dense_mlp_layers
    if model.moe:
        e = model.moe
        mlp += (e.expert_ffn * e.top_k + e.shared_experts * (e.shared_ffn or e.expert_ffn)) * model.moe_layers
    padded = math.ceil(model.vocab / (128 * tp)) * 128 * tp
    return 12 * layers * h * h * (attention + mlp * swiglu / (layers * h) + padded / (2 * layers * h))


def tokens_from_tflops(source: str, version: str, tflops: float, model, seq: int, tp: int) -> float | None:
    """tokens/s per GPU from a source's published model TFLOP/s per GPU, where its count is known
    (TFLOPS_CONVENTIONS); None otherwise."""
    half = convention(source, version)
    if half is None:
        return None
    return tflops * 1e12 / megatron_flops_per_token(model, seq, half, tp)
