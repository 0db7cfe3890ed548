"""FP8 as the stacks run it. Megatron: Transformer Engine's recipe (`parallel.fp8_recipe`), what
the FP8 layers' weights are kept as (`parallel.fp8_weights`) and the bytes that takes, from TE's
own tensor layouts and Megatron's flags. fsdp2: torchao's float8 recipes (`parallel.fp8_recipe`
too), which differ in what they gather and cast (`tp_gather_bytes`, time/elementwise.fp8_casts)
and which GEMMs run in FP8 (`fp8_weight_grad`)."""
from __future__ import annotations

from functools import lru_cache

FP8_TEXT = {"fp8": ", FP8 weights (--fp8-param-gather)",
            "bf16": ", bf16 weights with Transformer Engine's cached FP8 copy"}


TE_RECIPES = ("delayed", "tensorwise", "mxfp8", "blockwise")        # Megatron's --fp8-recipe
TORCHAO_RECIPES = ("tensorwise", "rowwise", "rowwise_with_gw_hp", "mxfp8")  # torchtitan's float8 / mx converters


def fp8_recipe(par) -> str:
    """The FP8 scaling recipe (`parallel.fp8_recipe`), the framework's where empty: Megatron's is
    Transformer Engine's delayed scaling (Megatron-LM's default and the recipe the export writes);
    fsdp2's is torchao's tensorwise (dynamic per-tensor scales: Float8LinearConfig's default, and
    torchtitan's float8 converter without a recipe name)."""
    return par.fp8_recipe or ("tensorwise" if par.framework == "fsdp2" else "delayed")


def fp8_weight_grad(par) -> bool:
    """Whether the linears' weight-gradient GEMMs run in FP8: all but torchao's rowwise_with_gw_hp,
    which keeps them in bf16 for accuracy (its input and output gradient are not cast for them:
    Float8LinearConfig.from_recipe_name, cast configs *_for_grad_weight DISABLED); the experts'
    grouped GEMMs run theirs in FP8 under every recipe."""
    return par.precision == "fp8" and not (par.framework == "fsdp2" and fp8_recipe(par) == "rowwise_with_gw_hp")


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
      redistribution's backward: 1 byte. torchtitan uses them with tensorwise scaling only
      (parallelize: enable_float8_tensorwise_tp); its rowwise and MX recipes take the plain bf16
      TP plan and cast after gathering.
    2 (bf16) otherwise. Not modelled: with tp_overlap, NVIDIA's FP8 userbuffers configurations also
    write the forward's reduce-scatters in FP8 (fp8_buf on proj_fprop and fc2_fprop), mostly hidden."""
    if par.precision != "fp8" or par.framework not in ("megatron", "fsdp2"):
        return 2.0
    if par.framework == "megatron":
        return 1.0 + {"mxfp8": 1 / 32, "blockwise": 4 / 128}.get(fp8_recipe(par), 0.0)
    return 1.0 if fp8_recipe(par) == "tensorwise" else 2.0


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


# torchao's float8 and MX casts under fsdp2: HBM bytes per element of each GEMM operand, (forward,
# backward), compiled and eager, per recipe. x: a linear's input (its forward cast and the copy its
# weight gradient reads), g: its output gradient, w: its gathered (TP-sharded) weight, per
# micro-batch.
# - tensorwise: this product's count of torchao's kernels (eager: the abs-max read, the cast's read
#   and write, the transposed FP8 copy Hopper's GEMM layout needs for the weight gradient; compiled,
#   the abs-max and cast fuse into the producing kernel), whose compiled total over x and g is
#   torchao's roofline's (torchao/testing/training/roofline_utils.py,
#   get_tensor_memory_traffic_ovhd_s). Its weights: cast on their FSDP shard before a float8
#   all-gather, leaving the gathered weight's transpose (1 + 1; "w") when FSDP shards them, else
#   cast whole every micro-batch (abs-max 2, cast 3, backward's transposed cast 3; "w_unsharded");
# - rowwise, rowwise_with_gw_hp and mxfp8 as that roofline counts them, compiled figures fusing the
#   first read into the producer: rowwise's row scales of the weight-gradient operands run along
#   the other dimension, so each operand is cast twice, once through a bf16 transposed copy (x and
#   g: 1 + 2 written, then 2 read and 1 written; w: 3, then 4 for the transpose and 3);
#   rowwise_with_gw_hp casts x and g once (the weight gradient reads them in bf16), w twice;
#   mxfp8 (torchao's mxfp8_cublas) each operand along both dimensions in two kernels.
# The experts' grouped GEMMs run torchao's float8 rowwise grouped GEMM (or MXFP8's under mxfp8)
# whatever the linears' recipe (torchao moe_training; torchtitan's quantize.grouped_mm converters).
TORCHAO_CASTS = {
    "tensorwise": {"compiled": {"x": (3, 0), "g": (0, 5), "w": (0, 2), "w_unsharded": (5, 3)},
                   "eager": {"x": (7, 0), "g": (0, 9), "w": (0, 2), "w_unsharded": (5, 3)}},
    "rowwise": {"compiled": {"x": (3, 3), "g": (0, 6), "w": (3, 7)},
                "eager": {"x": (5, 3), "g": (0, 8), "w": (3, 7)}},
    "rowwise_with_gw_hp": {"compiled": {"x": (1, 0), "g": (0, 1), "w": (3, 3)},
                           "eager": {"x": (3, 0), "g": (0, 3), "w": (3, 3)}},
    "mxfp8": {"compiled": {"x": (1, 3), "g": (0, 4), "w": (3, 3)},
              "eager": {"x": (3, 3), "g": (0, 6), "w": (3, 3)}},
}


