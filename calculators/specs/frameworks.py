"""How each framework lays out weights, gradients and optimizer state: bytes per parameter by role.

Frameworks differ here and users compare against the one they run, so the layout is a named
choice. Mixed-precision AdamW throughout; `shard` is the ZeRO degree (the data x context ranks
that hold one replica of these parameters). Each role is (bytes replicated, bytes sharded) and
costs `replicated + sharded / shard` per parameter.

| framework | Z0 | Z1 | Z2 | Z3 | source |
|---|---|---|---|---|---|
| megatron  | 18 | 6 + 12/d | 2 + 16/d | 18/d | Megatron-LM docs, distributed optimizer (bf16 params, fp32 main grads) |
| deepspeed | 16 | 4 + 12/d | 2 + 14/d | 16/d | ZeRO paper (Rajbhandari et al. 2020), K = 12 |
| fsdp2     | 16 | 8 + 8/d  | 2 + 16/d | 16/d | fp32 sharded params, bf16 compute (torchtitan's MixedPrecisionPolicy) |
| nanotron  | 20 (18 at d = 1) | 10 + 14/d| -        | -    | fitted to 1,734 measured runs (validation/memory.py) |

With `parallel.grad_dtype` "bf16" (grad_dtype), Megatron's main grads take 2 bytes, not 4 (16 at
Z0), and DeepSpeed's "fp32" takes 4; with `parallel.moment_dtype` "bf16" Megatron's Adam moments
take 4, not 8.

FSDP2 at Z2 is `reshard_after_forward=False`: the bf16 gathered weights stay from forward to
backward (the 2 replicated bytes). nanotron keeps bf16 grads and an fp32 accumulation buffer; its
ZeRO-1 adds a bf16 buffer (2 + 2/d) that the measurements show and that matches a gather buffer
for the updated weights; it has no ZeRO-2/3, for which it is given DeepSpeed's layout. Its ZeRO-0
runs with one data-parallel rank hold 2 bytes per parameter less (178 runs, all about 10% under
the 20-byte layout): its trainer wraps the model in torch DDP, whose bf16 gradient buckets these
are, only when there is more than one data-parallel rank (`make_ddp` in nanotron's trainer).
"""
from __future__ import annotations

import math
from dataclasses import replace

from .fp8 import fp8_recipe
from .optimizers import ADAM_STATE, MUON_STEP_BYTES, momentum_bytes


ROLES = ("weights", "grads", "master", "optimizer")

# What a framework runs where it is narrower than the calculators' space; the planner proposes
# nothing outside it. nanotron: its AFAB and 1F1B pipeline engines, its ZeRO-1 optimizer, no
# context parallelism (its README's feature list; interleaved 1F1B, ZeRO-3 and ring attention are
# on its roadmap). DeepSpeed: its pipeline engine runs one schedule, 1F1B (TrainSchedule).
# Megatron-LM runs 1F1B and interleaved 1F1B; the planner also offers it ZB-H1 and DualPipeV as
# the forks that add them do, and the export says so.
LIMITS = {
    "nanotron": {"schedule": ("gpipe", "1f1b"), "zero": (0, 1), "cp": (1,), "ep_overlap": (False,)},
    "deepspeed": {"schedule": ("1f1b",), "ep_overlap": (False,)},
    "fsdp2": {"ep_overlap": (False,)},         # Megatron's overlap_moe_expert_parallel_comm; torchtitan has none
}
# What a framework runs that the planner keeps to unless the constraints name more: Megatron-Core's
# pipeline schedules are 1F1B and its interleaved form (pipeline_parallel/schedules.py's
# forward_backward_pipelining_{without,with}_interleaving), no zero-bubble, DualPipe or GPipe; asked
# for, those are planned on Megatron's memory layout (DeepSeek-V3's DualPipe on its own stack is
# modelled so), and the step and the export say Megatron-LM does not run them.
DEFAULT_LIMITS = {"megatron": {"schedule": ("1f1b", "interleaved")}}


