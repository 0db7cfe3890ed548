"""The optimizer, and ZeRO-3's weights, in host memory (parallel.optimizer_offload, param_offload):
what leaves the GPU, what the host holds, what crosses the host link each step and what the host's
optimizer step costs. As the frameworks' sources run it, per element of a rank's optimizer shard
(bf16 model; DeepSpeed at edaa722, Megatron-LM at d98e8a6, PyTorch 2.13's FSDP2):

- deepspeed, offload_optimizer (ZeRO 1 to 3): the fp32 master, Adam's m and v and an fp32 gradient
  live pinned on the host, with a bf16 buffer beside them (ZeRO 1/2: the staging copy of the
  updated weights; ZeRO 3: the gradient partition, for every element whatever Twin-Flow's ratio):
  18 bytes. At ZeRO 2 and 3 the GPU keeps no gradient partition, only the reduce buckets, and the
  gradients go down during each backward, bucket by bucket: 4 bytes in fp32 at ZeRO 2 (cast on the
  GPU), 8 at ZeRO 3 (its partition_grads copies the bf16 partition down, up again and down in fp32).
  ZeRO 1 keeps its whole bf16 gradients on the GPU and reduces them once, at the last micro-batch:
  its 4 bytes go down after the backward. Then DeepSpeedCPUAdam steps sub-group by sub-group (28 bytes
  of host traffic an element, plus 6 for the cast to bf16 in Python) and 2 bytes of bf16 go up, each
  sub-group in turn. Twin-Flow's ratio (ZeRO 3 only) steps that share on the CPU and the rest on the
  GPU. offload_param (ZeRO 3 only): the bf16 weight shard stays on the host (2 bytes more there),
  copied up for each gather, forward and backward (2 bytes each); the weights the host steps need
  not go up after the step, those the GPU steps go down (2 bytes).
- megatron, --optimizer-cpu-offload (with the precision-aware, distributed optimizer): the share
  --optimizer-offload-fraction of the elements keeps its fp32 master, m, v and an fp32 gradient copy
  on the host (16 bytes); the GPU keeps its bf16 weights and its whole main-gradient buffer. Inside
  the optimizer step the gradients go down in fp32 (4 bytes) and the fp32 master comes up to be cast
  on the GPU (4 bytes, a non-blocking copy), around torch's fused CPU AdamW (28 bytes). Serial unless
  --overlap-cpu-optimizer-d2h-h2d (not modelled).
- fsdp2, CPUOffloadPolicy (torchtitan's training.enable_cpu_offload): weights, gradients and the
  optimizer together. The fp32 shard is the master (16 bytes with its gradient and m, v); each gather
  copies it up in fp32 (4 bytes, cast on the GPU), each reduce-scatter's fp32 output goes down
  (4 bytes; once a step under a pipeline, whose reduce-scatters wait for the last micro-batch), and
  torch's fused CPU AdamW steps the shards (28 bytes). Nothing of the model stays on the GPU between
  steps but, at ZeRO 2, the gathered bf16 weights between forward and backward. Not counted: the
  frameworks' small staging buffers (DeepSpeed's temp_grad_buffer_for_gpu_offload, one parameter's
  size) and whether the host has the memory (estimate.py warns past a DGX's 2 TB a node).

The host step's time is its host memory traffic over what a node sustains
(hardware.host_optimizer_gbps; DEFAULT_HOST_OPTIMIZER_GBPS says what it was fitted on), all the node's
ranks stepping at once. Copies made during the passes hide behind their compute; the step and the
copies around it are exposed.
"""
from __future__ import annotations

from ..specs.hardware import ClusterSpec
from ..specs.parallel import ParallelConfig

HOST_STEP_BYTES = {"deepspeed": 34.0, "megatron": 28.0, "fsdp2": 28.0}   # host memory traffic of its step


def gpu_layout(layout: dict, par: ParallelConfig) -> dict:
    """frameworks.bytes_per_param's {role: (replicated, sharded)} with what offloading moves to the
    host taken out: the offloaded share of the master and moments; DeepSpeed's and FSDP2's gradients
    (Megatron keeps its main-gradient buffer); the weight shard under param_offload."""
    f = par.optimizer_offload
    if not f and not par.param_offload:
        return layout
    out = dict(layout)
    for role in ("master", "optimizer") + (("grads",) if par.framework != "megatron" else ()):
        rep, sh = layout[role]
        # DeepSpeed's ZeRO 1 keeps its whole (replicated) gradients until the last micro-batch's reduction
        out[role] = (rep * (1 - f) if role != "grads" or par.zero >= 2 else rep, sh * (1 - f))
    if par.param_offload:
        out["weights"] = (layout["weights"][0], 0.0)
    return out


def link_bytes_per_param(par: ParallelConfig) -> tuple[float, float]:
    """(bytes per element of the rank's shard that cross the host link during the step's passes,
    bytes that cross it after backward, around the host's step)."""
    f, m = par.optimizer_offload, par.microbatches
    gathers = (2 if par.zero == 3 else 1) * m if par.param_offload else 0
    if par.framework == "deepspeed":
        up = 2.0 * (1 - f) if par.param_offload else 2.0 * f     # the GPU's updates down, or the host's up
        if par.zero == 1:
            return 0.0, 4.0 * f + up
        # ZeRO 3 moves every element's gradient through the host partition, whatever Twin-Flow's ratio
        return (8.0 * (f > 0) if par.zero == 3 else 4.0 * f) * m + 2.0 * gathers, up
    if par.framework == "fsdp2":
        return 4.0 * (1 if par.pp > 1 else m) * f + 4.0 * gathers, 0.0
    return 0.0, 8.0 * f


def host_step_time(shard_params: float, par: ParallelConfig, cluster: ClusterSpec, compute_s: float) -> dict:
    """Seconds a step spends on offloading beyond the GPU's work, for a rank whose optimizer shard is
    `shard_params` elements and whose passes compute for `compute_s`: {"host_optimizer": the host's
    step, all the node's ranks at once; "host_copies": the copies after backward, and those during the
    passes that their compute does not cover}. Empty without offloading."""
    if not par.optimizer_offload and not par.param_offload:
        return {}
    during, after = link_bytes_per_param(par)
    link = cluster.gpu.host_link_gbps * 1e9
    copies = after * shard_params / link + max(0.0, during * shard_params / link - compute_s)
    ranks = min(cluster.gpus_per_node, par.world)
    step = ranks * shard_params * par.optimizer_offload * HOST_STEP_BYTES.get(par.framework, 28.0)
    return {"host_optimizer": step / cluster.host_optimizer_rate, "host_copies": copies}
