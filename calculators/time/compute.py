"""Compute time of one micro-batch through one layer on one GPU: a roofline per kernel.

Each kernel takes max(FLOPs / achieved FLOP/s, bytes / achieved HBM bandwidth, kernel_us), but a
GEMM, whose math and memory traffic overlap only in part, takes their sum:
- weight GEMMs (from ModelSpec.layer_matmuls, TP/EP-sharded as memory.py shards them, and fused
  where the framework fuses them: frameworks.fused_projections): the math at peak x
  gemm_fraction x d / (d + gemm_half_dim), d the GEMM's smallest dimension, plus the operands'
  and result's HBM time (gemm_time: added, not maxed). Backward runs two GEMMs of the forward's
  size: the input gradient (I) and the weight gradient (W).
- attention core (FlashAttention): the causal FLOPs (flops.attention_flops) at the kernel's measured
  rate for the length and head dim (attention.py; a sliding window's layers at the narrow window's
  rate, cuDNN's sinks a fixed backward time per query and head); its backward does 2.5x the
  forward's FLOPs (it recomputes the scores).
- memory-bound kernels: bytes read and written per token (counted below), backward twice the
  forward's bytes.
- FP8 speeds up the layers' weight GEMMs only (attention, norms, the output GEMM and the rest stay
  in bf16), the weight-gradient GEMM too but under torchao's rowwise_with_gw_hp.
- recompute: "full" runs the layer's forward again before its backward; "selective" the attention
  core's forward; a Megatron module list each module's forward (`_modules_recompute`). A tiled MLP
  (parallel.tiled_mlp) runs its forward once more in its backward, under full recompute a third time.
"""
from __future__ import annotations

import math

from dataclasses import dataclass

from . import elementwise
from ..memory.activations import BF16, tokens
from .attention import attention_time
from .flops import attention_flops
from ..specs.fp8 import fp8_weight_grad
from ..specs.frameworks import fused_matmuls
from ..specs.kernels import (eager_ops, expert_gemm_share, layout_attention, liger_chunk, loss_bytes_per_logit,
                             loss_kernel)
from ..specs.hardware import GPUSpec
from ..specs.models import ModelSpec
from ..specs.parallel import ParallelConfig, routed_tokens
from .profiles import HardwareProfile
from ..specs.recompute import (MODULES, matmul_modules, policy as recompute_policy, recomputed_modules,
                               recomputed_norms, sac_recomputes_attention, sac_saved)


@dataclass(frozen=True)
class LayerTime:
    """Seconds for one micro-batch through one layer on one GPU, split the way the pipeline
    schedules need it: forward (F), input-gradient backward (I), weight-gradient backward (W)."""
    forward: float
    backward_input: float
    backward_weight: float
    gemm: float                  # forward GEMM time (included above), for the breakdown
    attention: float             # forward attention-core time
    memory_bound: float          # forward memory-bound time
    recompute: float             # forward work run again in backward (in backward_input)
    column_gemms: tuple = (0.0, 0.0)   # forward time of the column-parallel GEMMs after each of the
                                       # layer's two TP all-gathers: attention's (q, k, v), the MLP's
    mlp: tuple = (0.0, 0.0)      # (forward, backward) of the MLP or MoE block alone (router, experts,
                                 # shared experts, activation, permutation), without recompute

    @property
    def total(self) -> float:
        return self.forward + self.backward_input + self.backward_weight


def gemm_terms(m: float, n: float, k: float, gpu: GPUSpec, profile: HardwareProfile,
               fp8: bool = False) -> tuple[float, float]:
    """(math seconds, HBM seconds) of one (m x k) @ (k x n) GEMM (see gemm_time)."""
    d = min(m, n, k)
    frac = profile.fp8_gemm_fraction if fp8 else profile.gemm_fraction
    rate = gpu.peak_tflops("fp8" if fp8 else "bf16") * 1e12 * frac * d / (d + profile.gemm_half_dim)
    nbytes = (1 if fp8 else BF16) * (m * k + k * n) + BF16 * m * n
    return 2.0 * m * n * k / rate, nbytes / (gpu.hbm_tbps * 1e12 * profile.hbm_fraction)