def runs(framework: str, knob: str) -> tuple | None:
    """The values of `knob` `framework` runs (LIMITS, DEFAULT_LIMITS); None: every value."""
    return {**DEFAULT_LIMITS.get(framework, {}), **LIMITS.get(framework, {})}.get(knob)
# DeepSpeed's pipeline engine refuses ZeRO-2/3 (its PipelineEngine asserts zero stage < 2).
MAX_ZERO_WITH_PP = {"deepspeed": 1}


# The dtype each framework keeps its gradients for the optimizer in and reduces them across data-
# parallel ranks in, where `parallel.grad_dtype` is empty (see grad_dtype).
GRAD_DTYPE = {"megatron": "fp32", "fsdp2": "fp32", "deepspeed": "bf16", "nanotron": "fp32"}


def grad_dtype(par) -> str:
    """"fp32" or "bf16": the gradients' dtype for the optimizer and on the wire (`parallel.grad_dtype`,
    else the framework's):

    - megatron: its main-grad buffer, which the data-parallel reduce-scatter or all-reduce works in:
      fp32 by default with bf16 training (megatron/training/arguments.py turns on
      accumulate_allreduce_grads_in_fp32 unless --grad-reduce-in-bf16), as in NeMo 2.0
      (MegatronMixedPrecision's grad_reduce_in_fp32=True); bf16 in Megatron-Bridge's performance
      recipes (ddp.grad_reduce_in_fp32=False since its first, 568b3a3ef), NeMo's performance
      scripts from 2025-06-12 (ab020f6a72) and Megatron-LM's Llama 3 example
      (examples/llama/train_llama3_8b_h100_fp8.sh). It sets the buffer's bytes per parameter;
    - fsdp2: torchtitan's mixed_precision_reduce (float32 by default): the reduce-scatter's dtype;
      the sharded gradients stay in the fp32 parameters' dtype either way;
    - deepspeed: bf16 with bf16 training (its gradients are the bf16 parameters' own);
    - nanotron: fp32 accumulation, part of its fitted layout (no other choice)."""
    return par.grad_dtype or GRAD_DTYPE[par.framework]


def master_dtype(par) -> str:
    """"fp32", "remainder", "16bit" or "none": how the optimizer keeps its master weights (`parallel.master_dtype`,
    else the framework's): fp32, except Megatron's precision-aware optimizer (moment_dtype bf16) over
    its distributed optimizer (ZeRO-1), which keeps only the 16 bits each fp32 master has beyond its
    bf16 weight (Transformer Engine's FusedAdam with store_param_remainders, on by default since
    Megatron-Core's OptimizerConfig of 2025-04), in bf16 and under FP8 delayed scaling, the recipe
    the export writes. FP8's current, blockwise and MX recipes keep fp32 masters in the distributed
    optimizer itself (fp8_recipe), as does Megatron-FSDP (ZeRO 2/3)."""
    if par.master_dtype:
        return par.master_dtype
    precision_aware = par.framework == "megatron" and par.moment_dtype == "bf16" and par.zero == 1
    keeps_remainders = par.precision != "fp8" or fp8_recipe(par) == "delayed"
    return "remainder" if precision_aware and keeps_remainders else "fp32"


MASTER_BYTES = {"fp32": 4, "remainder": 2, "16bit": 2, "none": 0}
MASTER_TEXT = {"fp32": "fp32 master weights", "remainder": "16-bit master remainders",
               "16bit": "16-bit master weights",
               "none": "no master copy (the bf16 weights)"}


def optimizer_bytes(par) -> float:
    """HBM bytes per parameter one AdamW step moves: read the gradient, read and write the fp32
    master and the two moments, write the bf16 weight: 30 with fp32 gradients and moments, less 2
    for Megatron's bf16 main grads (grad_dtype), 8 for bf16 moments (moment_dtype), 2 for a master
    kept as remainders beside the weight (read and written with it), 4 for a 16-bit one and 6 for
    none (master_dtype). The other
    frameworks' optimizers step on fp32 gradients whatever the reduction's dtype (FSDP2's sharded
    fp32 gradients, DeepSpeed's fp32 partition)."""
    if par.optimizer == "muon":          # its weight matrices' step (optimizers.MUON_STEP_BYTES)
        return MUON_STEP_BYTES
    grads = grad_reduce_bytes(par) if par.framework == "megatron" else 4
    # the master read and written, the bf16 weight written; read too where the master is built on it
    master = {"fp32": 8 + 2, "16bit": 4 + 2, "remainder": 4 + 4, "none": 2 + 2}[master_dtype(par)]
    return master + grads + 2 * 2 * (2 if par.moment_dtype == "bf16" else 4)


