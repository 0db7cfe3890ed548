"""Presets against published parameter counts; config.json import."""
import json
from dataclasses import replace

import pytest

from calculators.specs.errors import ConfigError
from calculators.specs.hf_config import from_hf_config
from calculators.specs.models import ModelSpec
from calculators.specs.presets import MODEL_PRESETS, model_from_name

# (preset, total, active) in billions, as published by the model's authors.
PUBLISHED = {
    "llama3-8b": (8.03, None), "llama3-70b": (70.6, None), "llama3-405b": (405.9, None),
    "llama2-7b": (6.74, None), "llama2-13b": (13.0, None), "llama2-70b": (69.0, None), "mixtral-8x7b": (46.7, 12.9), "deepseek-v3": (671, 37),
    "qwen2.5-7b": (7.61, None), "qwen3-30b-a3b": (30.5, 3.3),
    "qwen3-235b-a22b": (235, 22), "gpt3-175b": (175, None),
    "nanotron-1.34b": (1.34, None), "nanotron-3.57b": (3.57, None), "nanotron-8.86b": (8.86, None),
    "nanotron-80b": (80.0, None), "nanotron-80b-gqa8": (70.6, None), "nanotron-469b": (469, None),
}
# Figures published to fewer digits, as printed (the tolerance follows the digits): OpenAI's gpt-oss
# README ("117B parameters with 5.1B active"; its active count leaves out the input embedding, per
# the model card's 5.13B), Meta's Llama 4 card (17B active; Maverick 400B in all; Scout's 109B
# counts its vision encoder, not modelled, so its text model is checked against its active count
# only), Moonshot's Kimi K2 README ("1T" total, 32B activated).
ROUNDED = {"gpt-oss-120b": ("117", "5.1"), "gpt-oss-20b": ("21", "3.6"), "llama4-scout": (None, "17"),
           "llama4-maverick": ("400", "17"), "kimi-k2": ("1000", "32")}
NO_INPUT_EMBEDDING = ("gpt-oss-120b", "gpt-oss-20b")     # whose published active count leaves it out
UNIT = {"1000": 1000.0}                                  # "1T": one significant digit


def _near(value: float, printed: str, rel: float) -> bool:
    """`value` (billions) rounds to `printed`: within half a unit of its last digit, plus `rel`."""
    unit = UNIT.get(printed, 10.0 ** -len(printed.partition(".")[2]))
    return abs(value - float(printed)) <= unit / 2 + rel * float(printed)


def test_every_preset_has_a_published_count_and_a_source():
    assert set(PUBLISHED) | set(ROUNDED) == set(MODEL_PRESETS) and not set(PUBLISHED) & set(ROUNDED)
    for name in MODEL_PRESETS:
        assert model_from_name(name).source


@pytest.mark.parametrize("name", MODEL_PRESETS)
def test_preset_parameter_counts(name):
    m = model_from_name(name)
    if name in ROUNDED:
        total, active = ROUNDED[name]
        shown = m.active_params - (m.embedding_params if name in NO_INPUT_EMBEDDING else 0)
        assert total is None or _near(m.total_params / 1e9, total, 0.005)
        assert _near(shown / 1e9, active, 0.02)
        return
    total, active = PUBLISHED[name]
    # published figures are rounded to the digits given; allow half a unit in the last digit + 0.5%
    assert m.total_params / 1e9 == pytest.approx(total, rel=0.005)
    if active:
        assert m.active_params / 1e9 == pytest.approx(active, rel=0.02)
    else:
        assert m.active_params == m.total_params


def test_rounded_counts_fail_off_their_digits():
    assert _near(116.83, "117", 0.005) and not _near(118.2, "117", 0.005)
    assert _near(1026.4, "1000", 0.005) and not _near(1600, "1000", 0.005)
    assert _near(5.13, "5.1", 0.02) and not _near(5.71, "5.1", 0.02)


def test_new_presets_equal_their_config_json():
    """The presets read from config.json as the import reads them: the same parameters."""
    assert from_hf_config(json.dumps(GPT_OSS_120B)).total_params == model_from_name("gpt-oss-120b").total_params
    scout = from_hf_config(json.dumps(SCOUT))
    assert scout.total_params == model_from_name("llama4-scout").total_params
    assert (scout.window, scout.window_layers, scout.chunked, scout.ffn) == (8192, 36, True, 16384)