def gemm_time(m: float, n: float, k: float, gpu: GPUSpec, profile: HardwareProfile, fp8: bool = False,
              count: float = 1.0) -> float:
    """Seconds for `count` GEMMs of (m x k) @ (k x n): the math at the profile's large-GEMM rate,
    slowed to d / (d + gemm_half_dim) of it where the smallest dimension d leaves tiles part-empty,
    plus streaming the two operands in and the bf16 result out of HBM once. A GEMM whose FLOPs per
    byte fall under the GPU's FLOPs-to-bandwidth ratio is memory-bound (NVIDIA's Matrix
    Multiplication Background guide): a TP shard's 128- or 256-wide reduction dimension, or a
    handful of tokens, leaves it writing or reading far more than it computes. The two terms are
    added, not maxed: a kernel overlaps them only in part, and the sum sits within 2x of the max."""
    if m <= 0 or count <= 0:
        return 0.0
    return count * max(sum(gemm_terms(m, n, k, gpu, profile, fp8)), profile.kernel_us * 1e-6)


def memory_time(nbytes: float, kernels: int, gpu: GPUSpec, profile: HardwareProfile) -> float:
    return max(nbytes / (gpu.hbm_tbps * 1e12 * profile.hbm_fraction), kernels * profile.kernel_us * 1e-6)


ATTENTION_COLUMNS = ("q", "k", "v", "q_b", "kv_b")


def expert_tokens(model: ModelSpec, par: ParallelConfig, T: float) -> float:
    """Tokens each of this GPU's E/ep experts runs on per micro-batch: the expert group's tokens
    spread over E experts, ep*Tr*K/E each, times the routing imbalance on the busiest rank, which
    the others wait for; Tr, the tokens that reach this GPU's experts, is parallel.routed_tokens
    (gathered over the expert-TP group: T*etp/tp with sequence parallelism; tp 1, etp 8: 8T)."""
    return par.ep * routed_tokens(par, T) * model.moe.top_k / model.moe.experts * par.moe_imbalance


def _layer_gemms(model: ModelSpec, par: ParallelConfig, moe_layer: bool, T: float, gpu, profile,
                 linears_fp8: bool | None = None) -> tuple:
    """(forward GEMM seconds of the layer, (attention's, the MLP's) column-parallel share of them,
    forward seconds of the GEMMs op_sac recomputes: every second matmul, the router and the
    experts' grouped GEMMs, recompute.sac_saved). `linears_fp8` overrides the precision of the
    GEMMs but the experts' (the bf16 weight gradient of fp8.fp8_weight_grad)."""
    fp8 = par.precision == "fp8"
    dense_fp8 = fp8 if linears_fp8 is None else linears_fp8
    t, cols, unsaved, by_module = 0.0, [0.0, 0.0], 0.0, dict.fromkeys(MODULES, 0.0)
    mms = model.layer_matmuls(moe_layer)
    saved = dict(zip((mm.name for mm in mms), sac_saved(mms)))
    for mm in fused_matmuls(mms, par.framework):
        if mm.expert:
            g = gemm_time(expert_tokens(model, par, T), mm.fan_out / par.etp, mm.fan_in, gpu, profile, fp8,
                          count=mm.stored / par.ep) / expert_gemm_share(par, gpu.name)
        elif mm.tp == "col":
            g = gemm_time(T * mm.used, mm.fan_out / par.tp, mm.fan_in, gpu, profile, dense_fp8, count=mm.stored)
            cols[mm.name.split("+")[0] not in ATTENTION_COLUMNS] += g
        elif mm.tp == "row":
            g = gemm_time(T * mm.used, mm.fan_out, mm.fan_in / par.tp, gpu, profile, dense_fp8, count=mm.stored)
        else:                                          # replicated (the router, MLA's small projections)
            g = gemm_time(T * mm.used, mm.fan_out, mm.fan_in, gpu, profile, False, count=mm.stored)
        t += g
        first = mm.name.split("+")[0]
        unsaved += 0.0 if saved.get(first, False) else g
        for module in matmul_modules(first, moe_layer):
            by_module[module] += g
    return t, tuple(cols), unsaved, by_module