def grad_reduce_bytes(par) -> int:
    """Bytes per gradient element the data-parallel reduction moves (grad_dtype)."""
    return 4 if grad_dtype(par) == "fp32" else 2


def pipeline_grad_bytes(par) -> float:
    """Bytes per parameter of the gradients FSDP2 holds unsharded under a pipeline: PyTorch's
    pipeline stages run every micro-batch's backward but the last without gradient sync
    (PipelineStage.backward_maybe_with_nosync sets FSDP's requires_gradient_sync off), so FSDP2
    accumulates each stage's unsharded gradients in its reduce dtype (FSDPParam's
    unsharded_accumulated_grad; fp32 by torchtitan's default) and reduce-scatters once per step:
    grad_reduce_bytes. 0 where that does not apply (not fsdp2, no pipeline, one micro-batch, or
    unsharded gradients anyway at ZeRO 0/1)."""
    if par.framework != "fsdp2" or par.pp == 1 or par.microbatches == 1 or par.zero < 2:
        return 0.0
    return float(grad_reduce_bytes(par))


def bytes_per_param(framework: str, zero: int, dp: int = 2, grads: str = "",
                    moments: str = "", master: str = "fp32",
                    optimizer: str = "adamw") -> dict[str, tuple[float, float]]:
    """Role -> (replicated bytes, sharded bytes) per parameter; `dp` matters to nanotron only
    (no DDP buckets with one data-parallel rank); `grads` is grad_dtype's answer where the layout
    keeps gradients in it (megatron's main grads, deepspeed's), "" for the framework's; `moments`
    "bf16" keeps Adam's m and v in 2 bytes each (Megatron's precision-aware optimizer: TE's
    FusedAdam with exp_avg_dtype and exp_avg_sq_dtype bf16, as DeepSeek-V3 tracked them); `master`,
    Megatron's, master_dtype's answer: 4, 2 or 0 bytes (MASTER_BYTES); `optimizer` "muon": the
    weight matrices' one momentum (optimizers.momentum_bytes) in Adam's moments' place (the
    parameters Muon leaves to AdamW: estimate's `adam_extra`)."""
    o = momentum_bytes(framework, grads) if optimizer == "muon" else 4 if moments == "bf16" else ADAM_STATE
    if framework == "nanotron" and zero <= 1:
        if zero == 0:
            return {"weights": (2, 0), "grads": (6 if dp > 1 else 4, 0), "master": (4, 0), "optimizer": (8, 0)}
        return {"weights": (4, 2), "grads": (6, 0), "master": (0, 4), "optimizer": (0, 8)}
    if framework == "megatron":
        # bf16 weights, main grads (fp32 unless grad_dtype says bf16), fp32 master, Adam m and v
        w, g, m = 2, 2 if grads == "bf16" else 4, MASTER_BYTES[master]
    elif framework == "fsdp2":
        if zero <= 1:                    # DDP (or a sharded optimizer) over fp32 weights, autocast
            return {"weights": (4, 0), "grads": (4, 0), "master": (0, 0), "optimizer": (o, 0) if zero == 0 else (0, o)}
        rep = 2 if zero == 2 else 0      # gathered bf16 weights kept between forward and backward
        return {"weights": (rep, 4), "grads": (0, 4), "master": (0, 0), "optimizer": (0, o)}
    else:                                # deepspeed, and nanotron beyond ZeRO-1
        w, g, m = 2, 4 if grads == "fp32" else 2, 4
    layout = {"weights": (w, 0), "grads": (g, 0), "master": (m, 0), "optimizer": (o, 0)}
    sharded = {1: ("master", "optimizer"), 2: ("grads", "master", "optimizer"), 3: ROLES}.get(zero, ())
    return {role: ((0, b[0]) if role in sharded else b) for role, b in layout.items()}