def test_llama3_8b_exact():
    # 4h^2(1 + k/a) attention + 3hf MLP + 2h norms per layer; embeddings and output untied; final norm
    m = model_from_name("llama3-8b")
    layer = 4096 * 4096 * 2 + 2 * 4096 * 1024 + 3 * 4096 * 14336 + 2 * 4096
    assert m.total_params == 32 * layer + 2 * 128256 * 4096 + 4096 == 8_030_261_248


LLAMA_CFG = {"model_type": "llama", "num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
             "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256,
             "tie_word_embeddings": False}


def test_hf_llama_equals_preset():
    m = from_hf_config(LLAMA_CFG)
    assert m.total_params == model_from_name("llama3-8b").total_params


def test_deepseek_group_limited_routing_is_read_and_checked():
    """n_group and topk_group (DeepSeek-V2/V3's group-limited routing) become moe.groups and
    groups_per_token, as the deepseek-v3 preset has them; "greedy" routing ignores the groups, and
    groups that do not divide the experts or cannot hold top_k are refused by name."""
    from calculators.specs.models import MoESpec
    base = {"model_type": "deepseek_v3", "num_hidden_layers": 4, "hidden_size": 512, "num_attention_heads": 8,
            "intermediate_size": 1024, "vocab_size": 1000, "n_routed_experts": 64, "num_experts_per_tok": 8,
            "moe_intermediate_size": 128, "kv_lora_rank": 64, "qk_nope_head_dim": 32, "qk_rope_head_dim": 16,
            "v_head_dim": 32, "n_group": 8, "topk_group": 4, "topk_method": "noaux_tc"}
    assert from_hf_config(json.dumps(base)).moe.group_limit == (8, 4)
    assert from_hf_config(json.dumps({**base, "topk_method": "greedy"})).moe.group_limit == (0, 0)
    assert model_from_name("deepseek-v3").moe.group_limit == (8, 4)
    assert MoESpec(experts=64, top_k=8, expert_ffn=128, groups=1, groups_per_token=1).group_limit == (0, 0)
    for bad, words in (({"n_group": 7}, "must divide model.moe.experts"), ({"topk_group": 9}, "groups_per_token"),
                       ({"topk_group": 1, "n_routed_experts": 32}, "at most the experts")):
        with pytest.raises(ConfigError, match=words):
            from_hf_config(json.dumps({**base, **bad}))


@pytest.mark.parametrize("cfg,total,active", [
    ({"model_type": "mixtral", "num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
      "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 32000, "num_local_experts": 8,
      "num_experts_per_tok": 2}, 46.70e9, 12.88e9),
    ({"model_type": "deepseek_v3", "num_hidden_layers": 61, "hidden_size": 7168, "num_attention_heads": 128,
      "num_key_value_heads": 128, "intermediate_size": 18432, "vocab_size": 129280, "n_routed_experts": 256,
      "num_experts_per_tok": 8, "moe_intermediate_size": 2048, "n_shared_experts": 1, "first_k_dense_replace": 3,
      "moe_layer_freq": 1, "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128,
      "qk_rope_head_dim": 64, "v_head_dim": 128}, 671.0e9, 37.5e9),
    ({"model_type": "qwen3_moe", "num_hidden_layers": 48, "hidden_size": 2048, "num_attention_heads": 32,
      "num_key_value_heads": 4, "head_dim": 128, "intermediate_size": 6144, "vocab_size": 151936,
      "num_experts": 128, "num_experts_per_tok": 8, "moe_intermediate_size": 768, "decoder_sparse_step": 1,
      "mlp_only_layers": [], "tie_word_embeddings": False}, 30.53e9, 3.35e9),
    ({"model_type": "qwen2_moe", "num_hidden_layers": 24, "hidden_size": 2048, "num_attention_heads": 16,
      "num_key_value_heads": 16, "intermediate_size": 5632, "vocab_size": 151936, "num_experts": 60,
      "num_experts_per_tok": 4, "moe_intermediate_size": 1408, "shared_expert_intermediate_size": 5632,
      "decoder_sparse_step": 1}, 14.3e9, 2.7e9),   # Qwen1.5-MoE-A2.7B: 14.3B total, 2.7B active
    # Gemma 2 9B: 9.24B (its head_dim 256 is not hidden / heads; embeddings tied by default)
    ({"model_type": "gemma2", "num_hidden_layers": 42, "hidden_size": 3584, "num_attention_heads": 16,
      "num_key_value_heads": 8, "head_dim": 256, "intermediate_size": 14336, "vocab_size": 256000,
      "sliding_window": 4096}, 9.24e9, None),
    # Gemma 3 27B's language model, read from the multimodal config's text_config: 27.0B
    ({"model_type": "gemma3", "text_config": {"model_type": "gemma3_text", "num_hidden_layers": 62,
      "hidden_size": 5376, "num_attention_heads": 32, "num_key_value_heads": 16, "head_dim": 128,
      "intermediate_size": 21504, "vocab_size": 262208, "sliding_window": 1024}}, 27.0e9, None),
    ({"model_type": "phi3", "num_hidden_layers": 32, "hidden_size": 3072, "num_attention_heads": 32,
      "num_key_value_heads": 32, "intermediate_size": 8192, "vocab_size": 32064, "tie_word_embeddings": False},
     3.82e9, None),                                # Phi-3-mini: 3.8B
    ({"model_type": "olmo2", "num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
      "num_key_value_heads": 32, "intermediate_size": 11008, "vocab_size": 100352, "tie_word_embeddings": False},
     7.30e9, None),                                # OLMo 2 7B: 7.3B
    ({"model_type": "gpt2", "n_layer": 12, "n_embd": 768, "n_head": 12, "n_positions": 1024,
      "vocab_size": 50257}, 124.44e6, None),       # GPT-2 small: 124M
    ({"model_type": "gpt_neox", "num_hidden_layers": 32, "hidden_size": 2560, "num_attention_heads": 32,
      "intermediate_size": 10240, "vocab_size": 50432, "tie_word_embeddings": False}, 2.78e9, None),  # Pythia-2.8B
])
def test_hf_configs(cfg, total, active):
    m = from_hf_config(json.dumps(cfg))
    assert m.total_params == pytest.approx(total, rel=0.01)
    if active:
        assert m.active_params == pytest.approx(active, rel=0.02)


