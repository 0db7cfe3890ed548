"""Read a Hugging Face transformers `config.json` into a ModelSpec.

Supported `model_type`s: llama, mistral, mixtral, qwen2, qwen2_moe, qwen3, qwen3_moe, deepseek_v2,
deepseek_v3, gpt_neox, gpt2. A missing field or an unsupported type raises ConfigError naming it.
"""
from __future__ import annotations

import json

from .errors import ConfigError
from .models import MLASpec, ModelSpec, MoESpec

LLAMA_LIKE = ("llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "deepseek_v2", "deepseek_v3")
SUPPORTED = LLAMA_LIKE + ("gpt_neox", "gpt2")


class _Fields:
    """Reads fields of one config and remembers every missing one, so all are named at once."""

    def __init__(self, cfg: dict):
        self.cfg, self.missing = cfg, []

    def need(self, *keys):
        for key in keys:
            if key in self.cfg and self.cfg[key] is not None:
                return self.cfg[key]
        self.missing.append(keys[0])
        return 0

    def get(self, key, default):
        value = self.cfg.get(key)
        return default if value is None else value


def from_hf_config(cfg: dict | str, name: str = "") -> ModelSpec:
    """ModelSpec from a config.json (a dict, or its text)."""
    if isinstance(cfg, str):
        try:
            cfg = json.loads(cfg)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"config.json is not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})")
    if not isinstance(cfg, dict):
        raise ConfigError("config.json must be a JSON object (the file transformers writes next to the weights)")
    if isinstance(cfg.get("text_config"), dict):          # multimodal wrappers: use the language model
        cfg = {**cfg["text_config"], "model_type": cfg["text_config"].get("model_type", cfg.get("model_type"))}
    kind = cfg.get("model_type")
    if kind not in SUPPORTED:
        raise ConfigError(f"config.json model_type {kind!r} is not supported; supported: {', '.join(SUPPORTED)}. "
                          "Enter the shape by hand (layers, hidden, heads, kv_heads, ffn, vocab) instead")
    f = _Fields(cfg)
    name = name or cfg.get("_name_or_path") or kind
    if kind == "gpt2":
        hidden = f.need("n_embd", "hidden_size")
        args = dict(layers=f.need("n_layer", "num_hidden_layers"), hidden=hidden,
                    heads=f.need("n_head", "num_attention_heads"), ffn=f.get("n_inner", 4 * hidden),
                    vocab=f.need("vocab_size"), positions=f.need("n_positions", "max_position_embeddings"),
                    tied_embeddings=True, mlp="gelu", norm="layernorm", bias=True)
    elif kind == "gpt_neox":
        args = dict(layers=f.need("num_hidden_layers"), hidden=f.need("hidden_size"),
                    heads=f.need("num_attention_heads"), ffn=f.need("intermediate_size"), vocab=f.need("vocab_size"),
                    tied_embeddings=bool(f.get("tie_word_embeddings", False)), mlp="gelu", norm="layernorm",
                    bias=True)
    else:
        args = _llama_like(f, kind)
    if f.missing:
        raise ConfigError(f"config.json ({kind}) lacks {', '.join(sorted(set(f.missing)))}; add the field(s) "
                          "or enter the shape by hand")
    return ModelSpec(name=str(name), source="config.json", **args)


def _llama_like(f: _Fields, kind: str) -> dict:
    heads = f.need("num_attention_heads")
    args = dict(layers=f.need("num_hidden_layers"), hidden=f.need("hidden_size"), heads=heads,
                kv_heads=f.get("num_key_value_heads", heads), ffn=f.get("intermediate_size", 0),
                vocab=f.need("vocab_size"), head_dim=f.get("head_dim", 0),
                tied_embeddings=bool(f.get("tie_word_embeddings", False)),
                qkv_bias=kind.startswith("qwen2") or bool(f.get("attention_bias", False)),
                qk_norm=kind.startswith("qwen3"))
    if kind == "mixtral":
        args["moe"] = MoESpec(experts=f.need("num_local_experts"), top_k=f.need("num_experts_per_tok"),
                              expert_ffn=f.need("intermediate_size"))
    elif kind in ("qwen2_moe", "qwen3_moe"):
        shared = f.get("shared_expert_intermediate_size", 0)
        dense = f.get("mlp_only_layers", [])
        if dense and list(dense) != list(range(len(dense))):
            raise ConfigError("config.json mlp_only_layers must be the leading layers (0, 1, ...) to be modelled; "
                              f"got {dense}")
        args["moe"] = MoESpec(experts=f.need("num_experts"), top_k=f.need("num_experts_per_tok"),
                              expert_ffn=f.need("moe_intermediate_size"), shared_experts=1 if shared else 0,
                              shared_ffn=shared, dense_layers=len(dense), moe_every=f.get("decoder_sparse_step", 1))
    elif kind.startswith("deepseek"):
        args["kv_heads"] = heads
        args["moe"] = MoESpec(experts=f.need("n_routed_experts"), top_k=f.need("num_experts_per_tok"),
                              expert_ffn=f.need("moe_intermediate_size"), shared_experts=f.get("n_shared_experts", 0),
                              dense_layers=f.get("first_k_dense_replace", 0), moe_every=f.get("moe_layer_freq", 1))
        args["mla"] = MLASpec(q_lora_rank=f.get("q_lora_rank", 0), kv_lora_rank=f.need("kv_lora_rank"),
                              qk_nope_dim=f.need("qk_nope_head_dim"), qk_rope_dim=f.need("qk_rope_head_dim"),
                              v_head_dim=f.need("v_head_dim"))
        args["head_dim"] = 0
    if "moe" not in args:
        f.need("intermediate_size")
    return args
