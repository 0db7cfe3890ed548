"""The backward's working set and the tiled MLP against PyTorch itself.

Hugging Face's Llama block (reference_eager.HFBlock, what deepspeed trains) runs a forward and a
backward on real CPU tensors while a dispatch mode counts every storage an op creates for as long
as it lives: the bytes kept after the forward, and the most held above them during the backward.
The weights' gradients are left out (their shapes are skipped): the memory model counts them as
gradients, not as the layer's working set. The calculators' `saved_per_layer` and `layer_working`
(memory/working.py) must give both, with and without DeepSpeed's TiledMLP (reference_eager.TiledMLP)
and full recompute, on shapes the form was not read from.
"""
from __future__ import annotations

import gc
import math
import weakref
from dataclasses import replace

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.checkpoint import checkpoint
from torch.utils.flop_counter import FlopCounterMode

from calculators.memory.activations import layer_activations, saved_per_layer
from calculators.memory.estimate import estimate_memory
from calculators.memory.working import backward_transient, layer_working
from calculators.scenario import parse_parallel
from calculators.specs.errors import ConfigError
from calculators.specs.hardware import ClusterSpec, gpu_from_name
from calculators.specs.models import ModelSpec
from calculators.specs.presets import model_from_name
from calculators.specs.parallel import ParallelConfig, check_layout
from calculators.time.flops import recomputed_flops_per_token
from calculators.time.profiles import default_profile
from calculators.time.step import estimate_step
from tests.calculators.reference_eager import HFBlock, LigerHFBlock

SEQ = 4000                         # tokens: neither they nor a tiled MLP's rows are a weight's dimension
SHAPES = [(256, 4, 2, 896), (256, 4, 4, 1024), (512, 8, 2, 1024), (384, 6, 2, 1000), (512, 8, 8, 768)]


class _Live(TorchDispatchMode):
    """Bytes of the storages ops create while they live, and the most at once since `peak` was reset."""

    def __init__(self, skip: set, existing: set):
        super().__init__()
        self.skip, self.live, self.peak, self.seen = skip, 0, 0, set(existing)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in torch.utils._pytree.tree_leaves(out):
            if not isinstance(t, torch.Tensor) or tuple(t.shape) in self.skip:
                continue
            storage = t.untyped_storage()
            key, nbytes = storage.data_ptr(), storage.nbytes()
            if nbytes and key not in self.seen:          # views of a tensor made beforehand count nothing
                self.seen.add(key)
                self.live += nbytes
                weakref.finalize(storage, self._free, key, nbytes)
        self.peak = max(self.peak, self.live)
        return out

    def _free(self, key, nbytes):
        self.live -= nbytes
        self.seen.discard(key)