# 2025's open MoE families, their fields as transformers 5's configuration classes default them
# (each class's defaults are one released size: gpt-oss-120b, GLM-4.5-Air, MiniMax-M2, Llama 4 Scout)
GPT_OSS_120B = {"model_type": "gpt_oss", "num_hidden_layers": 36, "num_local_experts": 128, "vocab_size": 201088,
                "hidden_size": 2880, "intermediate_size": 2880, "head_dim": 64, "num_attention_heads": 64,
                "num_key_value_heads": 8, "sliding_window": 128, "num_experts_per_tok": 4, "attention_bias": True,
                "tie_word_embeddings": False}
SCOUT = {"model_type": "llama4_text", "vocab_size": 202048, "hidden_size": 5120, "intermediate_size": 8192,
         "intermediate_size_mlp": 16384, "num_hidden_layers": 48, "num_attention_heads": 40, "num_key_value_heads": 8,
         "head_dim": 128, "num_experts_per_tok": 1, "num_local_experts": 16, "interleave_moe_layer_step": 1,
         "attention_chunk_size": 8192}


def test_gpt_oss_config():
    """OpenAI's model card splits gpt-oss-120b into 114.71B of MLP, 0.96B of attention and 1.16B of
    embedding and unembedding: 116.83B, of which 5.13B are active per token, counting the unembedding
    but not the embedding. Every other layer attends within a window of 128 tokens, the first one
    included; the attention, the experts and the router carry biases, and each head a sink logit
    (GptOssAttention's `sinks`, one per head and layer)."""
    m = from_hf_config(json.dumps(GPT_OSS_120B))
    assert m.total_params == pytest.approx(116.83e9, rel=0.001)
    assert m.active_params - m.embedding_params == pytest.approx(5.13e9, rel=0.005)
    assert (m.window, m.window_layers, m.chunked, m.bias, m.moe.top_k, m.sinks) == (128, 18, False, True, 4, True)
    assert m.total_params - replace(m, sinks=False).total_params == 36 * 64
    assert m.yarn                                               # GptOssConfig's YaRN, factor 32


def test_yarn_is_read_from_either_rope_field():
    """rope_scaling (or transformers 5's rope_parameters, also one per layer type) of rope_type or
    type yarn sets `yarn`, whatever its factor or mscale fields; anything else, or junk, leaves it
    off without failing the import."""
    base = {**GPT_OSS_120B, "model_type": "llama"}

    def yarn(**fields):
        return from_hf_config(json.dumps({**base, **fields})).yarn
    assert yarn(rope_scaling={"rope_type": "yarn", "factor": 40, "mscale": 1.0, "mscale_all_dim": 1.0})
    assert yarn(rope_scaling={"type": "yarn", "factor": 4, "mscale": None})
    assert yarn(rope_parameters={"full_attention": {"rope_type": "yarn", "factor": 8}, "sliding_attention": {}})
    assert not yarn(rope_scaling={"rope_type": "llama3", "factor": 8})
    for junk in (None, "yarn", [{"rope_type": "yarn"}], 32, {"rope_type": ["yarn"]}):
        assert not yarn(rope_scaling=junk)
    # gpt-oss's default YaRN fills rope_scaling only where rope_parameters is absent too
    gpt_oss = {**GPT_OSS_120B, "rope_scaling": None}
    assert from_hf_config(json.dumps(gpt_oss)).yarn
    assert not from_hf_config(json.dumps({**gpt_oss, "rope_parameters": {"rope_type": "default"}})).yarn


