"""Model presets: a table of named shapes with the config.json each was read from.

Every entry is tested (tests/calculators/test_models.py) against its published parameter count.
"""
from __future__ import annotations

from .errors import ConfigError
from .validate import show
from .models import MLASpec, ModelSpec, MoESpec

HF = "https://huggingface.co/{}/blob/main/config.json"
NANOTRON = ("Ultra-Scale Playbook benchmark runs (nanotron), shared/data/nanotron_scaling_runs.csv; "
            "huggingface.co/spaces/nanotron/ultrascale-playbook")

_MODELS: dict[str, dict] = {
    "llama3-8b": dict(layers=32, hidden=4096, heads=32, kv_heads=8, ffn=14336, vocab=128256,
                      source=HF.format("meta-llama/Meta-Llama-3-8B")),
    "llama3-70b": dict(layers=80, hidden=8192, heads=64, kv_heads=8, ffn=28672, vocab=128256,
                       source=HF.format("meta-llama/Meta-Llama-3-70B")),
    "llama3-405b": dict(layers=126, hidden=16384, heads=128, kv_heads=8, ffn=53248, vocab=128256,
                        source=HF.format("meta-llama/Llama-3.1-405B")),
    "llama2-7b": dict(layers=32, hidden=4096, heads=32, ffn=11008, vocab=32000,
                      source=HF.format("meta-llama/Llama-2-7b-hf")),
    "llama2-13b": dict(layers=40, hidden=5120, heads=40, ffn=13824, vocab=32000,
                       source=HF.format("meta-llama/Llama-2-13b-hf")),
    "llama2-70b": dict(layers=80, hidden=8192, heads=64, kv_heads=8, ffn=28672, vocab=32000,
                       source=HF.format("meta-llama/Llama-2-70b-hf")),
    "mixtral-8x7b": dict(layers=32, hidden=4096, heads=32, kv_heads=8, ffn=14336, vocab=32000,
                         moe=MoESpec(experts=8, top_k=2, expert_ffn=14336),
                         source=HF.format("mistralai/Mixtral-8x7B-v0.1")),
    # MLA is modelled exactly for parameters and FLOPs; its activations are counted as attention
    # with q/k head dim 192 and v head dim 128 plus the saved latents (calculators/memory/activations.py).
    # The multi-token-prediction module (14B) is not part of the published 671B and is left out.
    # Node-limited routing: a token's 8 experts come from at most 4 of 8 expert groups (n_group,
    # topk_group in its config.json; the technical report's M = 4 nodes).
    "deepseek-v3": dict(layers=61, hidden=7168, heads=128, ffn=18432, vocab=129280,
                        moe=MoESpec(experts=256, top_k=8, expert_ffn=2048, shared_experts=1, dense_layers=3,
                                    groups=8, groups_per_token=4),
                        mla=MLASpec(q_lora_rank=1536, kv_lora_rank=512, qk_nope_dim=128, qk_rope_dim=64,
                                    v_head_dim=128),
                        source=HF.format("deepseek-ai/DeepSeek-V3")),
    # gpt-oss: every other layer (the first included) attends within 128 tokens; attention, experts
    # and router carry biases; each head has a sink logit; YaRN scales RoPE; OpenAI's active count
    # leaves out the input embedding
    "gpt-oss-120b": dict(layers=36, hidden=2880, heads=64, kv_heads=8, head_dim=64, ffn=2880, vocab=201088,
                         bias=True, window=128, window_layers=18, glu_limit=7.0, sinks=True, yarn=True,
                         moe=MoESpec(experts=128, top_k=4, expert_ffn=2880),
                         source=HF.format("openai/gpt-oss-120b")),
    "gpt-oss-20b": dict(layers=24, hidden=2880, heads=64, kv_heads=8, head_dim=64, ffn=2880, vocab=201088,
                        bias=True, window=128, window_layers=12, glu_limit=7.0, sinks=True, yarn=True,
                        moe=MoESpec(experts=32, top_k=4, expert_ffn=2880),
                        source=HF.format("openai/gpt-oss-20b")),
    # Llama 4: one shared expert beside the routed one in every MoE layer; three layers in four (those
    # with RoPE) attend within chunks of 8,192 tokens; the text model only (Scout's published 109B
    # counts its vision encoder). Maverick's MoE layers alternate with dense MLPs of 16,384.
    "llama4-scout": dict(layers=48, hidden=5120, heads=40, kv_heads=8, head_dim=128, ffn=16384, vocab=202048,
                         qk_norm=True, window=8192, window_layers=36, chunked=True,
                         moe=MoESpec(experts=16, top_k=1, expert_ffn=8192, shared_experts=1),
                         source=HF.format("meta-llama/Llama-4-Scout-17B-16E")),
    "llama4-maverick": dict(layers=48, hidden=5120, heads=40, kv_heads=8, head_dim=128, ffn=16384, vocab=202048,
                            window=8192, window_layers=36, chunked=True,
                            moe=MoESpec(experts=128, top_k=1, expert_ffn=8192, shared_experts=1, moe_every=2),
                            source=HF.format("meta-llama/Llama-4-Maverick-17B-128E")),
    # Kimi K2: DeepSeek-V3's shape with 384 experts, 64 heads, one dense layer and no routing groups
    "kimi-k2": dict(layers=61, hidden=7168, heads=64, ffn=18432, vocab=163840,
                    moe=MoESpec(experts=384, top_k=8, expert_ffn=2048, shared_experts=1, dense_layers=1),
                    mla=MLASpec(q_lora_rank=1536, kv_lora_rank=512, qk_nope_dim=128, qk_rope_dim=64, v_head_dim=128),
                    source=HF.format("moonshotai/Kimi-K2-Instruct")),
    "qwen2.5-7b": dict(layers=28, hidden=3584, heads=28, kv_heads=4, ffn=18944, vocab=152064, qkv_bias=True,
                       source=HF.format("Qwen/Qwen2.5-7B")),
    "qwen3-30b-a3b": dict(layers=48, hidden=2048, heads=32, kv_heads=4, head_dim=128, ffn=6144, vocab=151936,
                          qk_norm=True, moe=MoESpec(experts=128, top_k=8, expert_ffn=768),
                          source=HF.format("Qwen/Qwen3-30B-A3B")),
    "qwen3-235b-a22b": dict(layers=94, hidden=4096, heads=64, kv_heads=4, head_dim=128, ffn=12288, vocab=151936,
                            qk_norm=True, moe=MoESpec(experts=128, top_k=8, expert_ffn=1536),
                            source=HF.format("Qwen/Qwen3-235B-A22B")),
    "gpt3-175b": dict(layers=96, hidden=12288, heads=96, ffn=49152, vocab=50257, mlp="gelu", norm="layernorm",
                      bias=True, positions=2048, tied_embeddings=True,
                      source="Brown et al. 2020, Language Models are Few-Shot Learners, Table 2.1"),
    # The shapes of the Ultra-Scale Playbook scaling runs (names as in that data).
    "nanotron-1.34b": dict(layers=16, hidden=2048, heads=32, ffn=8192, vocab=131072, tied_embeddings=True,
                           source=NANOTRON),
    "nanotron-3.57b": dict(layers=28, hidden=3072, heads=32, ffn=8192, vocab=131072, tied_embeddings=True,
                           source=NANOTRON),
    "nanotron-8.86b": dict(layers=32, hidden=4096, heads=32, ffn=14336, vocab=131072, source=NANOTRON),
    "nanotron-80b": dict(layers=80, hidden=8192, heads=64, ffn=28672, vocab=131072, source=NANOTRON),
    "nanotron-80b-gqa8": dict(layers=80, hidden=8192, heads=64, kv_heads=8, ffn=28672, vocab=131072,
                              source=NANOTRON),
    "nanotron-469b": dict(layers=126, hidden=16384, heads=128, ffn=53248, vocab=131072, source=NANOTRON),
}

MODEL_PRESETS: tuple[str, ...] = tuple(_MODELS)


def model_from_name(name: str) -> ModelSpec:
    """The preset `name` as a ModelSpec (gpt-fast style `from_name`)."""
    key = name.strip().lower() if isinstance(name, str) else None
    if key not in _MODELS:
        raise ConfigError(f"unknown model preset {show(name)}; choose one of: {', '.join(MODEL_PRESETS)}")
    return ModelSpec(name=key, **_MODELS[key])
