"""Compute time of one micro-batch through one layer on one GPU: a roofline per kernel.

Each kernel takes max(FLOPs / achieved FLOP/s, bytes / achieved HBM bandwidth, kernel_us):
- weight GEMMs (from ModelSpec.layer_matmuls, TP/EP-sharded as memory.py shards them): the
  achieved FLOP/s is peak x gemm_fraction x d / (d + gemm_half_dim), d the GEMM's smallest
  dimension (tokens, or a TP-sharded width: small shards run less efficiently). Backward runs two
  GEMMs of the forward's size: the input gradient (I) and the weight gradient (W).
- attention core (FlashAttention): the causal FLOPs (flops.attention_flops) at attention_fraction
  of the bf16 peak; its backward does 2.5x the forward's FLOPs (it recomputes the scores).
- memory-bound kernels: bytes read and written per token (counted below), backward twice the
  forward's bytes.
- FP8 speeds up the weight GEMMs only (attention, norms and the rest stay in bf16).
- recompute: "full" runs the layer's forward again before its backward; "selective" the attention
  core's forward.
"""
from __future__ import annotations

from dataclasses import dataclass

from .activations import BF16, tokens
from .flops import attention_flops
from .frameworks import loss_bytes_per_logit
from .hardware import GPUSpec
from .models import ModelSpec
from .parallel import ParallelConfig
from .profiles import HardwareProfile


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

    @property
    def total(self) -> float:
        return self.forward + self.backward_input + self.backward_weight


def gemm_time(m: float, n: float, k: float, gpu: GPUSpec, profile: HardwareProfile, fp8: bool = False,
              count: float = 1.0) -> float:
    """Seconds for `count` GEMMs of (m x k) @ (k x n)."""
    if m <= 0 or count <= 0:
        return 0.0
    d = min(m, n, k)
    frac = profile.fp8_gemm_fraction if fp8 else profile.gemm_fraction
    rate = gpu.peak_tflops("fp8" if fp8 else "bf16") * 1e12 * frac * d / (d + profile.gemm_half_dim)
    return count * max(2.0 * m * n * k / rate, profile.kernel_us * 1e-6)


def memory_time(nbytes: float, kernels: int, gpu: GPUSpec, profile: HardwareProfile) -> float:
    return max(nbytes / (gpu.hbm_tbps * 1e12 * profile.hbm_fraction), kernels * profile.kernel_us * 1e-6)


def _layer_gemms(model: ModelSpec, par: ParallelConfig, moe_layer: bool, T: float, gpu, profile) -> float:
    fp8 = par.precision == "fp8"
    t = 0.0
    for mm in model.layer_matmuls(moe_layer):
        if mm.expert:
            # ep GPUs' tokens spread over E experts; this GPU runs E/ep of them, each on ep*T*K/E tokens
            E, K = model.moe.experts, model.moe.top_k
            tokens = par.ep * T * K / E
            t += gemm_time(tokens, mm.fan_out / par.etp, mm.fan_in, gpu, profile, fp8, count=mm.stored / par.ep)
        elif mm.tp == "col":
            t += gemm_time(T * mm.used, mm.fan_out / par.tp, mm.fan_in, gpu, profile, fp8, count=mm.stored)
        elif mm.tp == "row":
            t += gemm_time(T * mm.used, mm.fan_out, mm.fan_in / par.tp, gpu, profile, fp8, count=mm.stored)
        else:                                          # replicated (the router, MLA's small projections)
            t += gemm_time(T * mm.used, mm.fan_out, mm.fan_in, gpu, profile, False, count=mm.stored)
    return t