def test_llama4_config():
    """Llama 4 Scout (16 experts, every layer MoE) and Maverick (128, every other layer; the rest a
    dense MLP of intermediate_size_mlp), each MoE layer with one shared expert beside the routed one;
    Meta gives 17B active for both, 400B in all for Maverick (Scout's 109B counts its vision
    encoder, which is not read). Three layers in four attend within chunks of 8,192 tokens."""
    scout = from_hf_config(json.dumps({"model_type": "llama4", "text_config": SCOUT}))
    assert scout.active_params == pytest.approx(17e9, rel=0.02) and 107e9 < scout.total_params < 109e9
    assert (scout.window, scout.window_layers, scout.chunked, scout.qk_norm) == (8192, 36, True, True)
    assert "chunked attention" in scout.source
    maverick = from_hf_config(json.dumps({**SCOUT, "num_local_experts": 128, "interleave_moe_layer_step": 2}))
    assert maverick.total_params == pytest.approx(400e9, rel=0.005)
    assert maverick.active_params == pytest.approx(17e9, rel=0.02)
    assert (maverick.moe_layers, maverick.dense_mlp_layers, maverick.ffn) == (24, 24, 16384)
    no_mlp = {k: v for k, v in SCOUT.items() if k != "intermediate_size_mlp"}
    with pytest.raises(ConfigError, match="intermediate_size_mlp"):
        from_hf_config(json.dumps({**no_mlp, "interleave_moe_layer_step": 2}))
    with pytest.raises(ConfigError, match="moe_layers must be every interleave_moe_layer_step-th layer"):
        from_hf_config(json.dumps({**SCOUT, "interleave_moe_layer_step": 2, "moe_layers": [0, 5, 9]}))
    assert from_hf_config(json.dumps({**SCOUT, "no_rope_layers": [1, 0] * 24})).window_layers == 24
    assert from_hf_config(json.dumps({**SCOUT, "attention_chunk_size": None})).window_layers == 0
    no_chunk = {k: v for k, v in SCOUT.items() if k != "attention_chunk_size"}      # transformers' 8,192
    assert (from_hf_config(json.dumps(no_chunk)).window, from_hf_config(json.dumps(no_chunk)).window_layers) == \
        (8192, 36)
    assert from_hf_config(json.dumps({**SCOUT, "no_rope_layer_interval": 100})).window_layers == 48
    # as transformers writes a Llama 4 config on saving it: its layer types listed
    saved = {**SCOUT, "layer_types": ["chunked_attention", "chunked_attention", "chunked_attention",
                                      "full_attention"] * 12}
    assert from_hf_config(json.dumps(saved)).window_layers == 36


def test_interleaved_moe_layers_are_the_ones_transformers_makes_moe():
    """Layer i is MoE when (i + 1) % step == 0 (after Qwen's mlp_only_layers): 23 of 47 layers at
    step 2, 9 of 48 at step 5; a step that leaves no MoE layer is refused, naming its keys."""
    for layers, step, moe in ((47, 2, [1, 3, 5]), (48, 5, [4, 9, 14])):
        m = from_hf_config(json.dumps({**SCOUT, "num_hidden_layers": layers, "interleave_moe_layer_step": step}))
        assert [i for i in range(layers) if m.is_moe_layer(i)][:3] == moe
        assert m.moe_layers == len(range(step - 1, layers, step))
    qwen = {"model_type": "qwen3_moe", "num_hidden_layers": 6, "hidden_size": 64, "num_attention_heads": 4,
            "intermediate_size": 128, "vocab_size": 1000, "num_experts": 4, "num_experts_per_tok": 1,
            "moe_intermediate_size": 32, "decoder_sparse_step": 2, "mlp_only_layers": [0, 1]}
    m = from_hf_config(json.dumps(qwen))
    assert [i for i in range(6) if m.is_moe_layer(i)] == [3, 5]
    with pytest.raises(ConfigError, match="interleave_moe_layer_step: no layer of num_hidden_layers=4 is MoE"):
        from_hf_config(json.dumps({**SCOUT, "num_hidden_layers": 4, "interleave_moe_layer_step": 5}))


