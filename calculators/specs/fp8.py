"""Transformer Engine's FP8 under Megatron: the recipe (`parallel.fp8_recipe`), what the FP8
layers' weights are kept as (`parallel.fp8_weights`) and the bytes that takes, from TE's own tensor
layouts and Megatron's flags."""
from __future__ import annotations

from functools import lru_cache

FP8_TEXT = {"fp8": ", FP8 weights (--fp8-param-gather)",
            "bf16": ", bf16 weights with Transformer Engine's cached FP8 copy"}


def fp8_recipe(par) -> str:
    """Transformer Engine's FP8 scaling under Megatron (`parallel.fp8_recipe`): delayed where empty,
    Megatron-LM's default and the recipe the export writes."""
    return par.fp8_recipe or "delayed"


def fp8_weights(par) -> str:
    """"fp8" or "bf16": what Megatron keeps its FP8 layers' weights as (`parallel.fp8_weights`, else
    the framework's). fp8: FP8 parameters (--fp8-param-gather; all-gathered in FP8, but for MXFP8,
    gathered in bf16 through the gradient buffer and quantized again), as NVIDIA's
    recipes run them (Megatron-Bridge's fp8_cs, fp8_mx and delayed precision configs,
    training/mixed_precision.py); Megatron accepts them only with its distributed optimizer or
    Megatron-FSDP, so ZeRO 0 keeps bf16 weights. bf16: bf16 parameters, of which each Transformer
    Engine module caches the FP8 copy its first micro-batch makes, keeps it from step to step and
    updates it in place (Megatron passes is_first_microbatch; the module's _fp8_workspaces). Empty for the other
    frameworks and for bf16 training: no FP8 weights."""
    if par.framework != "megatron" or par.precision != "fp8":
        return ""
    return par.fp8_weights or ("fp8" if par.zero >= 1 else "bf16")


def quantized_weight_bytes(par, blackwell: bool) -> float:
    """Bytes per parameter of one FP8 weight as Transformer Engine keeps it for forward and
    backward: per-tensor scaling (delayed, tensorwise) stores the FP8 data and, where the FP8 GEMMs
    take only the TN layout (Hopper), its transpose: 2 bytes, 1 on Blackwell, whose GEMMs read
    either layout from one buffer (is_non_tn_fp8_gemm_supported, Float8Quantizer's
    inner_tensor_specs); MXFP8 keeps row-wise and column-wise data, each with an 8-bit scale per 32
    elements (2 + 2/32); blockwise (DeepSeek-V3's) row-wise and column-wise data with an fp32 scale
    per 128 x 128 block of a weight (2 + 8/16384)."""
    recipe = fp8_recipe(par)
    if recipe == "mxfp8":
        return 2 + 2 / 32
    if recipe == "blockwise":
        return 2 + 8 / 128 ** 2
    # Megatron-FSDP (ZeRO 2/3) stores the per-tensor recipes' FP8 parameters without their transpose:
    # it makes it when a layer is gathered for backward and frees it with the layer
    # (keep_fp8_transpose_cache False by default; param_and_grad_buffer: only MXFP8 keeps one)
    return 1.0 if blackwell or (par.zero >= 2 and fp8_weights(par) == "fp8") else 2.0


def tp_gather_bytes(par) -> float:
    """Bytes per element of sequence parallelism's all-gathers (the column-parallel linears' input
    forward, the row-parallel linears' output gradient backward); its reduce-scatters stay bf16.
    With FP8 both frameworks quantize before gathering:
    - megatron: Transformer Engine quantizes the norm output, then all-gathers the FP8 data
      (module/layernorm_linear.py, gather_along_first_dim with the input quantizer, through NCCL
      or userbuffers), and the output gradient likewise with its quantizer: 1 byte, plus MXFP8's
      8-bit scale per 32 elements or blockwise's fp32 scale per 128;
    - fsdp2: torchtitan's float8 TP is torchao's Float8ColwiseParallel, Float8RowwiseParallel and
      PrepareFloat8ModuleInput (torchao/float8/float8_tensor_parallel.py): the input cast to float8
      before its all-gather, the output gradient cast before the all-gather that is its
      redistribution's backward: 1 byte. torchtitan uses them with tensorwise scaling only, the
      recipe fsdp2's FP8 stands for here (its float8 default); rowwise runs gather bf16.
    2 (bf16) otherwise. Not modelled: with tp_overlap, NVIDIA's FP8 userbuffers configurations also
    write the forward's reduce-scatters in FP8 (fp8_buf on proj_fprop and fc2_fprop), mostly hidden."""
    if par.precision != "fp8" or par.framework not in ("megatron", "fsdp2"):
        return 2.0
    if par.framework == "megatron":
        return 1.0 + {"mxfp8": 1 / 32, "blockwise": 4 / 128}.get(fp8_recipe(par), 0.0)
    return 1.0


def fp8_weight_extra(par, blackwell: bool) -> float:
    """Bytes per parameter of Megatron's FP8 layers beyond the 2 of a bf16 weight: FP8 parameters'
    quantized bytes less 2, or bf16 parameters' cached FP8 copy (fp8_weights); 0 without FP8 weights."""
    kind = fp8_weights(par)
    if not kind:
        return 0.0
    q = quantized_weight_bytes(par, blackwell)
    return q - 2 if kind == "fp8" else q


@lru_cache(maxsize=1024)
def fp8_layer_params(model, moe: bool, tp: int, ep: int, etp: int) -> tuple[float, float]:
    """(dense, expert) parameters one GPU holds of one layer's Transformer Engine linears, the
    layers Megatron runs in FP8: every weight matrix but the router's (no biases)."""
    dense = expert = 0.0
    for m in model.layer_matmuls(moe):
        w = m.stored * m.fan_in * m.fan_out
        if m.expert:
            expert += w / (ep * etp)
        elif m.name != "router":
            dense += w / tp if m.tp in ("col", "row") else w
    return dense, expert
