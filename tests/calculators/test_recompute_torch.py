"""Recompute policies and eager element-wise work against PyTorch itself.

- What a layer keeps for backward, with no recompute and under torchtitan's op-level selective
  activation checkpointing (its policy, rebuilt in reference_eager.py), equals the storages
  PyTorch keeps alive after the forward of a torchtitan block and of a Hugging Face block; what
  Megatron's recompute modules free equals what PyTorch stops keeping when those parts of the
  block are checkpointed.
- The element-wise bytes the eager stacks move (calculators/time/elementwise.py) equal the bytes of
  every non-matmul op of those blocks' forward and backward, traced op by op.
"""
from dataclasses import replace

import pytest

from calculators.memory.activations import layer_activations, module_freed, saved_per_layer
from calculators.time.elementwise import EAGER_STACK_PACE, layer_bytes
from calculators.time.flops import recomputed_flops_per_token
from calculators.specs.models import ModelSpec, MoESpec
from calculators.specs.parallel import ParallelConfig
from calculators.specs.recompute import order, policy, sac_saved, valid
from tests.calculators.reference_eager import (REGIONS, HFBlock, TitanBlock, TitanBlockCuda, elementwise_bytes,
                                              kept_bytes)

SHAPES = [(256, 4, 2, 512, None, 2, 64), (512, 8, 8, 1024, None, 1, 128), (384, 6, 2, 1000, 96, 2, 96)]
BLOCKS = [(TitanBlock, "fsdp2"), (HFBlock, "deepspeed")]


def _model(h, heads, kv, ffn, head_dim):
    return ModelSpec(layers=1, hidden=h, heads=heads, kv_heads=kv, ffn=ffn, vocab=100, head_dim=head_dim or 0)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("block,framework", [(TitanBlockCuda, "fsdp2"), (HFBlock, "deepspeed")],
                         ids=["torchtitan", "hugging-face"])
@pytest.mark.parametrize("recompute", ["none", "op_sac", "op_sac+core_attn", "full"])
def test_kept_bytes_match_what_pytorch_keeps(shape, block, framework, recompute):
    """bf16 blocks, as FSDP2's mixed precision runs them (ZeRO 3: no autocast)."""
    h, heads, kv, ffn, head_dim, batch, seq = shape
    model = _model(h, heads, kv, ffn, head_dim)
    par = ParallelConfig(mbs=batch, seq=seq, framework=framework, recompute=recompute, zero=3, dp=2)
    predicted = saved_per_layer(model, par, False)
    if recompute != "none":             # a checkpoint keeps its input, which the test made beforehand
        predicted -= layer_activations(model, par, False).layer_input
    measured = kept_bytes(block, h, heads, kv, ffn, head_dim, batch, seq, recompute)
    if recompute == "none" and block is TitanBlockCuda:
        measured += 2 * batch * seq * h     # the fused norm keeps the block's input, which the test made beforehand
    assert predicted == pytest.approx(measured, rel=1e-9, abs=0), (predicted, measured)


def test_op_sac_keeps_far_less_than_megatrons_selective():
    """torchtitan's "selective" is op-level SAC; Megatron's is the attention core (nothing saved with
    flash attention): the same word, under half the memory on Llama 3 8B's shape under FSDP (and
    under 40% of what torchtitan keeps without recompute, with the fused norm a GPU runs)."""
    model = ModelSpec(layers=32, hidden=4096, heads=32, kv_heads=8, ffn=14336, vocab=128256)

    def kept(framework, recompute):
        par = ParallelConfig(mbs=1, seq=8192, framework=framework, recompute=recompute, zero=3, dp=2)
        return saved_per_layer(model, par, False)
    assert policy("fsdp2", "selective") == ("op_sac", 1) and policy("megatron", "selective") == ("core_attn", 1)
    assert kept("megatron", "selective") == kept("megatron", "none")
    assert kept("fsdp2", "selective") < 0.5 * kept("megatron", "selective")
    assert kept("fsdp2", "selective") < 0.40 * kept("fsdp2", "none")


