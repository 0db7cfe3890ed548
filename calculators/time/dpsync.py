"""The data-parallel gradient sync of one pipeline rank, as the frameworks run it: gradients in
the framework's buckets (all-reduce for ZeRO-0, reduce-scatter for ZeRO-1/2; ZeRO-2 every
micro-batch, reduces_every_micro_batch), ZeRO-1/2's weight
all-gathers after the optimizer, and ZeRO-3's per-layer gathers and reduce-scatters every
micro-batch, prefetched behind compute (step.py's DP entry says what hides each)."""
from __future__ import annotations

import math

from ..memory.activations import BF16
from .comm import collective_time, hsdp_groups
from ..specs.fp8 import fp8_layer_params, param_gather_bytes
from ..specs.frameworks import grad_bucket_bytes, param_gather_count
from ..specs.overlap import param_gather_overlapped

def layer_tensors(model, par, moe: bool) -> tuple[int, int]:
    """(dense, expert) parameter tensors of one layer on one GPU: each weight matrix, the norms."""
    mms = model.layer_matmuls(moe)
    dense = sum(1 for mm in mms if not mm.expert) + 2
    expert = sum(math.ceil(mm.stored / par.ep) for mm in mms if mm.expert)
    return dense, expert


def reduces_every_micro_batch(par) -> bool:
    """Whether the framework reduces each micro-batch's gradients, not once a step: wherever it
    shards them (ZeRO 2/3), since a shard cannot hold the sum of every rank's full gradients.
    - fsdp2: fully_shard reduce-scatters (and, under HSDP, all-reduces) at every backward, as
      torchtitan runs its gradient accumulation (it never calls set_requires_gradient_sync(False);
      at every micro-batch on a fake process group too, tests/calculators/test_hsdp.py); under a
      pipeline, PyTorch's stage turns the sync off until the last micro-batch.
    - megatron: Megatron-FSDP's optim_grads and optim_grads_params reduce at every backward,
      pipeline or not (megatron_fsdp.py, grad_reduce_every_bprop: "for grads shard mode there will
      actually always be gradient sync happening", its no_sync notwithstanding).
    - deepspeed: ZeRO 2/3 reduce their buckets at every backward (stage_1_and_2.py,
      reduce_ready_partitions_and_remove_grads: partition_gradients; its engine refuses no_sync
      with gradient partitioning). ZeRO 0/1 reduce at the step's last micro-batch only.
    (nanotron has no ZeRO 2/3; it is given DeepSpeed's layout there.)"""
    return par.zero >= 2 and (par.framework != "fsdp2" or par.pp == 1)


def gather_bytes(model, par, n_dense: int, n_moe: int, dense: float, expert: float) -> tuple[float, float]:
    """(dense, expert) bytes per parameter of one pipeline rank's weight all-gathers, holding
    `n_dense` dense and `n_moe` MoE layers and `dense` and `expert` parameters: bf16, but the FP8
    layers' weights where the framework gathers them in FP8 (fp8.param_gather_bytes)."""
    b_dense, b_expert = param_gather_bytes(par)
    if b_dense == BF16 and b_expert == BF16:
        return BF16, BF16
    fp8_dense = fp8_expert = 0.0
    for moe, n in ((False, n_dense), (True, n_moe)):
        if n:
            d, e = fp8_layer_params(model, moe, par.tp, par.ep, par.etp)
            fp8_dense, fp8_expert = fp8_dense + n * d, fp8_expert + n * e
    return (BF16 - (BF16 - b_dense) * min(1.0, fp8_dense / dense) if dense else BF16,
            BF16 - (BF16 - b_expert) * min(1.0, fp8_expert / expert) if expert else BF16)


def dp_sync(dense, expert, compute, m, par, cluster, profile, dense_g, expert_g, grad_bytes, tensors=(1, 1),
             units=1, first_fwd=0.0, gather=(BF16, BF16)):
    """(gradient sync that backward can hide, exposed ZeRO traffic, ZeRO traffic hidden behind
    compute) of one pipeline rank. Gradients go in the framework's buckets, ZeRO-1/2's weight
    all-gathers in its gather units (frameworks.py), `gather` bytes per (dense, expert) parameter
    (gather_bytes); every collective pays its latency. Where the
    framework overlaps those all-gathers with the next step's forward
    (overlap.param_gather_overlapped), all but the first unit hide behind the rank's forward of
    its first micro-batch (`first_fwd`)."""
    sync, exposed_extra, hidden_extra = 0.0, 0.0, 0.0
    for params, whole, count, nbytes in ((dense, dense_g, tensors[0], gather[0]),
                                         (expert, expert_g, tensors[1], gather[1])):
        if params <= 0 or whole.size <= 1:
            continue
        # HSDP: gathers and reduce-scatters within a replica's shard group, then the gradient shard
        # all-reduced across the replicas (FSDP2's HSDP: reduce-scatter, then all-reduce)
        g, reps = hsdp_groups(whole, par.dp_replicate)
        if par.zero in (0, 1, 2):
            total = grad_bytes * params
            bucket = grad_bucket_bytes(par.framework, par.zero, g.size, grad_bytes)
            n = max(1, math.ceil(total / bucket)) if bucket else max(1, units)
            reduce = n * (collective_time("all_reduce" if par.zero == 0 else "reduce_scatter", total / n, g, cluster,
                                          profile) + collective_time("all_reduce", total / n / g.size, reps, cluster,
                                                                     profile))
            if reduces_every_micro_batch(par) and m > 1:
                # ZeRO-2 reduces each micro-batch's gradients (reduces_every_micro_batch): the earlier
                # ones run behind their own micro-batch's compute, the last one's as below
                hid = min((m - 1) * reduce, (m - 1) * profile.overlap["zero3"] * compute)
                exposed_extra, hidden_extra = exposed_extra + (m - 1) * reduce - hid, hidden_extra + hid
            sync += reduce
            if par.zero:
                k = param_gather_count(par.framework, par.zero, g.size, params, count, units)
                gather = k * collective_time("all_gather", nbytes * params / k, g, cluster, profile)
                hidden = min(gather * (1 - 1 / k), profile.overlap["dp"] * first_fwd) \
                    if param_gather_overlapped(par.framework) else 0.0
                exposed_extra, hidden_extra = exposed_extra + gather - hidden, hidden_extra + hidden
        else:   # ZeRO-3: per layer, gather weights for forward and backward, reduce-scatter grads,
            # every micro-batch (one collective per layer, the unit FSDP and DeepSpeed wrap). Each
            # layer's gather is prefetched behind the previous layer's compute and its reduce-
            # scatter runs behind the next one's, but the step's first gather has nothing before it
            # and its last reduce-scatter nothing after: those two wait.
            k = max(1, units)
            gather = collective_time("all_gather", nbytes * params / k, g, cluster, profile)
            scatter = collective_time("reduce_scatter", grad_bytes * params / k, g, cluster, profile) + \
                collective_time("all_reduce", grad_bytes * params / k / g.size, reps, cluster, profile)
            # gradients are reduced every micro-batch, but under a pipeline PyTorch's stage holds them
            # until the last one (frameworks.pipeline_grad_bytes) and reduces once a step
            reduces = m if reduces_every_micro_batch(par) else 1
            total = k * (2 * gather * m + scatter * reduces)
            hidden = min(total, profile.overlap["zero3"] * compute * m)
            edges = min(gather + scatter, hidden)
            exposed_extra += total - hidden + edges
            hidden_extra += hidden - edges
    return sync, exposed_extra, hidden_extra
