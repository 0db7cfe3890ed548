"""How often each framework reduces gradients: once a step at ZeRO 0/1, at every micro-batch
wherever the gradients are sharded (ZeRO 2/3; dpsync.reduces_every_micro_batch), the sources cited
there. A ZeRO-2 that kept sharded gradients in memory but reduced them once a step would save
memory at no cost in time, and the planner would pick it everywhere."""
import pytest

from calculators.specs.hardware import ClusterSpec, gpu_from_name
from calculators.specs.parallel import ParallelConfig
from calculators.specs.presets import model_from_name
from calculators.time.profiles import default_profile
from calculators.time.step import estimate_step

MODEL = model_from_name("llama3-8b")
CLUSTER = ClusterSpec(gpu_from_name("H100-80GB"), nodes=2, gpus_per_node=8)


def dp_traffic(framework: str, zero: int, microbatches: int, pp: int = 1) -> float:
    """Seconds of data-parallel traffic in a step, hidden or not."""
    dp = 16 // pp
    par = ParallelConfig(framework=framework, dp=dp, pp=pp, zero=zero, mbs=1, gbs=dp * microbatches, seq=4096,
                         recompute="full")
    out = estimate_step(MODEL, CLUSTER, par, default_profile("H100-80GB")).as_dict()["breakdown_s"]
    return out["dp_exposed"] + out["dp_hidden"]


@pytest.mark.parametrize("framework", ["megatron", "deepspeed", "fsdp2"])
def test_zero_2_reduces_every_micro_batch_and_zero_1_once_a_step(framework):
    one = [dp_traffic(framework, 1, m) for m in (2, 4, 8)]
    assert one[0] == pytest.approx(one[1]) == pytest.approx(one[2])
    two = [dp_traffic(framework, 2, m) for m in (2, 4, 8)]
    per_micro_batch = (two[1] - two[0]) / 2
    assert per_micro_batch > 0
    assert two[2] - two[1] == pytest.approx(4 * per_micro_batch)


def test_under_a_pipeline_only_fsdp2_holds_its_sharded_gradients_until_the_last_micro_batch():
    """PyTorch's pipeline stage turns FSDP2's sync off until the last micro-batch; Megatron-FSDP
    reduces at every backward, pipeline or not."""
    fsdp = [dp_traffic("fsdp2", 2, m, pp=2) for m in (4, 8)]
    assert fsdp[0] == pytest.approx(fsdp[1])
    megatron = [dp_traffic("megatron", 2, m, pp=2) for m in (4, 8)]
    assert megatron[1] > megatron[0] * 1.5