def retained_buffers(framework: str, zero: int, tokens_x_hidden: float, layer_params_bf16: float) -> float:
    """Bytes the framework keeps allocated outside weights, grads and optimizer state.

    - nanotron: 4 bytes per (token x hidden) of a micro-batch plus 64 MiB, fitted on the runs.
    - ZeRO-3 (fsdp2, deepspeed, megatron): the gathered bf16 weights of the layer being computed and
      of the one prefetched, plus the unsharded gradients of one layer before its reduce-scatter.
    - megatron and deepspeed with ZeRO-1/2: the reduce-scatter / all-gather buckets are views of
      the contiguous buffers already counted (megatron) or 2 x 5e8 elements (DeepSpeed's default
      reduce_bucket_size and allgather_bucket_size, bf16).
    """
    if framework == "nanotron":
        return 4 * tokens_x_hidden + 64 * 2**20
    if zero == 3:
        return 3 * layer_params_bf16
    if framework == "deepspeed" and zero in (1, 2):
        return 2 * 5e8 * 2
    return 0.0


def grad_bucket_bytes(framework: str, zero: int, dp: int, grad_bytes: int) -> float:
    """Bytes of gradients the framework reduces in one collective (ZeRO 0 to 2). Each bucket pays
    its collective's latency, so a large model's sync on many ranks costs far more than one
    collective of the same bytes.

    - nanotron: 25 MB DDP buckets (the Ultra-Scale Playbook runs' setting);
    - fsdp2 at ZeRO 0/1: PyTorch DDP's default bucket_cap_mb, 25 MB;
    - megatron: max(40M, 1M x dp) parameters per bucket (its DistributedDataParallelConfig);
    - deepspeed: reduce_bucket_size, 5e8 elements;
    - fsdp2 at ZeRO 2: one reduce-scatter per layer (0 here: the caller counts layers).
    """
    if framework == "megatron":
        return max(40e6, 1e6 * dp) * grad_bytes
    if framework == "deepspeed":
        return 5e8 * grad_bytes
    if framework == "fsdp2" and zero >= 2:
        return 0.0
    return 25e6


def param_gather_count(framework: str, zero: int, dp: int, params: float, tensors: int, layers: int) -> int:
    """How many all-gathers bring the updated weights back after a ZeRO-1/2 step (each pays its
    collective's latency).

    - nanotron: one per parameter tensor (its ZeroDistributedOptimizer shards every tensor over
      the DP ranks and gathers them as a coalesced list after the step);
    - megatron: one per gradient bucket (the distributed optimizer gathers bucket by bucket);
    - deepspeed: allgather_bucket_size, 5e8 elements;
    - fsdp2: one per layer at ZeRO 2 (its reduce-scatter unit), else one.
    """
    if framework == "nanotron":
        return max(1, tensors)
    if framework == "megatron":
        return max(1, math.ceil(params / max(40e6, 1e6 * dp)))
    if framework == "deepspeed":
        return max(1, math.ceil(params / 5e8))
    return max(1, layers) if framework == "fsdp2" and zero >= 2 else 1


def shard_copy_bytes(framework: str, zero: int, reduce_bytes: int = 4) -> tuple[float, float]:
    """HBM bytes per gathered parameter that sharded data parallelism copies every micro-batch,
    forward and backward, beside the collectives themselves.

    - fsdp2, ZeRO-3: each all-gather's output is split into the layer's unsharded parameters
      (split_with_sizes_copy: read 2, write 2 bytes), in forward and again in backward; each
      reduce-scatter's input is the unsharded bf16 gradients cast and concatenated into the
      reduce buffer in torchtitan's reduce_dtype (`reduce_bytes`: read 2, write 4 for fp32): (4, 10);
    - fsdp2, ZeRO-2 (reshard_after_forward=False): one gather per micro-batch, the same
      reduce-scatter: (4, 6);
    - deepspeed, ZeRO-3: gathers into contiguous buffers its parameters view, gradients copied into
      its contiguous reduce buffer (read 2, write 2): (0, 4);
    - everything else: (0, 0) (buffers the parameters and gradients are views of)."""
    if framework == "fsdp2" and zero >= 2:
        return 4.0, (4.0 if zero == 3 else 0.0) + 2.0 + reduce_bytes
    if framework == "deepspeed" and zero == 3:
        return 0.0, 4.0
    return 0.0, 0.0