def torchao_casts(par, expert: bool) -> dict:
    """{"x", "g", "w": (forward, backward) bytes per element} of one GEMM's casts under torchao
    (TORCHAO_CASTS): the experts' by their grouped GEMM's recipe, the linears' by fp8_recipe, the
    tensorwise weights by whether FSDP gathers them in float8 (float8_all_gather)."""
    recipe = fp8_recipe(par)
    if expert:
        recipe = "mxfp8" if recipe == "mxfp8" else "rowwise"
    per = dict(TORCHAO_CASTS[recipe]["compiled" if par.compile else "eager"])
    if recipe == "tensorwise" and not float8_all_gather(par):
        per["w"] = per["w_unsharded"]
    return per


def float8_all_gather(par) -> bool:
    """Whether FSDP gathers torchao's tensorwise float8 weights in float8: the calculators take the
    setting torchao's and torchtitan's float8 benchmarks run (enable_fsdp_float8_all_gather with
    precomputed scales; torchtitan's own default is off) wherever FSDP shards the weights (ZeRO 2/3
    over more than one rank of a replica); torchtitan refuses it with a recipe
    name, so rowwise and MX gather bf16."""
    from .parallel import zero_shards            # here: parallel imports this module through overlap.py
    return (par.framework == "fsdp2" and par.precision == "fp8" and fp8_recipe(par) == "tensorwise"
            and par.zero >= 2 and zero_shards(par)[0] > 1)


def torchao_rescale_bytes(par) -> tuple[float, float]:
    """HBM bytes per output element torchao adds after the (input-gradient, weight-gradient) GEMMs of
    a linear. Its backward GEMMs accumulate slowly (Float8GemmConfig use_fast_accum False), and when
    both operands carry axis-wise scales torchao runs cuBLAS's per-tensor kernel with unit scales and
    multiplies the bf16 output by the outer product of the scales afterwards
    (float8_ops.addmm_float8_unwrapped, since torchao pull request 1325, 2024-11: "the rowwise
    CUTLASS-based kernel is so slow without fast-accum"). rowwise: both; rowwise_with_gw_hp: the
    input gradient only, whose tensorwise weight scale preprocess_addmm repeats along the axis (its
    weight gradient is a bf16 GEMM). Compiled, one kernel reads and writes the output (2 + 2); eager,
    the fp32 outer product is written (4), then read with the output (4 + 2) and the output written
    (2). The experts' grouped GEMMs accumulate fast and are not rescaled."""
    if par.framework != "fsdp2" or par.precision != "fp8":
        return 0.0, 0.0
    per = 4.0 if par.compile else 12.0
    return {"rowwise": (per, per), "rowwise_with_gw_hp": (per, 0.0)}.get(fp8_recipe(par), (0.0, 0.0))


def param_gather_bytes(par) -> tuple[float, float]:
    """(dense, expert) bytes per element of an FP8 layer's weight in data parallelism's weight
    all-gathers (ZeRO 1/2 after the optimizer, ZeRO 3 per layer); every other parameter gathers bf16.
    - megatron with FP8 parameters (fp8_weights "fp8", --fp8-param-gather): the distributed
      optimizer and Megatron-FSDP gather the FP8 data, 1 byte (blockwise adds its fp32 scale per
      128 x 128 block); MXFP8 parameters gather bf16 through the gradient buffer and quantize again.
    - fsdp2 with torchao's tensorwise recipe: each linear's weight shard is cast to float8 before
      FSDP's all-gather (float8_all_gather), 1 byte; the experts' grouped weights and the rowwise
      and MX recipes gather bf16.
    2 (bf16) otherwise."""
    if par.precision != "fp8":
        return 2.0, 2.0
    recipe = fp8_recipe(par)
    if par.framework == "megatron" and fp8_weights(par) == "fp8" and recipe != "mxfp8":
        q = 1.0 + (4 / 128 ** 2 if recipe == "blockwise" else 0.0)
        return q, q
    if float8_all_gather(par):
        return 1.0, 2.0
    return 2.0, 2.0