def _modules_recompute(model: ModelSpec, par: ParallelConfig, moe_layer: bool, T: float, gemms: dict,
                       attn: float, gpu, profile) -> float:
    """Forward seconds a Megatron module list runs again in backward (recompute.modules): each
    module's GEMMs and its element-wise passes (a norm reads and writes T x h, bf16; an activation
    reads its inputs and writes its output; moe permutes its tokens again), core_attn the
    attention core. moe's all-to-alls run again too (step.py counts them with the EP traffic)."""
    mods = recomputed_modules(par.recompute)
    swiglu_io = 3 if model.mlp == "swiglu" else 2          # bf16 units an activation reads and writes
    T_sp = T / par.tp if par.sp else T
    total = sum(gemms[m] for m in mods) + (attn if "core_attn" in mods else 0.0)
    norms = recomputed_norms(par.framework, model.mla is not None, moe_layer) if "layernorm" in mods else 0
    if norms:
        total += memory_time(norms * 2 * BF16 * T_sp * model.hidden, norms, gpu, profile)
    if not moe_layer:
        if "mlp" in mods:
            total += memory_time(BF16 * swiglu_io * T * model.ffn / par.tp, 1, gpu, profile)
        return total
    e = model.moe
    routed = e.top_k * T_sp * e.expert_ffn / par.etp
    shared = T * e.shared_experts * (e.shared_ffn or e.expert_ffn) / par.tp
    if "moe_act" in mods:                                  # the activation again, a clamped GLU's clamps too
        clamp = elementwise.CLAMP["forward"][0] * elementwise.EAGER_PACE["clamp"][0] * 2 * routed \
            if elementwise.eager_clamp(model, par) else 0.0
        total += memory_time(BF16 * swiglu_io * routed + clamp, 1, gpu, profile)
    if "shared_experts" in mods and shared:
        total += memory_time(BF16 * swiglu_io * shared, 1, gpu, profile)
    if "moe" in mods:
        moved = routed_tokens(par, T)
        if eager_ops(par):
            permute = elementwise.eager_permute_bytes(model, moved, par.ep, "forward")
            kernels = elementwise.eager_permute_kernels(par.ep, "forward")
        else:
            permute, kernels = elementwise.permute_bytes(model, moved), 4
        total += memory_time(BF16 * swiglu_io * (routed + shared) + permute, kernels, gpu, profile)
    return total


def _unfused_attention(model: ModelSpec, par: ParallelConfig, gpu, profile) -> tuple[float, float]:
    """(forward, backward) of attention without a flash kernel: QK^T and scores.V as batched GEMMs
    over the full square, and the s x s scores written, softmaxed and read (3 passes)."""
    flops = tokens(par) * attention_flops(model, par.seq, causal=True) / par.tp
    fwd = flops / (gpu.bf16_tflops * 1e12 * profile.gemm_fraction) + memory_time(
        3 * BF16 * par.mbs * model.heads / par.tp * par.seq * par.seq / par.cp, 3, gpu, profile)
    return fwd, 2.5 * fwd