def grad_accumulation_bytes(framework: str, zero: int, microbatches: int) -> float:
    """HBM bytes per parameter (of those whose gradients this GPU holds unsharded) that adding one
    micro-batch's weight gradients to the step's sum moves outside the GEMMs, averaged over the
    step's micro-batches: a memory-bound pass over every parameter, every micro-batch. Without it
    the model put nanotron's one-node TP 1 runs 16% too fast (median), 9% with it (and 2% with
    the loss's passes counted too, loss_bytes_per_logit, and the host time refitted).

    - nanotron: 10. Its FP32GradientAccumulator adds each micro-batch's bf16 gradient into an fp32
      buffer (`fp32_grad.add_(param.grad)`, the first micro-batch included): read 2 + 4, write 4;
    - megatron: 0. gradient_accumulation_fusion has the weight-gradient GEMM add into the fp32
      main_grad itself (in the GEMM's time);
    - fsdp2, ZeRO 0/1 (fp32 weights under autocast): 6 to cast the bf16 gradient to fp32, and 12
      to add it into .grad from the second micro-batch on (PyTorch's AccumulateGrad); ZeRO 2/3: 6,
      the cast before the fp32 reduce-scatter (the sharded sum is 1/dp of that);
    - deepspeed (bf16 gradients, its layout above): 6 to add into .grad from the second on.
    """
    later = (microbatches - 1) / microbatches if microbatches > 1 else 0.0
    if framework == "nanotron":
        return 10.0
    if framework == "fsdp2":
        return 6.0 + (12.0 * later if zero <= 1 else 0.0)
    if framework == "deepspeed":
        return 6.0 * later
    return 0.0


def fused_projections(framework: str) -> bool:
    """Whether the layer's column-parallel projections that read the same input run as one GEMM:
    Megatron's linear_qkv and linear_fc1 (gate and up), nanotron's qkv_proj and gate_up_proj. One
    wider GEMM reads its input once and fills its tiles better than three narrow ones, which
    matters for a GQA model's k and v shards. torchtitan (fsdp2: wq, wk, wv; w1, w3) and the
    Hugging Face modules DeepSpeed trains (q_proj, k_proj, v_proj; gate_proj, up_proj) keep them
    apart."""
    return framework in ("megatron", "nanotron")


def fused_matmuls(mms: tuple, framework: str) -> list:
    """The layer's matmuls as the framework runs them: with frameworks.fused_projections, adjacent
    column-parallel ones that read the same input (q, k, v; gate, up) as one wider GEMM."""
    if not fused_projections(framework):
        return list(mms)
    out = []
    for mm in mms:
        prev = out[-1] if out else None
        if prev and mm.tp == prev.tp == "col" and (mm.fan_in, mm.stored, mm.used, mm.expert) == \
                (prev.fan_in, prev.stored, prev.used, prev.expert):
            out[-1] = replace(prev, name=f"{prev.name}+{mm.name}", fan_out=prev.fan_out + mm.fan_out)
        else:
            out.append(mm)
    return out


# nanotron's GEMMs inside a training step run at 0.59 of the H100's dense peak: what `benchmarks
# calibrate` fits to its one-node Ultra-Scale Playbook runs (fitted; the mechanism is not
# established). The GPU's own rate, the profile's gemm_fraction, is what a large GEMM sustains at
# the H100's 700 W cap, 0.70 (validation/data/h100_harness: 690 TFLOP/s over 25 s), and the other
# stacks' published runs match it: Megatron/NeMo bf16, torchtitan, our harness (checked by
# validation.stacks, on runs nothing was fitted to).
NANOTRON_GEMM_IN_STEP = 0.59 / 0.70