def test_layer_level_recompute_averages_over_its_period():
    model = _model(512, 8, 8, 1024, None)
    base = ParallelConfig(mbs=1, seq=128, framework="fsdp2")
    none, full = (saved_per_layer(model, ParallelConfig(mbs=1, seq=128, framework="fsdp2", recompute=r), False)
                  for r in ("none", "full"))
    every2 = saved_per_layer(model, ParallelConfig(mbs=1, seq=128, framework="fsdp2", recompute="layer:2"), False)
    assert every2 == pytest.approx((none + full) / 2) and base.recompute == "none"
    assert valid("layer:2") and not valid("layer:0") and not valid("layer:x") and not valid(True)
    assert order("none") < order("selective") < order("op_sac") < order("layer:2") < order("layer:8") < order("full")
    assert recomputed_flops_per_token(model, 128, "layer:2", framework="fsdp2") == pytest.approx(
        recomputed_flops_per_token(model, 128, "full", framework="fsdp2") / 2)


def test_op_sac_without_the_attention_in_its_save_list_runs_the_attention_core_again():
    """torchtitan's op SAC on a B200 before its save list named cuDNN attention: the attention core
    runs again in backward (its FLOPs and its seconds), and nothing else changes."""
    from calculators.specs.hardware import GPU_PRESETS
    from calculators.time.compute import layer_time
    from calculators.time.flops import attention_flops
    from calculators.time.profiles import default_profile
    model = _model(512, 8, 8, 1024, None)
    extra = (recomputed_flops_per_token(model, 2048, "op_sac+core_attn", framework="fsdp2")
             - recomputed_flops_per_token(model, 2048, "op_sac", framework="fsdp2"))
    assert extra == pytest.approx(model.layers * attention_flops(model, 2048, True)) and extra > 0
    gpu = GPU_PRESETS["B200"]
    sac, sac_attn = (layer_time(model, ParallelConfig(mbs=1, seq=2048, framework="fsdp2", recompute=r), False, gpu,
                                default_profile(gpu.name)) for r in ("op_sac", "op_sac+core_attn"))
    assert sac_attn.recompute == pytest.approx(sac.recompute + sac.attention) and sac_attn.forward == sac.forward
    assert policy("fsdp2", "op_sac+core_attn") == ("op_sac", 1) and valid("op_sac+core_attn")
    assert order("op_sac") < order("op_sac+core_attn") < order("layer:2") and not valid("core_attn+op_sac")


def test_op_sac_saves_every_other_matmul_in_execution_order():
    mms = _model(512, 8, 8, 1024, None).layer_matmuls(False)
    assert [mm.name for mm, kept in zip(mms, sac_saved(mms)) if kept] == ["q", "v", "gate", "down"]


@pytest.mark.parametrize("shape", [(1024, 8, 2, 2816, 64, 1, 256), (2048, 16, 4, 5632, 128, 2, 128),
                                   (512, 4, 1, 1536, 256, 1, 512)])
