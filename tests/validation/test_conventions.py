"""Reading TFLOP/s-only tables: Megatron-LM's own FLOP count (validation/conventions.py)."""
import pytest

from calculators.specs.presets import model_from_name
from calculators.time.flops import attention_flops, model_flops_per_token
from validation.conventions import megatron_flops_per_token, tokens_from_tflops


@pytest.mark.parametrize("name", ["llama3-8b", "llama3-70b", "mixtral-8x7b", "qwen3-30b-a3b", "qwen3-235b-a22b"])
@pytest.mark.parametrize("seq", [4096, 131072])
def test_megatrons_count_is_ours_but_the_router(name, seq):
    """Since 2025-03-06 Megatron counts the causal half of the attention square, as the calculators
    do: the two counts, written apart, agree to the router's GEMM (which Megatron leaves out) and
    the vocabulary's padding; before, it counted the whole square."""
    model = model_from_name(name)
    ours, theirs = model_flops_per_token(model, seq), megatron_flops_per_token(model, seq, causal_half=True)
    if model.moe:
        router = 6 * model.hidden * model.moe.experts * model.moe_layers
        assert theirs == pytest.approx(ours - router, rel=1e-3)
    else:
        assert theirs == pytest.approx(ours, rel=1e-12)
    square = megatron_flops_per_token(model, seq, causal_half=False)
    assert square - theirs == pytest.approx(3 * model.layers * attention_flops(model, seq, causal=True), rel=1e-9)


def test_only_sources_whose_count_is_known_are_read():
    model = model_from_name("qwen3-235b-a22b")
    assert tokens_from_tflops("nemo-long-context", "NeMo 24.03.01 container", 500.0, model, 16384, 4) is None
    assert tokens_from_tflops("somebody-else", "", 500.0, model, 16384, 4) is None
    tps = tokens_from_tflops("megatron-moe-modelzoo-qwen3-longctx", "", 295.0, model, 16384, 4)
    assert tps == pytest.approx(295e12 / megatron_flops_per_token(model, 16384, True, tp=4))
    with pytest.raises(ValueError, match="multi-latent"):
        megatron_flops_per_token(model_from_name("deepseek-v3"), 4096, True)


def test_nemo2_counts_llama_as_megatron_did_before_2025():
    """NeMo 2.0's FLOPs callback (nemo/utils/flops_formulas.py, llama3), written out here as NeMo
    writes it, per sequence: the same count as Megatron's whole-square form."""
    model, seq = model_from_name("llama3-8b"), 131072
    L, h, g, a, f, V = model.layers, model.hidden, model.kv_heads, model.heads, model.ffn, model.vocab
    nemo = seq * L * h * h * (12 + 12 * g / a + 18 * f / h + 12 * seq / h + 6 * V / (L * h))
    assert megatron_flops_per_token(model, seq, causal_half=False) * seq == pytest.approx(nemo, rel=1e-12)
    assert tokens_from_tflops("nemo-long-context", "NeMo 25.04.rc2 container", 1608.0, model, seq, 1) == \
        pytest.approx(1608e12 * seq / nemo)


def test_a_published_mfu_is_read_with_the_count_behind_it():
    """Megatron-LM's 2024 weak-scaling table prints TFLOP/s and MFU (TFLOP/s over 989) from
    Megatron's count of that date, the whole attention square. Its rows are read from the TFLOP/s
    with that count, not as an MFU of our causal-half FLOPs, which at 1.7B (seq / hidden = 2) took
    the measured throughput 12% high."""
    from validation.stacks import load
    runs = [r for r in load()[0] if r.source == "megatron-lm-readme-scaling-2024-07"]
    small = next(r for r in runs if r.model.hidden == 2048)
    assert len(runs) == 9
    assert small.measured == pytest.approx(408.8e12 / megatron_flops_per_token(small.model, 4096, False))
    as_mfu = 0.41 * 989.4e12 / model_flops_per_token(small.model, 4096)
    assert as_mfu / small.measured == pytest.approx(1.12, abs=0.01)
