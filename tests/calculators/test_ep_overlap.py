"""Megatron's EP overlap (overlap_moe_expert_parallel_comm) holds no more activations at its peak.
Without a pipeline its schedule runs one micro-batch's forward layer by layer beside another's
backward (combined_1f1b.py), building one while freeing the other. Under the interleaved schedule
each rank warms up one chunk more (schedules.py, get_pp_rank_microbatches), but its steady state then
runs each forward beside a backward in the same way: warm-up + 1 chunks at the peak, as plain 1F1B
reaches with its forward before each backward. (Counting the extra warm-up chunk alone called two
published runs that used the overlap out of memory.)"""
from dataclasses import replace

import pytest

from calculators.memory.estimate import estimate_memory
from calculators.specs.hardware import ClusterSpec, gpu_from_name
from calculators.specs.parallel import ParallelConfig
from calculators.specs.presets import model_from_name

MODEL = model_from_name("qwen3-30b-a3b")
CLUSTER = ClusterSpec(gpu_from_name("H100-80GB"), nodes=4, gpus_per_node=8)


@pytest.mark.parametrize("layout", [dict(pp=1, dp=32), dict(pp=4, vpp=2, schedule="interleaved", dp=8),
                                    dict(pp=4, vpp=4, schedule="interleaved", dp=8)])
def test_ep_overlap_holds_what_the_plain_schedule_holds_at_its_peak(layout):
    par = ParallelConfig(ep=8, gbs=256, seq=4096, zero=1, recompute="selective", **layout)
    plain = estimate_memory(MODEL, CLUSTER, par).stages
    paired = estimate_memory(MODEL, CLUSTER, replace(par, ep_overlap=True)).stages
    assert [s.activations_gib for s in paired] == pytest.approx([s.activations_gib for s in plain])
