"""Read a Hugging Face transformers `config.json` into a ModelSpec.

Supported `model_type`s: llama, mistral, mixtral, qwen2, qwen2_moe, qwen3, qwen3_moe, deepseek_v2,
deepseek_v3, kimi_k2, gemma, gemma2, gemma3_text (and gemma3, whose text_config is one), phi3, olmo2,
granite, gpt_oss, glm4_moe, minimax_m2, llama4_text (and llama4), gpt_neox, gpt2. A missing field, a
value of the wrong type or over its limit (calculators/specs/limits.py), or an unsupported type raises
ConfigError naming the config.json key; a type whose attention is not softmax attention over the
tokens (linear attention, state-space layers, DeepSeek-V3.2's sparse attention) says so (UNMODELLED).

Gemma's gated GELU has SwiGLU's three matrices (`mlp="swiglu"` is the shape), its embeddings are
tied unless the config says otherwise, and its head_dim is read (256 on Gemma 1 and 2 where
hidden / heads is not); the heads, kv heads, head_dim and vocabulary a Gemma config leaves out
take transformers' defaults for its type (DEFAULTS). Gemma 2 and 3 also normalise each block's
outputs (two more RMSNorms a layer, 0.02% of the parameters); those are not counted.
Sliding-window attention (Mistral 7B v0.1, Phi-3, Gemma 2 and 3 on most layers, gpt-oss on every
other layer, Qwen2 from max_window_layers on where use_sliding_window is set) is read as the model's
`window` and `window_layers`: those layers' attention counts only the pairs within the window
(flops.attention_flops), as FlashAttention's local attention computes them. Llama 4's chunked
attention (attention_chunk_size, on the layers with RoPE) is a window with `chunked` set: a token
attends to the tokens before it in its own chunk.
gpt-oss's GLU clamps its input at swiglu_limit (the model's `glu_limit`), and each of its heads has a
learned sink logit in its softmax (`sinks`, one parameter per head and layer). A rope_scaling of
rope_type yarn (gpt-oss's) sets `yarn`: Megatron applies such RoPE unfused.
MoE layers: gpt-oss's and MiniMax-M2's experts are intermediate_size wide; Llama 4's too, with one
shared expert beside them and, between MoE layers when interleave_moe_layer_step > 1, a dense MLP of
intermediate_size_mlp; GLM-4.5 and Kimi K2 take DeepSeek's fields (GLM-4.5 with GQA, not MLA). The
multi-token-prediction layers some of them ship (num_nextn_predict_layers) are not counted, as for
DeepSeek-V3. An interleaved model's MoE layers (Qwen's decoder_sparse_step, Llama 4's
interleave_moe_layer_step) are the layers transformers makes MoE: from the step-th on, every step-th.
"""
from __future__ import annotations

import re

from . import limits
from .errors import ConfigError
from .models import MLASpec, ModelSpec, MoESpec
from .validate import flag, integer, loads, number, show, whole_list

LLAMA_LIKE = ("llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "deepseek_v2", "deepseek_v3",
              "kimi_k2", "gemma", "gemma2", "gemma3_text", "phi3", "olmo2", "granite", "gpt_oss", "glm4_moe",
              "minimax_m2", "llama4_text")
