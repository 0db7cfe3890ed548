"""The host's share of a layer's time: what the GPU waits for while the CPU (Python, autograd,
kernel launches) issues the work.

Two ways it shows:
- a floor (host_bound): an eager framework needs profile.host_ms_per_layer to issue one layer's
  forward and backward for one micro-batch; the GPU cannot finish the layer sooner. Where the GPU's
  work is longer, the host runs ahead and costs nothing.
- an addition (expert_loop_host): where the host must wait for the GPU mid-layer (a
  device-to-host sync), the queue runs dry, and what the host issues next is not hidden behind
  queued work until the GPU catches up.
"""
from __future__ import annotations

from ..specs.kernels import expert_kernel
from ..specs.recompute import modules, policy
from ..specs.models import ModelSpec
from ..specs.parallel import ParallelConfig
from .profiles import HardwareProfile

# Host time an MoE layer adds per local expert per micro-batch (forward and backward together), in
# FP8, where its experts run as a loop (kernels.expert_kernel): fitted where Megatron runs them
# through Transformer Engine's GroupedLinear.
# Mechanism: the dispatcher and GroupedLinear copy the tokens per expert to the host and wait for
# them (token_dispatcher.py's cuda_sync_point, grouped_linear.py's m_splits.tolist()), then the
# host walks the local experts one by one: each expert's weight and input quantized for itself,
# one GEMM launched per expert, and the same per-expert steps for the gradients in backward. After
# the sync nothing is queued, so this work adds to the layer's time.
# FITTED (the per-expert cost itself is not measured): 0.20 ms minimises (to 0.01 ms) the median
# error of the twelve Qwen3-30B-A3B runs without fused experts in validation.stacks (16 and 8 local
# experts; H100, B200, GB200; Megatron-Bridge 25.11 to 26.06): 39.7% -> 4.2%. Checked on the runs it
# was not fitted on (Qwen3-235B-A22B and DeepSeek-V3 in FP8, 2 to 32 local experts, H100, B200 and
# GB200): median 12.3% -> 3.9%. First fitted at 0.22 ms (43.6% -> 3.9%; held out 14.1% -> 5.6%, the
# B200 runs with 16 and 32 local experts from +34..+72% to -5..+12%, validation.published's MoE rows,
# nothing fitted to them, from 87% to 26%); refitted by the same rule when DeepEP's and HybridEP's
# NVLink share was read as DeepEP counts its GB/s (profiles.py, ep_dispatch), which moved the runs. The same
# stacks' configs with the experts fused (Transformer Engine's op fuser, Megatron-Bridge's
# cutedsl_fused_grouped_mlp, with full-iteration CUDA graphs; at dabf51d9d) pay none and come out
# +11 to +16%. BF16 runs pay none: no per-expert quantization, and the BF16 runs with 16 local
# experts (Megatron-MoE-ModelZoo's Qwen3-235B-A22B on H100 and GB200) show no such excess; but
# Megatron-LM's recipes measured Qwen3-30B-A3B on 32 H100 within 1% in FP8 and BF16, where this
# puts FP8 26% behind: the split between the two is not exact.
EXPERT_LOOP_FP8_MS = 0.20


def host_bound(f: float, b: float, w: float, profile: HardwareProfile, refwd: float = 0.0, scale: float = 1.0):
    """A layer's (F, B, W) per micro-batch with the host's issue time as their floor, and the time
    the GPU waits for the host. The host issues a third of profile.host_ms_per_layer (times the
    framework's `scale`, frameworks.host_scale) in the forward and two thirds in the backward (I
    and W share it by their GPU time); recompute issues `refwd` of the forward again inside the
    backward (recompute.reissue: 1 for a full recompute)."""
    host = profile.host_ms_per_layer * scale * 1e-3
    hf, hb = host / 3, 2 * host / 3 + host / 3 * refwd
    f2 = max(f, hf)
    stretch = max(b + w, hb) / (b + w) if b + w > 0 else 1.0
    return (f2, b * stretch, w * stretch), (f2 - f) + (b + w) * (stretch - 1)


def experts_again(par: ParallelConfig) -> float:
    """The share of the experts' forward that the backward runs again: all of it under a full
    recompute (1/N with layer:N), op_sac (the grouped GEMMs are not saved ops) and Megatron's `moe`
    module; none otherwise (`moe_act` reruns the activation only)."""
    kind, every = policy(par.framework, par.recompute)
    if kind == "modules":
        return 1.0 if "moe" in modules(par.recompute) else 0.0
    return {"full": 1.0 / every, "op_sac": 1.0}.get(kind, 0.0)


def expert_loop_host(model: ModelSpec, par: ParallelConfig, moe_layer: bool) -> tuple[float, float]:
    """(forward, backward) seconds one MoE layer's per-expert host work adds per micro-batch
    (EXPERT_LOOP_FP8_MS per local expert: a third in the forward, two thirds in the backward, and
    the forward's again where recompute reruns the experts, experts_again); 0 for dense layers,
    BF16, fused experts."""
    if not (moe_layer and model.moe) or par.precision != "fp8" or expert_kernel(par) != "loop":
        return 0.0, 0.0
    host = EXPERT_LOOP_FP8_MS * 1e-3 * model.moe.experts / par.ep
    return host / 3, 2 * host / 3 + host / 3 * experts_again(par)