def gemm_scale(framework: str) -> float:
    """The share of the profile's GEMM rate a framework's GEMMs reach inside a training step:
    nanotron's NANOTRON_GEMM_IN_STEP, every other framework 1."""
    return NANOTRON_GEMM_IN_STEP if framework == "nanotron" else 1.0


# Host issue time per layer, nanotron, pipeline across nodes with TP: x (TP ranks per node) ** b;
# b minimises the median error of the runs it is fitted on (host_scale).
NANOTRON_CROSS_NODE_PP_HOST = 0.8


def host_scale(framework: str, tp_per_node: int, tp_nodes: int, pipeline_crosses_nodes: bool) -> float:
    """How many times profile.host_ms_per_layer the host needs to issue one layer (1: as on one
    node, where the profile's host time was measured). `tp_per_node` and `tp_nodes` place one TP
    group (comm.group).

    nanotron, measured on the Ultra-Scale Playbook runs (those after its PP fix); the mechanism is
    not established, so these are fits, each checked on models it was not fitted to
    (`python -m validation.time` prints the check):
    - pipeline across nodes and TP > 1: x tp_per_node ** 0.8 (1.74, 3.03 and 5.28 at TP 2, 4 and
      8). At micro-batch 1 to 8 such runs take a constant time per micro-batch (tokens/s doubles
      with the micro-batch: a floor), whatever the model's width (hidden 2,048 to 8,192). The
      exponent minimises the median error of the fitted runs (7.4% at 0.8; 9.1% at 0.75, 9.3%
      at 0.85). It replaced 1 + 1.1 log2(tp), which left TP 8 about 18% too fast at micro-batch 1
      to 8 and TP 2 5% too slow; the larger models' runs, held out, went from 12.2% median error
      to 8.2% with this form alone, and to 6.9% with the pipeline sends' sharing (comm.group)
      also mended. Its p2p code sends every tensor's metadata with blocking send/recv and reads
      it on the host, a host sync at each stage boundary, which may be part of it.
    - a TP group across nodes: x tp_nodes. At micro-batch 1 TP 16 over 2 nodes takes about 8 ms
      per layer and TP 32 over 4 nodes 15 to 18 ms, for the 1.34B, 3.57B and 8.86B models alike.
    Both are floors, not added costs: at larger micro-batches the GPU's work covers them and the
    runs match the model. Fitted on the 1.34B and 3.57B runs of the one layout kind each; the
    8.86B and 80B runs are predictions. Where pipeline and TP both cross nodes the two multiply,
    with no number fitted on those runs: TP 16 over 2 nodes gets 8 ** 0.8 x 2 = 10.6 (7% median
    error over 136 runs). They stay with nanotron: NeMo's published runs with pipelines across
    nodes and TP 4 (validation.published: GPT-3 175B on 128 and 512 GPUs, Llama 2 and 3 70B on
    64) are within 11% without them.
    - everything else: 1.
    """
    if framework != "nanotron":
        return 1.0
    pp = tp_per_node ** NANOTRON_CROSS_NODE_PP_HOST if pipeline_crosses_nodes else 1.0
    return pp * max(1, tp_nodes)


# Host memory per element of a rank's optimizer shard that the framework's optimizer offload keeps
# (parallel.optimizer_offload; memory/host.py says what, from each framework's source)
HOST_BYTES = {"deepspeed": 18.0, "megatron": 16.0, "fsdp2": 16.0}


def host_bytes_per_param(par) -> float:
    """Host memory per element of the rank's optimizer shard (HOST_BYTES; memory/host.py)."""
    if not par.optimizer_offload and not par.param_offload:
        return 0.0
    f, fw = par.optimizer_offload, par.framework
    if fw == "deepspeed" and par.zero == 3 and f:       # the bf16 gradient partition, for every element
        own = (HOST_BYTES[fw] - 2.0) * f + 2.0
    else:
        own = HOST_BYTES.get(fw, 16.0) * f
    return own + (2.0 if par.param_offload and fw == "deepspeed" else 0.0)