def _traced(h, heads, kv, ffn, tiled: bool, recompute: bool, reentrant: bool = True,
            liger: bool = False, seq: int = SEQ, mbs: int = 1) -> tuple[int, int]:
    """(bytes kept after the forward, most bytes held above them in the backward, the incoming
    gradient's included) for one block of mbs x seq tokens; the block's input and output are not the
    layer's (the checkpoint's and the next layer's). No activation may have a weight's shape."""
    rows = mbs * seq
    assert not {rows, -(-rows // math.ceil(seq / h))} & {h, ffn, h // heads * kv}, "a weight's shape: skipped"
    torch.manual_seed(0)
    block = (LigerHFBlock if liger else HFBlock)(h, heads, kv, ffn).to(torch.bfloat16)
    block.regions += ("tiled",) if tiled else ()
    skip = {tuple(p.shape) for p in block.parameters()} | {tuple(p.shape[::-1]) for p in block.parameters()}
    x = torch.randn(mbs, seq, h, dtype=torch.bfloat16, requires_grad=True)
    tables = block.tables(seq)
    existing = {t.untyped_storage().data_ptr() for t in (x, *tables)}
    with _Live(skip, existing) as live:
        y = checkpoint(block, x, tables, use_reentrant=reentrant) if recompute else block(x, tables)
        gc.collect()
        kept = live.live - y.untyped_storage().nbytes()
        live.peak = live.live
        y.backward(torch.ones_like(y))
    return kept, live.peak - kept - y.untyped_storage().nbytes()


def _model(h, heads, kv, ffn) -> ModelSpec:
    return ModelSpec(layers=1, hidden=h, heads=heads, kv_heads=kv, ffn=ffn, vocab=100)


def _par(tiled: bool, recompute: bool, liger: bool = False, seq: int = SEQ, mbs: int = 1) -> ParallelConfig:
    return ParallelConfig(mbs=mbs, seq=seq, framework="deepspeed", zero=3, dp=2, tiled_mlp=tiled,
                          recompute="full" if recompute else "none", elementwise="fused" if liger else "")


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("tiled", [False, True], ids=["mlp", "tiled"])
@pytest.mark.parametrize("recompute", [False, True], ids=["none", "full"])
@pytest.mark.parametrize("liger", [False, True], ids=["eager", "liger"])
def test_kept_and_backward_bytes_match_what_pytorch_holds(shape, tiled, recompute, liger):
    """What the layer keeps, exactly; what its backward holds above that, within 0.2% (the eager
    norm's phase is 17.99 bytes of T x h, taken as 18). The forms were read from the first shape's
    traces; the others test them."""
    model, par = _model(*shape), _par(tiled, recompute, liger)
    kept, working = _traced(*shape, tiled, recompute, liger=liger)
    predicted = saved_per_layer(model, par, False)
    if recompute or liger:             # the block's input (the checkpoint's, or what Liger's norm keeps),
        predicted -= layer_activations(model, par, False).layer_input       # which the test made beforehand
    assert predicted == kept
    assert layer_working(model, par, False) == pytest.approx(working, rel=2e-3)


@pytest.mark.parametrize("seq,mbs", [(1000, 1), (1000, 2), (2600, 4)])
@pytest.mark.parametrize("liger", [False, True], ids=["eager", "liger"])
def test_a_tiles_backward_where_it_is_the_peak(seq, mbs, liger):
    """Short sequences, where the tile's backward is the eager block's peak too, and micro-batches of
    several sequences, whose rows DeepSpeed tiles together: 320 wide, 1 kv head, ffn 3.5 h."""
    shape = (320, 5, 1, 1120)
    model, par = _model(*shape), _par(True, False, liger, seq, mbs)
    kept, working = _traced(*shape, True, False, liger=liger, seq=seq, mbs=mbs)
    assert saved_per_layer(model, par, False) - (layer_activations(model, par, False).layer_input if liger else 0) \
        == kept
    assert layer_working(model, par, False) == pytest.approx(working, rel=2e-3)


@pytest.mark.parametrize("tiled", [False, True], ids=["mlp", "tiled"])
def test_non_reentrant_checkpoint_holds_less_than_the_reentrant_count(tiled):
    """transformers 5's non-reentrant checkpoint does not hold the block's output it ran again: 2 bytes
    of T x h less than the reentrant count the calculators take."""
    shape = SHAPES[2]
    model, par = _model(*shape), _par(tiled, True)
    _, working = _traced(*shape, tiled, True, reentrant=False)
    assert layer_working(model, par, False) - working == pytest.approx(2 * SEQ * shape[0], rel=0.01)


def test_the_bound_is_kept_for_blocks_not_traced():
    """Other frameworks' blocks, an MoE layer and a compiled block keep the bound: gradients as large as
    what the layer saved."""
    model = _model(*SHAPES[0])
    for par in (replace(_par(False, False), framework="fsdp2"), replace(_par(False, False), compile=True)):
        assert backward_transient(model, par, False) == layer_activations(model, par, False).total
    moe = model_from_name("mixtral-8x7b")
    par = replace(_par(False, False), seq=1024)
    assert backward_transient(moe, par, True) == layer_activations(moe, par, True).total


def test_a_tiled_mlp_runs_its_forward_once_more():
    """FlopCounterMode over the tiled block's forward and backward counts the MLP's forward FLOPs once
    more than the plain block's: the calculators' recomputed FLOPs with tiled_mlp."""
    h, heads, kv, ffn = SHAPES[0]
    seq = 1024

    def flops(tiled):
        block = HFBlock(h, heads, kv, ffn).to(torch.bfloat16)
        block.regions = ("tiled",) if tiled else ()
        x = torch.randn(1, seq, h, dtype=torch.bfloat16, requires_grad=True)
        with FlopCounterMode(display=False) as counter:
            block(x, block.tables(seq)).sum().backward()
        return counter.get_total_flops()
    extra = recomputed_flops_per_token(_model(h, heads, kv, ffn), seq, "none", framework="deepspeed", tiled_mlp=True)
    assert flops(True) - flops(False) == pytest.approx(extra * seq, rel=1e-9)


LLAMA = model_from_name("llama3-8b")
H100 = ClusterSpec(gpu_from_name("H100-80GB"), nodes=1, gpus_per_node=8)


def _alst(seq: int, tiled: bool, offload: bool) -> ParallelConfig:
    """ALST's runs of Llama 3 8B on 8 H100s: Ulysses over all 8 (cp), ZeRO 3 with the optimizer in host
    memory, full recompute, the tiled loss."""
    return ParallelConfig(dp=1, cp=8, zero=3, mbs=1, gbs=1, seq=seq, framework="deepspeed", recompute="full",
                          loss="chunked", optimizer_offload=1.0, tiled_mlp=tiled,
                          offload_layers=LLAMA.layers if offload else 0)


def test_tiled_mlp_frees_what_the_mlp_kept_and_costs_a_forward():
    """At ALST's 1.2M tokens on 8 H100s (Ulysses 8, 150k tokens a GPU) the tiled MLP takes the MLP's
    T x ffn intermediates out of the recomputed layer, many GiB, and costs one more MLP forward a layer."""
    plain, tiled = (estimate_memory(LLAMA, H100, _alst(1_200_000, t, False)) for t in (False, True))
    assert plain.total_gib - tiled.total_gib > 10
    profile = default_profile("H100-80GB")
    fast, slow = (estimate_step(LLAMA, H100, _alst(1_200_000, t, False), profile) for t in (False, True))
    assert fast.time_s < slow.time_s < 1.05 * fast.time_s
    assert slow.hfu > fast.hfu * slow.time_s / fast.time_s * 0.999


@pytest.mark.parametrize("change,words", [
    ({"framework": "fsdp2"}, "framework deepspeed"),
    ({"framework": "megatron", "zero": 1}, "framework deepspeed"),
])
def test_tiled_mlp_is_refused_where_no_framework_runs_it(change, words):
    with pytest.raises(ConfigError, match="tiled_mlp") as err:
        check_layout(LLAMA, H100, replace(_alst(65536, True, False), optimizer_offload=0.0, loss="", **change))
    assert words in str(err.value)


def test_tiled_mlp_is_refused_on_models_without_a_dense_gated_mlp():
    for name, what in (("mixtral-8x7b", "a mixture of experts"), ("gpt3-175b", "not gated")):
        model = model_from_name(name)
        with pytest.raises(ConfigError, match="tiled_mlp") as err:
            check_layout(model, ClusterSpec(gpu_from_name("H100-80GB"), nodes=8, gpus_per_node=8),
                         ParallelConfig(dp=64, zero=3, mbs=1, gbs=64, seq=4096, framework="deepspeed", tiled_mlp=True))
        assert what in str(err.value)


@pytest.mark.parametrize("value", ["yes", "<img src=x>", "/etc/passwd", 2, [True]])
def test_hostile_tiled_mlp_values_get_a_message_naming_the_field(value):
    try:
        par = parse_parallel({"tiled_mlp": value, "framework": "deepspeed", "zero": 3})
    except ConfigError as exc:
        assert "tiled_mlp" in str(exc)          # the pages escape what they show (tests/playbook)
    else:
        assert par.tiled_mlp in (True, False)


def test_the_deepspeed_export_says_how_to_run_tiling_and_liger():
    from calculators.planning.export import export
    config, notes = export("deepspeed", LLAMA, H100, replace(_alst(1_200_000, True, True), elementwise="fused"))
    assert "cpu_checkpointing" in config and "offload_optimizer" in config
    text = " ".join(notes)
    assert "TiledMLP" in text and "AutoLigerKernelForCausalLM" in text and "swiglu=False" in text
    _, plain = export("deepspeed", LLAMA, H100, replace(_alst(65536, False, False), loss="", elementwise=""))
    assert not any("Liger" in n or "TiledMLP" in n for n in plain)


def test_the_planner_tiles_only_when_asked():
    """tiled_mlp is a constraint of one value: plans carry it, never choose it."""
    from calculators.planning.planner import plan
    asked = {"framework": "deepspeed", "zero": 3, "recompute": "full", "optimizer_offload": 1.0, "tiled_mlp": True,
             "tp": 1, "pp": 1}
    tiled = plan(LLAMA, H100, 262144, 1, asked)
    assert tiled.plans and all(p.par.tiled_mlp for p in tiled.plans)
    untiled = plan(LLAMA, H100, 262144, 1, {k: v for k, v in asked.items() if k != "tiled_mlp"})
    assert all(not p.par.tiled_mlp for p in untiled.plans)
    with pytest.raises(ConfigError, match="tiled_mlp"):
        plan(LLAMA, H100, 262144, 1, {**asked, "tiled_mlp": [True, False]})


ALST_ASKS = {"framework": "deepspeed", "zero": 3, "recompute": "full", "tp": 1, "pp": 1, "optimizer_offload": 1.0,
             "loss": "chunked", "elementwise": "fused"}


def test_a_plan_that_does_not_fit_says_the_tiled_mlp_would():
    """ALST's 1.2M tokens on 8 H100s without the tiled MLP: nothing fits, and the answer says what tiling the
    MLP would need; asked for, the plan is ALST's layout (Ulysses over the 8 GPUs)."""
    from calculators.planning.planner import plan
    untiled = plan(LLAMA, H100, 1_200_000, 1, ALST_ASKS)
    assert not untiled.plans and "tiled_mlp true" in untiled.impossible
    tiled = plan(LLAMA, H100, 1_200_000, 1, {**ALST_ASKS, "tiled_mlp": True})
    best = tiled.plans[0].par
    assert (best.cp, best.tiled_mlp, best.loss, best.elementwise) == (8, True, "chunked", "fused")


def test_the_planner_offloads_deepspeeds_checkpoints_only_where_needed():
    """offload_layers of every layer is DeepSpeed's cpu_checkpointing: taken at 3.7M tokens, where nothing
    fits without it, and not at 128k, where the layout fits on the GPU."""
    from calculators.planning.planner import plan
    asks = {**ALST_ASKS, "tiled_mlp": True, "offload_layers": [0, LLAMA.layers]}
    assert plan(LLAMA, H100, 3_700_000, 1, asks).plans[0].par.offload_layers == LLAMA.layers
    assert plan(LLAMA, H100, 131_072, 8, asks).plans[0].par.offload_layers == 0
    with pytest.raises(ConfigError, match="plan constraints: loss"):
        plan(LLAMA, H100, 131_072, 8, {**asks, "loss": ["eager", "chunked"]})
    with pytest.raises(ConfigError, match="plan constraints: elementwise"):
        plan(LLAMA, H100, 131_072, 8, {**asks, "elementwise": "<img src=x>"})


def test_checkpoint_offload_in_the_planner_keeps_the_pipelined_layouts():
    """cpu_checkpointing runs without a pipeline: allowing it must not cost the layouts with pp > 1 that fit."""
    from calculators.planning.planner import plan
    asks = {"framework": "deepspeed", "zero": [1, 3], "recompute": "full", "pp": [1, 2, 4, 8]}
    fits = {(p.par.tp, p.par.cp, p.par.pp) for p in plan(LLAMA, H100, 131_072, 8, asks).plans}
    offload = {(p.par.tp, p.par.cp, p.par.pp)
               for p in plan(LLAMA, H100, 131_072, 8, {**asks, "offload_layers": [0, LLAMA.layers]}).plans}
    assert fits <= offload
    with pytest.raises(ConfigError, match="offload_layers may be 0 or 32"):
        plan(LLAMA, H100, 131_072, 8, {**asks, "offload_layers": [16]})


def test_what_the_answers_say_of_offloaded_checkpoints_and_kernels():
    from calculators.planning.explain import short
    from calculators.planning.export import export
    assert "offload=32" in short(_alst(3_700_000, True, True))
    par = ParallelConfig(dp=8, zero=3, gbs=8, seq=8192, framework="fsdp2", loss="chunked", elementwise="fused")
    _, notes = export("torchtitan", LLAMA, H100, par)
    assert any("loss chunked" in n for n in notes) and any("elementwise fused" in n for n in notes)
    _, notes = export("deepspeed", LLAMA, H100, replace(_alst(65536, False, False), elementwise=""))
    assert any("fused_linear_cross_entropy=True" in n and "AutoLigerKernelForCausalLM would" in n for n in notes)