DEEPSEEK_MOE = ("deepseek_v2", "deepseek_v3", "kimi_k2", "glm4_moe")     # n_routed_experts, first_k_dense_replace, ...
# model_types whose language model is another's: multimodal wrappers and their text halves
TEXT_OF = {"gemma3": "gemma3_text", "llama4": "llama4_text"}
# model_types that cannot be modelled, and why: attention other than softmax over the tokens
UNMODELLED = dict((
    ("deepseek_v32", "DeepSeek-V3.2's sparse attention (a lightning indexer choosing 2,048 keys per query) is not "
                     "modelled; model_type \"deepseek_v3\" with the same fields gives its dense-attention twin, "
                     "V3.1-Terminus, the model V3.2 was trained from"),
    *((kind, f"{layers} are not modelled") for kind, layers in (
        ("qwen3_next", "Qwen3-Next's Gated DeltaNet layers (linear attention on 3 of every 4 layers)"),
        ("minimax", "MiniMax-Text-01 and M1's lightning (linear) attention layers"),
        ("kimi_linear", "Kimi Linear's KDA (linear attention) layers"), ("jamba", "Jamba's Mamba layers"),
        ("falcon_h1", "Falcon-H1's Mamba-2 heads"), ("mamba", "Mamba's state-space layers"),
        ("mamba2", "Mamba-2's state-space layers"), ("nemotron_h", "Nemotron-H's Mamba-2 layers"))),
))
TIED_BY_DEFAULT = ("gemma", "gemma2", "gemma3_text")       # transformers' config defaults
# Fields a published Gemma config may leave out, read as transformers' config classes default them
# (Gemma 3 4B's text_config states neither its heads, kv heads, head_dim nor vocabulary).
DEFAULTS = {"gemma": {"num_attention_heads": 16, "num_key_value_heads": 16, "head_dim": 256, "vocab_size": 256000},
            "gemma2": {"num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256, "vocab_size": 256000},
            "gemma3_text": {"num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256, "vocab_size": 262208},
            "gpt_oss": {"rope_scaling": {"rope_type": "yarn", "factor": 32.0}}}     # GptOssConfig's YaRN
# (a default fills a field that config.json leaves out or null; gpt_oss's rope_scaling only where
# transformers 5's rope_parameters is absent too)
QK_NORM = ("qwen3", "qwen3_moe", "gemma3_text", "olmo2", "minimax_m2")
QK_NORM_FLAG = {"glm4_moe": False, "llama4_text": True}    # use_qk_norm's default where the config may say
SUPPORTED = LLAMA_LIKE + ("gpt_neox", "gpt2")
M, E, A = limits.MODEL, limits.MOE, limits.MLA     # the bounds of each field read below


class _Fields:
    """Reads the fields of one config, checking each against its bounds under its config.json
    name, and remembers every missing or wrong one, so all are named at once."""

    def __init__(self, cfg: dict):
        self.cfg, self.missing, self.problems = cfg, [], []

    def _whole(self, key, value, bounds):
        before = len(self.problems)
        integer(self.problems, f"config.json {key}", value, *bounds)
        return value if len(self.problems) == before else max(1, bounds[0])

    def need(self, bounds, *keys):
        """The first of `keys` present (a whole number within `bounds`)."""
        for key in keys:
            if self.cfg.get(key) is not None:
                return self._whole(key, self.cfg[key], bounds)
        self.missing.append(keys[0])
        return max(1, bounds[0])

    def get(self, bounds, key, default):
        value = self.cfg.get(key)
        return default if value is None else self._whole(key, value, bounds)

    def flag(self, key, default: bool) -> bool:
        value = self.cfg.get(key)
        if value is None:
            return default
        flag(self.problems, f"config.json {key}", value)
        return value is True


def _name(cfg: dict, kind: str) -> str:
    """The model's name for the page: `_name_or_path` when it is text, printable, cut to length."""
    name = cfg.get("_name_or_path")
    if not isinstance(name, str) or not name.strip():
        return kind
    name = "".join(ch for ch in name if ch.isprintable()).strip()
    return name[:limits.MAX_TEXT] or kind


def from_hf_config(cfg: dict | str, name: str = "") -> ModelSpec:
    """ModelSpec from a config.json (a dict, or its text)."""
    if isinstance(cfg, (str, bytes)):
        cfg = loads(cfg, "config.json")
    if not isinstance(cfg, dict):
        raise ConfigError("config.json must be a JSON object (the file transformers writes next to the weights)")
    if "text_config" in cfg and cfg["text_config"] is not None:    # multimodal wrappers: the language model
        if not isinstance(cfg["text_config"], dict):
            raise ConfigError(f"config.json text_config must be an object (got {show(cfg['text_config'])})")
        cfg = {**cfg["text_config"], "model_type": cfg["text_config"].get("model_type", cfg.get("model_type"))}
    kind = cfg.get("model_type")
    kind = TEXT_OF.get(kind, kind) if isinstance(kind, str) else kind
    if isinstance(kind, str) and kind in DEFAULTS:
        cfg = {**cfg, **{k: v for k, v in DEFAULTS[kind].items() if cfg.get(k) is None
                         and not (k == "rope_scaling" and cfg.get("rope_parameters") is not None)}}
    if isinstance(kind, str) and kind in UNMODELLED:
        raise ConfigError(f"config.json model_type {show(kind)} is not supported: {UNMODELLED[kind]}")
    if not isinstance(kind, str) or kind not in SUPPORTED:
        raise ConfigError(f"config.json model_type {show(kind)} is not supported; supported: {', '.join(SUPPORTED)}. "
                          "Describe the shape as a llama one instead: model_type \"llama\" with num_hidden_layers, "
                          "hidden_size, num_attention_heads, num_key_value_heads, intermediate_size and vocab_size "
                          "(head_dim where it is not hidden_size / heads)")
    f = _Fields(cfg)
    name = name or _name(cfg, kind)
    if kind == "gpt2":
        hidden = f.need(M["hidden"], "n_embd", "hidden_size")
        args = dict(layers=f.need(M["layers"], "n_layer", "num_hidden_layers"), hidden=hidden,
                    heads=f.need(M["heads"], "n_head", "num_attention_heads"),
                    ffn=f.get(M["ffn"], "n_inner", min(4 * hidden, M["ffn"][1])),
                    vocab=f.need(M["vocab"], "vocab_size"),
                    positions=f.need(M["positions"], "n_positions", "max_position_embeddings"),
                    tied_embeddings=True, mlp="gelu", norm="layernorm", bias=True)
    elif kind == "gpt_neox":
        args = dict(layers=f.need(M["layers"], "num_hidden_layers"), hidden=f.need(M["hidden"], "hidden_size"),
                    heads=f.need(M["heads"], "num_attention_heads"), ffn=f.need(M["ffn"], "intermediate_size"),
                    vocab=f.need(M["vocab"], "vocab_size"), tied_embeddings=f.flag("tie_word_embeddings", False),
                    mlp="gelu", norm="layernorm", bias=True)
    else:
        try:
            args = _llama_like(f, kind)
        except ConfigError as exc:                 # its MoE fields fine one by one, not together
            raise _together(exc) from None
    if kind in LLAMA_LIKE:
        args["yarn"] = _yarn(cfg)
    if f.missing:
        f.problems.insert(0, f"config.json ({kind}) lacks {', '.join(sorted(set(f.missing)))}; add the field(s)")
    if f.problems:
        raise ConfigError(f.problems)
    if kind in LLAMA_LIKE:
        args["window"], args["window_layers"] = _window(cfg, kind, args["layers"])
        args["chunked"] = kind == "llama4_text" and args["window_layers"] > 0
    what = "chunked attention (within blocks)" if args.get("chunked") else "sliding-window attention"
    note = f"{what} of {args['window']:,} tokens on {args['window_layers']} of {args['layers']} " \
        "layers (their attention FLOPs count only the pairs within it)" if args.get("window_layers") else ""
    try:
        return ModelSpec(name=name, source="config.json" + (f"; {note}" if note else ""), **args)
    except ConfigError as exc:                     # fields fine one by one, not together (top_k > experts)
        raise _together(exc) from None


def _together(exc: ConfigError) -> ConfigError:
    """A model's check of its fields together, worded for a config.json and naming its keys; a problem
    already about the config.json (a field it cannot model) as it was."""
    return ConfigError([p if p.startswith("config.json") else
                        f"config.json describes a model that cannot be: {p}{_keys_of(p)}" for p in exc.problems])


# the config.json keys (transformers' names) behind the model fields a check of them together names
CONFIG_KEYS = {"model.heads": "num_attention_heads (and num_key_value_heads)",
               "model.ffn": "intermediate_size (GPT-2's n_inner, Llama 4's intermediate_size_mlp)",
               "model.head_dim": "head_dim, else hidden_size / num_attention_heads",
               "model.moe.experts": "num_experts, num_local_experts or n_routed_experts",
               "model.moe.top_k": "num_experts_per_tok", "model.moe.groups": "n_group",
               "model.moe.groups_per_token": "topk_group",
               "model.moe.expert_ffn": "moe_intermediate_size (gpt-oss, MiniMax-M2, Llama 4: intermediate_size)",
               "model.moe.dense_layers": "first_k_dense_replace or mlp_only_layers",
               "model.moe.moe_every": "decoder_sparse_step, interleave_moe_layer_step or moe_layer_freq",
               "model.window_layers": "sliding_window and max_window_layers (Llama 4's attention_chunk_size)"}


def _keys_of(problem: str) -> str:
    """' (model.moe.groups is config.json's n_group; ...)' for the model fields `problem` names."""
    named = [k for k in dict.fromkeys(re.findall(r"model\.[a-z_.]*[a-z]", problem)) if k in CONFIG_KEYS]
    return " (" + "; ".join(f"{k} is config.json's {CONFIG_KEYS[k]}" for k in named) + ")" if named else ""


def _window(cfg: dict, kind: str, layers: int) -> tuple[int, int]:
    """(span, layers attending within it) of a sliding-window config; (0, 0) for none."""
    # transformers' defaults where a config.json leaves the window out: GptOssConfig slides 128 tokens,
    # Llama4TextConfig chunks 8,192
    window = cfg.get("attention_chunk_size", 8192) if kind == "llama4_text" else \
        cfg.get("sliding_window", 128 if kind == "gpt_oss" else None)
    if not isinstance(window, int) or isinstance(window, bool) or not 0 < window <= limits.MAX_SEQ:
        return 0, 0
    if kind.startswith("qwen2") and cfg.get("use_sliding_window") is not True:
        return 0, 0
    types = cfg.get("layer_types")
    if isinstance(types, list) and len(types) == layers:      # as transformers writes them on saving
        local = sum(t == ("chunked_attention" if kind == "llama4_text" else "sliding_attention") for t in types)
    elif kind in ("gemma2", "gpt_oss"):
        local = layers // 2 + layers % 2                     # every other layer, the first local
    elif kind == "llama4_text":                              # the layers with RoPE (1 in no_rope_layers) chunk
        rope = cfg.get("no_rope_layers")
        every = cfg.get("no_rope_layer_interval", 4)
        if isinstance(rope, list) and len(rope) >= layers:  # transformers reads entry i for layer i
            local = sum(bool(r) for r in rope[:layers])
        else:
            every = every if isinstance(every, int) and not isinstance(every, bool) and every > 0 else 4
            local = layers - layers // every                 # all but every `every`-th layer
    elif kind == "gemma3_text":
        pattern = cfg.get("sliding_window_pattern")
        every = pattern if isinstance(pattern, int) and not isinstance(pattern, bool) and 0 < pattern <= layers else 6
        local = layers - layers // every                     # all but every `every`-th layer
    elif kind in ("mistral", "mixtral", "phi3"):
        local = layers
    elif kind.startswith("qwen2"):                            # from max_window_layers on (transformers)
        first = cfg.get("max_window_layers", 28)
        local = layers - min(layers, first) if isinstance(first, int) and not isinstance(first, bool) and \
            first >= 0 else 0
    else:
        return 0, 0
    return (window, local) if local else (0, 0)


def _yarn(cfg: dict) -> bool:
    """Whether RoPE is scaled by YaRN: rope_scaling (or transformers 5's rope_parameters, also one
    per layer type) of rope_type (or type) yarn."""
    rope = cfg.get("rope_scaling") or cfg.get("rope_parameters")
    if not isinstance(rope, dict):
        return False
    kinds = [rope] + [v for v in rope.values() if isinstance(v, dict)]
    return any((r.get("rope_type") or r.get("type")) == "yarn" for r in kinds)


def _first_sparse(f: _Fields, dense: int, step: int, keys: str) -> int:
    """The first MoE layer where transformers makes layer i sparse when (i + 1) % step == 0 after
    `dense` leading dense ones (Qwen's decoder_sparse_step, Llama 4's interleave_moe_layer_step):
    every step-th layer from there on, as MoESpec counts them. None among the layers: refused."""
    first = dense + (-(dense + 1)) % max(1, step)
    layers = f.cfg.get("num_hidden_layers")
    if not f.problems and isinstance(layers, int) and first >= layers:
        raise ConfigError(f"config.json {keys}: no layer of num_hidden_layers={layers} is MoE "
                          f"(the first would be layer {first}); use a config.json of a dense type")
    return first


def _llama_like(f: _Fields, kind: str) -> dict:
    heads = f.need(M["heads"], "num_attention_heads")
    args = dict(layers=f.need(M["layers"], "num_hidden_layers"), hidden=f.need(M["hidden"], "hidden_size"),
                heads=heads, kv_heads=f.get(M["kv_heads"], "num_key_value_heads", heads),
                ffn=f.get(M["ffn"], "intermediate_size", 0), vocab=f.need(M["vocab"], "vocab_size"),
                head_dim=f.get(M["head_dim"], "head_dim", 0),
                tied_embeddings=f.flag("tie_word_embeddings", kind in TIED_BY_DEFAULT),
                qkv_bias=kind.startswith("qwen2") or f.flag("attention_bias", False),
                qk_norm=kind in QK_NORM or f.flag("use_qk_norm", QK_NORM_FLAG.get(kind, False)))
    if kind == "mixtral":
        args["moe"] = MoESpec(experts=f.need(E["experts"], "num_local_experts"),
                              top_k=f.need(E["top_k"], "num_experts_per_tok"),
                              expert_ffn=f.need(E["expert_ffn"], "intermediate_size"))
    elif kind in ("qwen2_moe", "qwen3_moe"):
        shared = f.get(E["shared_ffn"], "shared_expert_intermediate_size", 0)
        dense = f.cfg.get("mlp_only_layers") or []
        whole_list(f.problems, "config.json mlp_only_layers", dense, 0, limits.MAX_LAYERS)
        if not f.problems and list(dense) != list(range(len(dense))):
            raise ConfigError("config.json mlp_only_layers must be the leading layers (0, 1, ...) to be modelled; "
                              f"got {show(dense)}")
        step = f.get(E["moe_every"], "decoder_sparse_step", 1)
        args["moe"] = MoESpec(experts=f.need(E["experts"], "num_experts"),
                              top_k=f.need(E["top_k"], "num_experts_per_tok"),
                              expert_ffn=f.need(E["expert_ffn"], "moe_intermediate_size"),
                              shared_experts=1 if shared else 0, shared_ffn=shared,
                              dense_layers=_first_sparse(f, len(dense) if isinstance(dense, list) else 0, step,
                                                         "mlp_only_layers and decoder_sparse_step"),
                              moe_every=step)
    elif kind in ("gpt_oss", "minimax_m2"):
        shared = f.get(E["shared_ffn"], "shared_intermediate_size", 0)
        args["moe"] = MoESpec(experts=f.need(E["experts"], "num_local_experts", "num_experts"),
                              top_k=f.need(E["top_k"], "num_experts_per_tok", "experts_per_token"),
                              expert_ffn=f.need(E["expert_ffn"], "intermediate_size"),
                              shared_experts=1 if shared else 0, shared_ffn=shared)
        if kind == "gpt_oss":      # biases on the attention, the experts and the router; a sink logit per head
            args["bias"], args["qkv_bias"], args["sinks"] = True, False, True
            limit = f.cfg.get("swiglu_limit", 7.0)     # its GLU's clamp (GptOssConfig's default)
            number(f.problems, "config.json swiglu_limit", 0.0 if limit is None else limit, *limits.MODEL["glu_limit"])
            args["glu_limit"] = float(limit or 0.0) if not f.problems else 0.0
    elif kind == "llama4_text":
        step = f.get(E["moe_every"], "interleave_moe_layer_step", 1)
        args["moe"] = MoESpec(experts=f.need(E["experts"], "num_local_experts"),
                              top_k=f.need(E["top_k"], "num_experts_per_tok"),
                              expert_ffn=f.need(E["expert_ffn"], "intermediate_size"), shared_experts=1,
                              dense_layers=_first_sparse(f, 0, step, "interleave_moe_layer_step"), moe_every=step)
        # the dense layers' MLP between the MoE ones (Maverick's every other layer)
        args["ffn"] = f.need(M["ffn"], "intermediate_size_mlp") if step > 1 else \
            f.get(M["ffn"], "intermediate_size_mlp", 0)
        listed = f.cfg.get("moe_layers")
        every = list(range(step - 1, args["layers"], step))
        if listed is not None and not f.problems and listed != every:
            raise ConfigError(f"config.json moe_layers must be every interleave_moe_layer_step-th layer ({step}: "
                              f"layers {', '.join(map(str, every[:3]))}, ...) to be modelled; got {show(listed)}")
    elif kind in DEEPSEEK_MOE:
        glm = 1 if kind == "glm4_moe" else 0       # transformers' Glm4MoeConfig defaults: one of each
        args["moe"] = MoESpec(experts=f.need(E["experts"], "n_routed_experts"),
                              top_k=f.need(E["top_k"], "num_experts_per_tok"),
                              expert_ffn=f.need(E["expert_ffn"], "moe_intermediate_size"),
                              shared_experts=f.get(E["shared_experts"], "n_shared_experts", glm),
                              dense_layers=f.get(E["dense_layers"], "first_k_dense_replace", glm),
                              moe_every=f.get(E["moe_every"], "moe_layer_freq", 1),
                              # group-limited routing (V2's group_limited_greedy, V3's noaux_tc);
                              # plain "greedy" ignores the groups
                              groups=0 if f.cfg.get("topk_method") == "greedy" else f.get(E["groups"], "n_group", 0),
                              groups_per_token=f.get(E["groups_per_token"], "topk_group", 0))
    if kind in DEEPSEEK_MOE and kind != "glm4_moe":   # multi-head latent attention
        args["kv_heads"] = heads
        args["mla"] = MLASpec(q_lora_rank=f.get(A["q_lora_rank"], "q_lora_rank", 0),
                              kv_lora_rank=f.need(A["kv_lora_rank"], "kv_lora_rank"),
                              qk_nope_dim=f.need(A["qk_nope_dim"], "qk_nope_head_dim"),
                              qk_rope_dim=f.need(A["qk_rope_dim"], "qk_rope_head_dim"),
                              v_head_dim=f.need(A["v_head_dim"], "v_head_dim"))
        args["head_dim"] = 0
    if "moe" not in args:
        f.need(M["ffn"], "intermediate_size")
    return args
