"""Layout validation: each broken rule is named, with its numbers and what to change."""
import pytest

from calculators.specs.errors import ConfigError
from calculators.specs.hardware import GPU_PRESETS, ClusterSpec, gpu_from_name
from calculators.specs.parallel import ParallelConfig, check_layout
from calculators.specs.stages import megatron_split, virtual_split
from calculators.specs.presets import model_from_name

H100 = gpu_from_name("H100-80GB")
L70 = model_from_name("llama3-70b")
MIX = model_from_name("mixtral-8x7b")


def cluster(nodes=1, gpn=8):
    return ClusterSpec(H100, nodes=nodes, gpus_per_node=gpn)


@pytest.mark.parametrize("model,nodes,par,words", [
    (L70, 1, dict(dp=4, tp=4), r"dp\*tp\*pp\*cp = 4\*4\*1\*1 = 16 GPUs but the cluster has 1x8 = 8"),
    (L70, 2, dict(dp=1, tp=16), r"tp=16 must divide kv_heads=8"),
    (L70, 1, dict(dp=1, tp=8, pp=1, gbs=3, mbs=2), r"gbs=3 must be a multiple of dp\*mbs"),
    (L70, 16, dict(dp=1, tp=1, pp=128, gbs=128), r"layers=80 cannot fill pp\*vpp"),
    (L70, 1, dict(dp=1, tp=1, pp=8, vpp=2, gbs=12, schedule="interleaved"), r"microbatches m = gbs/\(dp\*mbs\) = 12 divisible by pp=8"),
    (L70, 1, dict(dp=8, ep=2, gbs=8), r"ep=2 needs a mixture-of-experts model"),
    (MIX, 1, dict(dp=8, ep=3, gbs=8), r"ep=3 must divide model.moe.experts=8"),
    (MIX, 1, dict(dp=2, tp=4, ep=4, gbs=8), r"ep\*etp = 4\*4 must divide dp\*cp\*tp = 8"),
    (L70, 1, dict(dp=4, cp=2, seq=4098, gbs=4), r"seq=4098 must be divisible by 2\*cp = 4"),
    (L70, 1, dict(dp=1, tp=8, sp=True, seq=4100, gbs=1), r"seq/cp = 4100 divisible by tp=8"),
])
def test_broken_rules_are_named(model, nodes, par, words):
    with pytest.raises(ConfigError, match=words):
        check_layout(model, cluster(nodes), ParallelConfig(**par))


def test_every_problem_is_reported_at_once():
    with pytest.raises(ConfigError) as err:
        check_layout(L70, cluster(), ParallelConfig(dp=3, tp=16, gbs=5))
    assert len(err.value.problems) >= 3


def test_valid_mixtral_with_etp1():
    assert check_layout(MIX, cluster(), ParallelConfig(dp=2, tp=4, ep=8, etp=1, sp=True, gbs=8)) == []