def _memory_bound_bytes(model: ModelSpec, par: ParallelConfig, moe_layer: bool, T: float) -> tuple[float, int]:
    """Forward bytes and kernel count of a layer's element-wise work on one GPU.

    Per token: two RMSNorms (read h, write h), two residual adds (read 2h, write h), RoPE on q and
    k (read and write), the MLP activation (SwiGLU reads 2 x f/tp, writes f/tp; GELU reads and
    writes f/tp), and the casts around them. With sequence parallelism the norms and residuals
    see T/tp tokens.
    """
    t = par.tp
    T_sp = T / t if par.sp else T
    h = model.hidden
    norm_res = T_sp * h * (2 * 2 + 2 * 3)
    rope = T * 2 * (model.q_dim + model.kv_dim) / t
    if moe_layer and model.moe:
        f_local = model.moe.top_k * model.moe.expert_ffn / par.etp + model.moe.shared_experts * (
            model.moe.shared_ffn or model.moe.expert_ffn) / t
        dispatch = T * h * 2 * model.moe.top_k          # permute and un-permute the routed tokens
    else:
        f_local, dispatch = model.ffn / t, 0.0
    act = T * f_local * (3 if model.mlp == "swiglu" else 2)
    kernels = 10 + (4 if moe_layer and model.moe else 0)
    return BF16 * (norm_res + rope + act + dispatch), kernels


def layer_time(model: ModelSpec, par: ParallelConfig, moe_layer: bool, gpu: GPUSpec,
               profile: HardwareProfile) -> LayerTime:
    T = tokens(par)
    gemm = _layer_gemms(model, par, moe_layer, T, gpu, profile)
    # Attention: this GPU's heads (a/tp) for its T queries; causal work over the full context.
    attn_flops = T * attention_flops(model, par.seq, causal=True) / par.tp
    attn = attn_flops / (gpu.bf16_tflops * 1e12 * profile.attention_fraction) if par.flash else \
        attn_flops / (gpu.bf16_tflops * 1e12 * profile.gemm_fraction) + memory_time(
            3 * BF16 * par.mbs * model.heads / par.tp * par.seq * par.seq / par.cp, 3, gpu, profile)
    nbytes, kernels = _memory_bound_bytes(model, par, moe_layer, T)
    mem = memory_time(nbytes, kernels, gpu, profile)
    forward = gemm + attn + mem
    recompute = forward if par.recompute == "full" else attn if par.recompute == "selective" else 0.0
    return LayerTime(forward=forward, backward_input=gemm + 2.5 * attn + 2 * mem + recompute,
                     backward_weight=gemm, gemm=gemm, attention=attn, memory_bound=mem, recompute=recompute)


def output_layer_time(model: ModelSpec, par: ParallelConfig, gpu: GPUSpec, profile: HardwareProfile) -> tuple[float, float, float]:
    """(forward, input-backward, weight-backward) of the output GEMM and the loss over this GPU's
    T x V/tp logits, whose element-wise passes move frameworks.loss_bytes_per_logit each."""
    T = tokens(par)
    g = gemm_time(T, model.vocab / par.tp, model.hidden, gpu, profile, par.precision == "fp8")
    logits = T * model.vocab / par.tp
    (fwd, fwd_kernels), (bwd, bwd_kernels) = loss_bytes_per_logit(par.framework)
    return (g + memory_time(fwd * logits, fwd_kernels, gpu, profile),
            g + memory_time(bwd * logits, bwd_kernels, gpu, profile), g)


def embedding_time(model: ModelSpec, par: ParallelConfig, gpu: GPUSpec, profile: HardwareProfile) -> tuple[float, float]:
    """(forward, backward) of the token embedding: a gather, then a scatter-add of gradients."""
    T = tokens(par)
    t = memory_time(2 * BF16 * T * model.hidden, 1, gpu, profile)
    return t, 2 * t


def optimizer_time(params_local: float, gpu: GPUSpec, profile: HardwareProfile) -> float:
    """AdamW over this GPU's shard: read grad (4), master, m, v (3 x 4, read and write), write the
    bf16 weight (2): 30 bytes per parameter, one fused kernel per parameter group."""
    return memory_time(30.0 * params_local, 1, gpu, profile)
