"""Megatron's EP overlap (overlap_moe_expert_parallel_comm): what it holds in memory. Without a
pipeline its schedule builds one micro-batch's layers while freeing the other's (combined_1f1b.py):
no more in flight. Under the interleaved schedule each rank warms up one chunk more, so that every
paired forward and backward are independent (schedules.py, get_pp_rank_microbatches): one more chunk
of activations in flight."""
from dataclasses import replace

import pytest

from calculators.memory.estimate import estimate_memory
from calculators.pipeline.simulate import inflight_microbatches
from calculators.specs.hardware import ClusterSpec, gpu_from_name
from calculators.specs.parallel import ParallelConfig
from calculators.specs.presets import model_from_name

MODEL = model_from_name("qwen3-30b-a3b")
CLUSTER = ClusterSpec(gpu_from_name("H100-80GB"), nodes=4, gpus_per_node=8)


def test_ep_overlap_holds_one_more_chunk_under_interleaving_and_nothing_more_without_a_pipeline():
    flat = ParallelConfig(pp=1, ep=8, dp=32, gbs=256, seq=4096, zero=1, recompute="selective")
    assert estimate_memory(MODEL, CLUSTER, replace(flat, ep_overlap=True)).total_gib == \
        pytest.approx(estimate_memory(MODEL, CLUSTER, flat).total_gib)
    for vpp in (2, 4):
        piped = ParallelConfig(pp=4, vpp=vpp, schedule="interleaved", ep=8, dp=8, gbs=256, seq=4096, zero=1,
                               recompute="selective")
        one = estimate_memory(MODEL, CLUSTER, piped).stages
        two = estimate_memory(MODEL, CLUSTER, replace(piped, ep_overlap=True)).stages
        for rank, (a, b) in enumerate(zip(one, two)):
            held = inflight_microbatches("interleaved", 4, vpp, piped.microbatches, rank)
            # the saved activations grow by a chunk (1/vpp of a micro-batch of the rank's layers); the
            # working set of the layer being computed does not
            assert b.activations_gib > a.activations_gib
            assert b.activations_gib - a.activations_gib <= a.activations_gib / held / vpp * (1 + 1e-9)
            assert b.activations_gib - a.activations_gib >= a.activations_gib / (held + 1) / vpp