def test_missing_fields_take_transformers_defaults_for_the_new_families():
    """gpt-oss without sliding_window slides 128 tokens (GptOssConfig); GLM-4.5 without
    n_shared_experts or first_k_dense_replace has one of each (Glm4MoeConfig)."""
    sparse = {k: v for k, v in GPT_OSS_120B.items() if k != "sliding_window"}
    assert from_hf_config(json.dumps(sparse)).window == 128
    glm = from_hf_config(json.dumps({"model_type": "glm4_moe", "num_hidden_layers": 4, "hidden_size": 64,
                                     "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 1000,
                                     "n_routed_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 32}))
    assert (glm.moe.shared_experts, glm.moe.dense_layers) == (1, 1)


def test_glm4_moe_and_minimax_m2_configs():
    """GLM-4.5-Air: 106B in all, 12B active (Z.ai's whole billions, rounded down; the MTP layer is
    not counted), GQA attention with biases on q, k and v. MiniMax-M2: 230B in all, 10B active,
    with q and k normalised."""
    air = from_hf_config(json.dumps({
        "model_type": "glm4_moe", "vocab_size": 151552, "hidden_size": 4096, "intermediate_size": 10944,
        "num_hidden_layers": 46, "num_attention_heads": 96, "num_key_value_heads": 8, "head_dim": 128,
        "moe_intermediate_size": 1408, "num_experts_per_tok": 8, "n_shared_experts": 1, "n_routed_experts": 128,
        "n_group": 1, "topk_group": 1, "first_k_dense_replace": 1, "attention_bias": True}))
    assert 106e9 <= air.total_params < 107e9 and 12e9 <= air.active_params - air.embedding_params < 13e9
    assert air.mla is None and (air.kv_heads, air.qkv_bias, air.moe.dense_layers) == (8, True, 1)
    m2 = from_hf_config(json.dumps({
        "model_type": "minimax_m2", "vocab_size": 200064, "hidden_size": 3072, "intermediate_size": 1536,
        "num_hidden_layers": 62, "num_attention_heads": 48, "num_key_value_heads": 8, "head_dim": 128,
        "num_experts_per_tok": 8, "num_local_experts": 256}))
    assert m2.total_params == pytest.approx(230e9, rel=0.01) and m2.qk_norm
    assert m2.active_params - m2.embedding_params == pytest.approx(10e9, rel=0.05)


@pytest.mark.parametrize("kind,words", [("deepseek_v32", "model_type \"deepseek_v3\""),
                                        ("qwen3_next", "Gated DeltaNet"), ("jamba", "Mamba")])
def test_attention_the_calculators_cannot_model_is_refused_saying_why(kind, words):
    with pytest.raises(ConfigError, match=words):
        from_hf_config(json.dumps({**LLAMA_CFG, "model_type": kind}))


def test_a_sparse_gemma_config_takes_transformers_defaults():
    """Gemma 3 4B's published text_config leaves out its heads, kv heads, head_dim and vocabulary;
    transformers fills them (8, 4, 256, 262,208): a 3.88B language model, not hidden / heads."""
    sparse = {"model_type": "gemma3", "text_config": {"model_type": "gemma3_text", "hidden_size": 2560,
                                                      "intermediate_size": 10240, "num_hidden_layers": 34}}
    m = from_hf_config(json.dumps(sparse))
    assert (m.heads, m.kv_heads, m.head_dim, m.vocab) == (8, 4, 256, 262208)
    assert m.total_params == pytest.approx(3.88e9, rel=0.01)
    no_type = {"model_type": "gemma3", "text_config": {k: v for k, v in sparse["text_config"].items()
                                                       if k != "model_type"}}
    assert from_hf_config(json.dumps(no_type)).total_params == m.total_params


def test_sliding_window_configs_give_the_windowed_layers():
    """Gemma 2 slides on every other layer, Gemma 3 on five of every six (or as layer_types says),
    Mistral and Phi-3 on all, Qwen2 from max_window_layers on where use_sliding_window is set;
    no window, or one of the wrong type, is none."""
    base = {"num_hidden_layers": 12, "hidden_size": 512, "num_attention_heads": 8, "intermediate_size": 1024,
            "vocab_size": 1000}

    def window(**cfg):
        m = from_hf_config(json.dumps({**base, **cfg}))
        return m.window, m.window_layers
    assert window(model_type="gemma2", sliding_window=1024) == (1024, 6)
    assert window(model_type="gemma3_text", sliding_window=512) == (512, 10)
    assert window(model_type="gemma3_text", sliding_window=512,
                  layer_types=["sliding_attention"] * 8 + ["full_attention"] * 4) == (512, 8)
    assert window(model_type="mistral", sliding_window=4096) == (4096, 12)
    assert window(model_type="mistral", sliding_window=None) == (0, 0)
    assert window(model_type="qwen2", sliding_window=4096) == (0, 0)
    assert window(model_type="qwen2", sliding_window=4096, use_sliding_window=True, max_window_layers=4) == (4096, 8)
    assert window(model_type="qwen2", sliding_window=4096, use_sliding_window=True) == (0, 0)    # default 28 > 12
    for junk in ("4096", True, -1, 0, [1], 4096.0, 10**9):
        assert window(model_type="mistral", sliding_window=junk) == (0, 0)
    m = from_hf_config(json.dumps({**base, "model_type": "gemma2", "sliding_window": 1024}))
    assert "sliding-window attention of 1,024 tokens on 6 of 12 layers" in m.source
    assert m.tied_embeddings and not from_hf_config(json.dumps({**base, "model_type": "gemma2",
                                                                "tie_word_embeddings": False})).tied_embeddings


def test_windowed_layers_count_only_the_pairs_within_the_window():
    """A causal token at position i attends to min(i, w) others on a window of w: the layers' mean,
    summed here position by position, is what attention_flops counts; at seq <= w nothing changes."""
    from calculators.time.flops import attention_flops
    m = ModelSpec(layers=4, hidden=512, heads=8, ffn=1024, vocab=1000, window=100, window_layers=3)
    full = ModelSpec(layers=4, hidden=512, heads=8, ffn=1024, vocab=1000)
    per_pair = 2 * 8 * (64 + 64)
    for seq in (50, 100, 1000, 4096):
        local = sum(min(i, 100) for i in range(1, seq + 1)) / seq
        want = (seq / 2 + 3 * (local if seq > 100 else seq / 2)) / 4
        assert attention_flops(m, seq) == pytest.approx(want * per_pair, rel=1e-9)
    assert attention_flops(m, 100) == attention_flops(full, 100)
    with pytest.raises(ConfigError, match="window_layers"):
        ModelSpec(layers=4, hidden=512, heads=8, ffn=1024, vocab=1000, window=100, window_layers=5)
    with pytest.raises(ConfigError, match="window_layers"):
        ModelSpec(layers=4, hidden=512, heads=8, ffn=1024, vocab=1000, window=0, window_layers=2)


def test_chunked_layers_count_only_the_pairs_within_their_chunk():
    """On Llama 4's chunked layers a token at position i attends to the ((i - 1) mod w) + 1 tokens of
    its own chunk of w, summed here position by position; at seq <= w it is full causal attention."""
    from calculators.time.flops import attention_flops
    m = ModelSpec(layers=4, hidden=512, heads=8, ffn=1024, vocab=1000, window=100, window_layers=3, chunked=True)
    per_pair = 2 * 8 * (64 + 64)
    for seq in (50, 100, 1000, 1050, 4096):
        local = sum((i - 1) % 100 + 1 for i in range(1, seq + 1)) / seq
        want = (seq / 2 + 3 * (local if seq > 100 else seq / 2)) / 4
        assert attention_flops(m, seq) == pytest.approx(want * per_pair, rel=1e-9)
    with pytest.raises(ConfigError, match="chunked=true needs window"):
        ModelSpec(layers=4, hidden=512, heads=8, ffn=1024, vocab=1000, chunked=True)


@pytest.mark.parametrize("cfg,words", [
    ("{not json", "not valid JSON"),
    ("[1, 2]", "JSON object"),
    ({"model_type": "t5"}, "not supported"),
    ({k: v for k, v in LLAMA_CFG.items() if k != "hidden_size"}, "hidden_size"),
    ({**LLAMA_CFG, "num_key_value_heads": 7}, "kv_heads"),
])
def test_hf_config_errors_name_the_problem(cfg, words):
    with pytest.raises(ConfigError, match=words):
        from_hf_config(cfg)


def test_unknown_preset_lists_the_choices():
    with pytest.raises(ConfigError, match="llama3-8b"):
        model_from_name("llama-9000")