def layer_time(model: ModelSpec, par: ParallelConfig, moe_layer: bool, gpu: GPUSpec,
               profile: HardwareProfile) -> LayerTime:
    T = tokens(par)
    gemm, cols, unsaved, by_module = _layer_gemms(model, par, moe_layer, T, gpu, profile)
    attn, attn_b = (attention_time(model, par, layout_attention(par, gpu.name), gpu, profile)
                    if par.flash else _unfused_attention(model, par, gpu, profile))
    work = elementwise.layer_bytes(model, par, moe_layer, T)
    mem, mem_b = (memory_time(*work[way], gpu, profile) for way in ("forward", "backward"))
    mlp_gemm = by_module["moe" if moe_layer else "mlp"]
    share_f, share_b = work["mlp_share"]
    forward = gemm + attn + mem
    kind, every = recompute_policy(par.framework, par.recompute)
    recompute = _modules_recompute(model, par, moe_layer, T, by_module, attn, gpu, profile) if kind == "modules" \
        else {"full": forward / every, "core_attn": attn,
              "op_sac": unsaved + mem + (attn if sac_recomputes_attention(par.recompute) else 0.0)}.get(kind, 0.0)
    if par.tiled_mlp and not moe_layer:     # DeepSpeed's TiledMLP runs the MLP's forward again in its backward
        recompute += mlp_gemm + mem * share_f
    # torchao's rowwise_with_gw_hp runs the weight-gradient GEMMs in bf16 (fp8.fp8_weight_grad)
    gemm_w = gemm if fp8_weight_grad(par) or par.precision != "fp8" else \
        _layer_gemms(model, par, moe_layer, T, gpu, profile, linears_fp8=False)[0]
    return LayerTime(forward=forward, backward_input=gemm + attn_b + mem_b + recompute,
                     backward_weight=gemm_w, gemm=gemm, attention=attn, memory_bound=mem, recompute=recompute,
                     column_gemms=cols, mlp=(mlp_gemm + mem * share_f, 2 * mlp_gemm + mem_b * share_b))


def output_layer_time(model: ModelSpec, par: ParallelConfig, gpu: GPUSpec, profile: HardwareProfile) -> tuple[float, float, float]:
    """(forward, input-backward, weight-backward) of the output GEMM and the loss over this GPU's
    T x V/tp logits, whose element-wise passes move kernels.loss_bytes_per_logit each. The output
    GEMM stays bf16 under FP8 in every stack: Megatron builds it as its own ColumnParallelLinear,
    not a Transformer Engine module (gpt_model.py; TE's LM head only under an MXFP8 output-projection
    option), and torchtitan leaves it out of the float8 conversion (filter_fqns ["output"]; before
    2025, module_filter_fn fqn != "output")."""
    T = tokens(par)
    g = gemm_time(T, model.vocab / par.tp, model.hidden, gpu, profile)
    logits = T * model.vocab / par.tp
    (fwd, fwd_kernels), (bwd, bwd_kernels) = loss_bytes_per_logit(loss_kernel(par))
    if loss_kernel(par) == "chunked":
        # Liger's fused linear cross-entropy runs all three GEMMs in its forward, a chunk of tokens at a
        # time: the weight's gradient as one GEMM a chunk (K = the chunk's tokens), each adding into the
        # V x h accumulator; backward scales the two gradients it kept, unless the loss's gradient is 1
        # (one micro-batch a step)
        chunk = liger_chunk(T, model.vocab, model.hidden)
        grad_w = gemm_time(model.vocab, model.hidden, chunk, gpu, profile, count=math.ceil(T / chunk))
        scale = 0.0 if par.microbatches == 1 else memory_time(
            2 * 2 * BF16 * (T + model.vocab) * model.hidden, 2, gpu, profile)
        return 2 * g + grad_w + memory_time(fwd * logits, fwd_kernels, gpu, profile), scale, 0.0
    return (g + memory_time(fwd * logits, fwd_kernels, gpu, profile),
            g + memory_time(bwd * logits, bwd_kernels, gpu, profile), g)


def embedding_time(model: ModelSpec, par: ParallelConfig, gpu: GPUSpec, profile: HardwareProfile) -> tuple[float, float]:
    """(forward, backward) of the token embedding: a gather, then a scatter-add of gradients."""
    T = tokens(par)
    t = memory_time(2 * BF16 * T * model.hidden, 1, gpu, profile)
    return t, 2 * t


def optimizer_time(params_local: float, gpu: GPUSpec, profile: HardwareProfile, per_param: float = 30.0) -> float:
    """AdamW over this GPU's shard: read grad (4), master, m, v (3 x 4, read and write), write the
    bf16 weight (2): 30 bytes per parameter with fp32 gradients and moments (`per_param`:
    frameworks.optimizer_bytes), one fused kernel per parameter group."""
    return memory_time(per_param * params_local, 1, gpu, profile)