@pytest.mark.parametrize("block,framework", BLOCKS, ids=["torchtitan", "hugging-face"])
def test_eager_elementwise_bytes_match_pytorchs_ops(shape, block, framework):
    h, heads, kv, ffn, head_dim, batch, seq = shape
    model = _model(h, heads, kv, ffn, head_dim)
    # bf16 weights (FSDP2's mixed precision; ZeRO 0/1 would be autocast over fp32: test_autocast_torch.py)
    predicted = layer_bytes(model, ParallelConfig(mbs=batch, seq=seq, framework=framework, zero=3), False, batch * seq)
    measured = elementwise_bytes(block, h, heads, kv, ffn, head_dim, batch, seq)
    pace = EAGER_STACK_PACE.get(framework, (1.0, 1.0))        # the time a GPU took, in a stream's bytes
    for i, way in enumerate(("forward", "backward")):
        assert predicted[way][0] == pytest.approx(measured[way][0] * pace[i], rel=0.01), way
        assert predicted[way][1] == pytest.approx(measured[way][1], abs=1), way
    # compiled, the same stack moves a fraction of it (Inductor fuses the chains: the fused counts)
    compiled = layer_bytes(model, ParallelConfig(mbs=batch, seq=seq, framework=framework, compile=True, zero=3), False,
                           batch * seq)
    assert compiled["forward"][0] < 0.45 * predicted["forward"][0]
    # a stack on Transformer Engine's or Liger's modules says so without compiling: the same fused
    # counts; an eager Megatron or nanotron moves torchtitan's eager ops
    fused = layer_bytes(model, ParallelConfig(mbs=batch, seq=seq, framework=framework, elementwise="fused", zero=3),
                        False, batch * seq)
    assert fused == compiled
    if framework == "fsdp2":
        eager = [layer_bytes(model, ParallelConfig(mbs=batch, seq=seq, framework=fw, elementwise="eager", zero=3),
                             False, batch * seq) for fw in ("megatron", "nanotron")]
        assert eager == [predicted, predicted]


@pytest.mark.parametrize("shape", [(1024, 8, 2, 2816, 64, 1, 256), (2048, 16, 4, 5632, 128, 2, 128),
                                   (512, 4, 1, 1536, 256, 1, 512)])
def test_eager_fused_norm_bytes_match_pytorchs_ops(shape):
    """torchtitan's block on PyTorch 2.8 and later, its norms PyTorch's fused kernels
    (elementwise="eager-fused-norm"): the calculators' bytes and kernels against the trace."""
    from tests.calculators.reference_eager import TitanBlockFusedNorm
    h, heads, kv, ffn, head_dim, batch, seq = shape
    model = _model(h, heads, kv, ffn, head_dim)
    par = ParallelConfig(mbs=batch, seq=seq, framework="fsdp2", elementwise="eager-fused-norm", zero=3)
    predicted = layer_bytes(model, par, False, batch * seq)
    measured = elementwise_bytes(TitanBlockFusedNorm, h, heads, kv, ffn, head_dim, batch, seq)
    for way in ("forward", "backward"):
        assert predicted[way][0] == pytest.approx(measured[way][0], rel=0.01), way
        assert predicted[way][1] == measured[way][1], way


@pytest.mark.parametrize("shape", SHAPES[:2])
@pytest.mark.parametrize("block,framework", [(TitanBlockCuda, "fsdp2"), (HFBlock, "deepspeed")],
                         ids=["torchtitan", "hugging-face"])
@pytest.mark.parametrize("region", REGIONS)
def test_megatron_recompute_modules_free_what_pytorch_frees(shape, block, framework, region):
    """Megatron's recompute modules layernorm and mlp, and moe_act's count on the same SwiGLU (an MoE
    layer of one expert), free what PyTorch stops keeping when that part of the block is
    checkpointed (the norm with the linears that read it: Megatron discards the norm's output)."""
    h, heads, kv, ffn, head_dim, batch, seq = shape
    par = ParallelConfig(mbs=batch, seq=seq, framework=framework, zero=3, dp=2)
    if region == "act":
        moe = replace(_model(h, heads, kv, ffn, head_dim), moe=MoESpec(experts=1, top_k=1, expert_ffn=ffn))
        predicted = module_freed(moe, par, True)["moe_act"]
    else:
        predicted = module_freed(_model(h, heads, kv, ffn, head_dim), par, False)[region]
    measured = (kept_bytes(block, h, heads, kv, ffn, head_dim, batch, seq, "none")
                - kept_bytes(block, h, heads, kv, ffn, head_dim, batch, seq, region))
    if region == "layernorm" and block is HFBlock:
        measured -= 2 * batch * seq * h     # the recompute keeps the block's input, which the test made beforehand
    assert predicted == pytest.approx(measured, rel=1e-9, abs=0), (predicted, measured)
