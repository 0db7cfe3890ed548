"""Megatron's fine-grained activation offloading (parallel.offload_modules, --offload-modules): what
each module's saved tensors free on the GPU and cost on the host link."""
from __future__ import annotations

from dataclasses import replace

from .activations import BF16, FP32, _ffn_inputs, gemm_input_bytes, saved_per_layer, tokens
from ..specs.models import ModelSpec
from ..specs.parallel import ParallelConfig
from ..specs.recompute import OFFLOAD_MODULES, modules, offload_modules, policy

MIN_OFFLOADED = 2 ** 20          # elements: Megatron leaves smaller tensors on the GPU (min_offloaded_tensor_size)


def offload_bytes(model: ModelSpec, par: ParallelConfig, moe_layer: bool) -> tuple[float, float]:
    """(bytes freed on the GPU, bytes copied to the host) per layer per micro-batch under Megatron's
    fine-grained activation offloading (parallel.offload_modules): every tensor of 1M elements or
    more that each module saves in its forward (saved-tensor hooks around the module,
    fine_grained_activation_offload.py), and its input, which it releases:
    - attn_norm: MLA's input norm's input (a dense layer's norms are fused into the linear after
      them, IdentityOp: nothing); mlp_norm: a MoE layer's pre-MLP norm's input alike;
    - qkv_linear: the fused norm-linear's input and output; with MLA everything before the core:
      the norm's output (freed already where layernorm is recomputed), the latents and their
      norms' outputs, the RoPE part;
    - core_attn: q, k and v (copied, but discarded anyway where mla_up_proj is recomputed) and the
      attention output, which the output projection keeps too: freed only with attn_proj. Where
      the core is recomputed (core_attn, Megatron's selective) its checkpoint runs outside the
      offloading, and attn_proj alone moves the output;
    - expert_fc1: the dispatched tokens the experts' first GEMM keeps (1 byte under FP8), copied in
      bf16 but under MXFP8 (the GEMM keeps its original input to offload it, experts.py); moe_act:
      that GEMM's output, which the activation keeps (recomputed or not).
    Nothing under full recompute or for other frameworks."""
    parts = offload_parts(model, par, moe_layer)
    return sum(f for f, _ in parts.values()), sum(c for _, c in parts.values())


def offload_parts(model: ModelSpec, par: ParallelConfig, moe_layer: bool) -> dict:
    """offload_bytes by module: {module: (bytes freed, bytes copied)}, in the layer's forward order."""
    if not par.offload_modules or par.framework != "megatron":
        return {}
    mods = set(offload_modules(par.offload_modules))
    kind, every = policy(par.framework, par.recompute)
    if not mods or kind in ("full", "op_sac"):
        return {}
    t, T, h = par.tp, tokens(par), model.hidden
    T_sp = T / t if par.sp else T
    recomputed = set(modules(par.recompute))
    core_recomputed = kind == "core_attn" or "core_attn" in recomputed
    tensors = []                     # (module, bytes per element copied, bytes per element freed, elements)
    if model.mla:
        x = model.mla
        if "attn_norm" in mods:
            tensors.append(("attn_norm", BF16, BF16, T_sp * h))
        if "qkv_linear" in mods:
            tensors += [("qkv_linear", BF16, BF16 * ("layernorm" not in recomputed), T_sp * h),
                        ("qkv_linear", BF16 + gemm_input_bytes(par), BF16 + gemm_input_bytes(par),
                         T_sp * (x.q_lora_rank + x.kv_lora_rank)),
                        ("qkv_linear", BF16, BF16, T_sp * x.qk_rope_dim)]
    elif "qkv_linear" in mods:
        tensors += [("qkv_linear", BF16, BF16, T_sp * h), ("qkv_linear", gemm_input_bytes(par), gemm_input_bytes(par),
                                                           T_sp * h)]
    out_freed = "attn_proj" in mods
    if "core_attn" in mods and not core_recomputed:
        discarded = bool(model.mla) and "mla_up_proj" in recomputed
        k_width, v_width = (model.q_dim, model.attn_out_dim) if model.mla else (model.kv_dim, model.kv_dim)
        tensors += [("core_attn", BF16, 0 if discarded else BF16, T * width / t)
                    for width in (model.q_dim, k_width, v_width)]
        tensors += [("core_attn", FP32, FP32, T * model.heads / t),
                    ("core_attn", BF16, BF16 * out_freed, T * model.attn_out_dim / t)]
    elif out_freed:
        tensors.append(("attn_proj", BF16, BF16, T * model.attn_out_dim / t))
    if moe_layer:
        e = model.moe
        if "mlp_norm" in mods:
            tensors.append(("mlp_norm", BF16, BF16, T_sp * h))
        if "expert_fc1" in mods:
            keeps = gemm_input_bytes(par)
            sent = keeps if par.precision == "fp8" and par.fp8_recipe == "mxfp8" else BF16
            tensors.append(("expert_fc1", sent, keeps, e.top_k * T_sp * h))
        if "moe_act" in mods:
            tensors.append(("moe_act", BF16, BF16, e.top_k * T_sp * e.expert_ffn * _ffn_inputs(model) / par.etp))
    out = {}
    for module, copied, freed, elements in tensors:
        if elements >= MIN_OFFLOADED:
            f, c = out.get(module, (0.0, 0.0))
            out[module] = (f + freed * elements, c + copied * elements)
    return {m: out[m] for m in OFFLOAD_MODULES if m in out}


# Runs of offload groups with no compute between them, in forward order. Megatron brings a group
# back when the group after it (in forward order) has finished its backward, and waits for it as
# its own backward starts (on_group_start_backward, on_group_commit_backward): the first group of
# a run (in backward order) reloads beside what ran since the run before, the others as they wait.
ADJACENT = (("attn_norm", "qkv_linear", "core_attn", "attn_proj", "mlp_norm"), ("expert_fc1", "moe_act"))


def reload_split(parts: dict) -> tuple[float, float]:
    """(bytes whose reload can hide behind compute, bytes whose reload the backward waits for) of
    offload_parts: per run of ADJACENT groups, the last present one hides, the rest wait."""
    hides = waits = 0.0
    for run in ADJACENT:
        present = [parts[m][1] for m in reversed(run) if m in parts]
        if present:
            hides, waits = hides + present[0], waits + sum(present[1:])
    return hides, waits


def offloaded(model: ModelSpec, par: ParallelConfig, moe_layer: bool) -> float:
    """Bytes of one layer's saved activations per micro-batch that fine-grained offloading frees
    on the GPU (offload_bytes)."""
    return offload_bytes(model, par, moe_layer)[0]


def kept_on_gpu(model: ModelSpec, par: ParallelConfig, moe_layer: bool) -> float:
    """activations.saved_per_layer less what fine-grained offloading keeps in host memory (with
    layer:N, on the N - 1 layers that keep everything)."""
    if not par.offload_modules:
        return saved_per_layer(model, par, moe_layer)
    kind, every = policy(par.framework, par.recompute)
    if every == 1:
        return saved_per_layer(model, par, moe_layer) - offloaded(model, par, moe_layer)
    plain = replace(par, recompute="none", recompute_ranks=())
    return saved_per_layer(model, par, moe_layer) - offloaded(model, plain, moe_layer) * (every - 1) / every