@pytest.mark.parametrize("par,words", [
    (dict(dp=1, tp=16, sp=True, gbs=1), "spans more than one node"),
    (dict(dp=1, tp=2, pp=8, gbs=4), "pipeline never fills"),
    (dict(dp=2, tp=8, gbs=2), "without sequence parallelism"),
])
def test_warnings(par, words):
    world = ParallelConfig(**par).world
    model = model_from_name("llama2-7b") if par["tp"] == 16 else L70      # 32 kv heads: tp=16 divides
    warnings = check_layout(model, cluster(max(1, world // 8), min(8, world)), ParallelConfig(**par))
    assert any(words in w for w in warnings)


@pytest.mark.parametrize("field,value", [("tp", 0), ("tp", "8"), ("zero", 4), ("recompute", "some"),
                                         ("schedule", "1F1B"), ("framework", "jax"), ("precision", "fp4"),
                                         ("split", (2, 0, 2)), ("split", (True, 2)), ("split", (1.0, 2)),
                                         ("split", ([1], 2)), ("recompute_ranks", ("none", "some")),
                                         ("recompute_ranks", (["none"],))])
def test_bad_field_values(field, value):
    with pytest.raises(ConfigError, match=field):
        ParallelConfig(**{field: value})


def test_fp8_needs_fp8_hardware():
    a100 = ClusterSpec(gpu_from_name("A100-80GB"), nodes=1, gpus_per_node=8)
    with pytest.raises(ConfigError, match="no FP8"):
        check_layout(L70, a100, ParallelConfig(dp=8, gbs=8, precision="fp8"))


@pytest.mark.parametrize("name", list(GPU_PRESETS))
def test_gpu_presets(name):
    g = gpu_from_name(name.lower())
    assert g.source and g.memory_gib > 30 and g.bf16_tflops >= 312 and g.intra_node_gbps > g.inter_node_gbps
    assert g.fp8_tflops in (0,) or g.fp8_tflops == pytest.approx(2 * g.bf16_tflops, rel=0.01)


def test_megatron_embedding_and_loss_split():
    """Megatron's --account-for-embedding/loss-in-pipeline-split: the embedding and the loss each
    take a layer's place, so 126 layers fill 64 virtual stages as 1, 2, ..., 2, 1."""
    assert megatron_split(126, 64) == (1,) + (2,) * 62 + (1,)
    assert megatron_split(94, 32) == (2,) + (3,) * 30 + (2,)
    with pytest.raises(ConfigError, match="layers \\+ 2 = 82 divisible by the 64"):
        megatron_split(80, 64)
    L405 = model_from_name("llama3-405b")
    base = dict(dp=8, tp=8, pp=8, cp=2, vpp=8, schedule="interleaved", gbs=512, seq=8192, sp=True)
    # without a split the layout takes Megatron's, and says so (Llama 3 405B's recipes run it)
    warned = check_layout(L405, cluster(128), ParallelConfig(**base))
    assert any("Megatron's split counting the embedding and the loss" in w and "split=1,2,...,2,1" in w for w in warned)
    from calculators.memory.estimate import pipeline_stages
    assert [len(s) for s in pipeline_stages(L405, ParallelConfig(**base))] == list(megatron_split(126, 64))
    assert check_layout(L405, cluster(128), ParallelConfig(**base, split=megatron_split(126, 64))) == []
    # 128 stages for 126 layers: the first holds only the embedding, the last only the loss, as
    # Megatron-Bridge runs Llama 3 405B on GB200 at tp 4, pp 16, vpp 8
    assert megatron_split(126, 128) == (0,) + (1,) * 126 + (0,)
    deep = dict(base, tp=4, pp=16, cp=1, vpp=8, dp=2)
    assert any("split=0,1,...,1,0" in w for w in check_layout(L405, cluster(16), ParallelConfig(**deep)))
    assert [len(s) for s in pipeline_stages(L405, ParallelConfig(**deep))] == list(megatron_split(126, 128))
    # elsewhere (80 layers over 24 stages, no Megatron split) the first stages take one layer more
    warned = check_layout(L70, cluster(), ParallelConfig(dp=1, pp=8, vpp=3, gbs=8, schedule="interleaved"))
    assert any("the first 8 stages take one layer more" in w for w in warned)
    with pytest.raises(ConfigError, match="pp\\*vpp = 64 pipeline stages its layers"):
        check_layout(L405, cluster(128), ParallelConfig(**base, split=(63, 63)))


def test_virtual_split_for_interleaved_layouts():
    """What the planner gives an interleaved layout: nothing where p*v divides the layers,
    Megatron's split where only it does and Megatron runs the layout, nothing otherwise."""
    assert virtual_split(126, 16, 2) == (3,) + (4,) * 30 + (3,) == megatron_split(126, 32)
    assert virtual_split(128, 16, 2) == () and virtual_split(126, 16, 1) == ()
    assert virtual_split(126, 16, 2, framework="fsdp2") == ()     # Megatron's flags, Megatron's split
    assert virtual_split(126, 16, 3) == ()                          # 128 is not divisible by 48 either


def test_moe_knobs_on_a_dense_model_are_named_as_changing_nothing():
    cluster = ClusterSpec(gpu_from_name("H100-80GB"), nodes=1)
    dense = model_from_name("llama3-8b")
    warnings = check_layout(dense, cluster, ParallelConfig(dp=8, etp=2, dispatcher="deepep", gbs=64))
    assert any("etp=2 and dispatcher=deepep act on a mixture-of-experts layer" in w for w in warnings)
    assert check_layout(dense, cluster, ParallelConfig(dp=4, tp=2, sp=True, gbs=64)) == []
