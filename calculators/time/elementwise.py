"""The element-wise work of one layer (norms, RoPE, the MLP's activation, residual adds) as each
stack runs it: HBM bytes per token and kernel launches, forward and backward.

A GEMM's time is its math; these kernels' time is their bytes, and stacks differ by several
times in how many they move:
- fused (Megatron with Transformer Engine, nanotron, and any stack under torch.compile): each
  norm reads its input and writes its output once, RoPE reads and writes q and k once, the
  SwiGLU reads gate and up and writes their product; backward moves twice the forward's bytes.
- eager PyTorch, as torchtitan's blocks run without torch.compile (fsdp2): nn.RMSNorm
  decomposes into an fp32 upcast, pow, mean, rsqrt, two multiplies and a downcast (40 bytes per
  element forward, about 109 backward); RoPE multiplies q and k as complex64 (fp32 pairs: 20
  bytes per element); SiLU and the product are two kernels. Counted from PyTorch itself:
  tests/calculators/test_elementwise_torch.py traces a torchtitan-style block's forward and
  backward op by op (TorchDispatchMode on fake tensors) and checks the coefficients below.
- eager Hugging Face modules (deepspeed): LlamaRMSNorm upcasts to fp32 and multiplies the
  weight in bf16 (36 bytes per element forward); RoPE by rotate_half in bf16; checked the same way.
Which one a layout runs is kernels.elementwise_kernels' (`parallel.elementwise` overrides it: a
PyTorch-native stack on Transformer Engine's or Liger's modules is fused without compiling; an
eager Megatron or nanotron is counted with torchtitan's eager ops).
Hugging Face's move their bytes at a measured pace (EAGER_STACK_PACE). PyTorch 2.8 added a fused
rms_norm CUDA kernel (pytorch pull request 153666): the eager counts describe the PyTorch of the
published torchtitan runs (2.4 to 2.7); on 2.8 and later an eager torchtitan block's element-wise
work took about half the time they give (call 22).

Coefficients: bytes per token per unit of width, for h (applied to the tokens of the norm
regions, T/tp with sequence parallelism), q_dim and kv_dim (T tokens, sharded by tp), the MLP's
intermediate width (T tokens, sharded) and the head dim (RoPE's table, read per token).
"""
from __future__ import annotations

from ..specs.fp8 import torchao_casts, torchao_rescale_bytes
from ..specs.frameworks import fused_matmuls
from ..specs.kernels import elementwise_kernels
from ..specs.models import ModelSpec
from ..specs.parallel import ParallelConfig, routed_tokens
from .native_passes import autocast_extras, ring_extras

# (h, q, kv, ffn, head_dim) bytes per token, and kernels, of a SwiGLU layer's element-wise ops
FUSED = {"forward": ((20, 4, 4, 6, 0), 10), "backward": ((40, 8, 8, 12, 0), 20)}
EAGER = {
    "fsdp2": {"forward": ((92, 20, 20, 10, 8), 26), "backward": ((248, 20, 20, 18, 24), 50)},
    "deepspeed": {"forward": ((84, 20, 20, 10, 8), 30), "backward": ((224, 32, 32, 18, 4), 56)},
}
# The eager tables' passes move their bytes slower than a stream, as the gpt-oss sequences below
# do: timed on our H200 (call 22, benchmarks/sessions/eager_blocks.py, the blocks of
# tests/calculators/reference_eager.py under torch.profiler), the GPU time of every kernel that is
# not a GEMM or attention, forward and backward, against EAGER's bytes at the streaming rate.
# Hugging Face's block (deepspeed) took 1.43 and 1.22 times it (fitted on Llama 3 8B at 8,192
# tokens; Llama 3 8B at 4,096 and Llama 3.2 1B at 16,384, held out, within 4%), 37 to 39% of it in
# PyTorch's non-vectorized element-wise kernels (elementwise_kernel<128, 4> and <128, 2>), which run
# strided and broadcast operands, as rotate_half's halves and the broadcast cos and sin are. Its
# norm and RoPE are Python in every version. torchtitan's (fsdp2) is not paced: with the composite
# norm of PyTorch 2.7 and earlier, which the table counts, it took 1.19 to 1.24 and 1.06 to 1.10
# times it, and the published eager runs that use the table are of several versions; since
# PyTorch 2.8 a GPU's nn.RMSNorm is one fused kernel (EAGER_FUSED_NORM, within 7% unpaced).
# Measured on Hopper only.
EAGER_STACK_PACE = {"deepspeed": (1.43, 1.22)}
# torchtitan's eager block on PyTorch 2.8 and later (elementwise="eager-fused-norm"): its two
# nn.RMSNorm run PyTorch's fused kernels, one forward (reading x, writing y and the fp32 rstd: 4
# bytes per element) and two backward (the input's gradient, 6; the weight's, 4), in place of the
# composite norm's 40 forward and 109 backward each; the rest is EAGER["fsdp2"]'s. From PyTorch's trace
# of the block with the fused kernels as ops (tests/calculators/reference_eager.py, FusedRMSNorm).
EAGER_FUSED_NORM = {"forward": ((20, 20, 20, 10, 8), 12), "backward": ((50, 20, 20, 18, 24), 20)}
# a 2-matrix MLP (GELU): the activation reads and writes the intermediate once forward (2 + 2
# bytes), backward twice that; no product kernel
GELU = {"forward": 4, "backward": 8}


# A clamped GLU (gpt-oss: glu_limit) clamps the two halves of its input before the activation.
# Megatron-Core runs the clamps and their concatenation as eager PyTorch ahead of its compiled GLU
# (fusions/fused_bias_geglu.py, the clamp_value path), as does any eager stack; torch.compile and
# Transformer Engine's fused grouped MLP fold them into their kernels. (bytes per element of the
# GLU's input, 2 x ffn a token, kernels), counted from PyTorch's own trace of the sequence
# (tests/calculators/test_gpt_oss_torch.py): two clamps and a cat forward; backward their masks,
# where's and the cat's gradient.
CLAMP = {"forward": (8, 3), "backward": (15, 9)}
# Megatron's grouped experts with biases (gpt-oss: bias) add the second GEMM's bias outside it, per
# local expert: its rows plus the bias times the routing probability, concatenated (moe/experts.py,
# TEGroupedMLP._apply_bias, the unpacked path). The probabilities are the router's dtype, its input's
# (bf16) unless --moe-router-dtype says fp32, but DeepEP and HybridEP take them in fp32
# (token_dispatcher.py): then the sum is fp32 and cast back. (bytes per element of that GEMM's
# output, hidden a routed copy, kernels per local expert, kernels more), from the same trace;
# Transformer Engine's fused grouped MLP adds both biases in its GEMMs.
EXPERT_BIAS = {"bf16": {"forward": (12, 2, 1), "backward": (16, 4, 3)},
               "fp32": {"forward": (28, 2, 2), "backward": (40, 6, 4)}}
# Both sequences move their bytes slower than a streaming kernel: their clamps read the strided
# halves of their input and their products a broadcast bias and probability, and PyTorch runs such
# operands on its non-vectorized element-wise path (elementwise_kernel<128, 4> and its kin: four
# fifths of the clamp's GPU time and half to two thirds of the bias's under torch.profiler). Timed on our H200 at the Megatron-Bridge
# runs' shapes (benchmarks/sessions/gpt_oss_passes.py, validation/data/h100_harness/
# gpt_oss_passes_h200.jsonl, call 19: each backward's gradients returned, as Megatron's non-leaf
# inputs take them), each took these multiples of its traced bytes at the streaming rate, (forward,
# backward): the clamp at 16,384 and 65,536 rows alike (1.80 and 1.78, 2.00 and 1.93), the bias at
# 65,536 rows over 2 local experts (over 16, 1,024 rows each, its launches set the pace: the
# kernels' floor). Held out (call 20): the clamp at 32,768 rows, the bias over 4 experts of 16,384
# rows and q's RoPE at 8,192 tokens within 5%. Measured on Hopper only; every GPU takes them,
# Blackwell's unmeasured.
EAGER_PACE = {"clamp": (1.79, 1.97), "bf16": (1.38, 1.71), "fp32": (1.47, 1.34), "rope": (2.13, 1.95)}
# RoPE scaled by YaRN (the model's yarn: gpt-oss), which Megatron applies unfused: its
# position_embedding_type yarn turns rope fusion off (Megatron-LM's arguments, Megatron-Bridge's
# validate_rope_fusion_compatibility), and rope_utils.apply_rotary_pos_emb also keeps Transformer
# Engine's fused kernel out for a YaRN scale other than 1. To q and to k each: cos and sin of the
# frequencies, scaled and cast, then t * cos + rotate_half(t) * sin and the concatenation with the
# rest of the head. (bytes per element of q and k, bytes per position per rotary dim for the
# tables, kernels per call), from PyTorch's trace of benchmarks/eager_ops.unfused_rope
# (tests/calculators/test_gpt_oss_torch.py), at the pace of EAGER_PACE["rope"], our H200's time for
# q at 16,384 tokens (its halves and the rotated concatenation run on the non-vectorized kernels),
# in place of the fused kernel's 4 and 8 bytes. MLA's rotary path is its own.
ROPE_UNFUSED = {"forward": (24, 44, 12), "backward": (28, 0, 7)}


def _fused_experts(par: ParallelConfig) -> bool:
    """Whether the experts' element-wise work runs inside fused kernels (torch.compile, or
    Transformer Engine's fused grouped MLP)."""
    return par.compile or par.experts == "fused"


def eager_clamp(model: ModelSpec, par: ParallelConfig) -> bool:
    """Whether the experts' GLU clamps its input in eager passes of its own (CLAMP)."""
    return model.moe is not None and model.glu_limit > 0 and model.mlp == "swiglu" and not _fused_experts(par)


def glu_extras(model: ModelSpec, par: ParallelConfig, tokens: float, way: str) -> tuple[float, int]:
    """(bytes, kernels) an MoE layer's clamped GLU and Megatron's unfused expert bias add, for
    `tokens` tokens of a micro-batch on one GPU, "forward" or "backward": the bytes a streaming
    kernel would move in the time they take (their traced bytes times EAGER_PACE)."""
    e = model.moe
    nbytes, kernels = 0.0, 0
    i = ("forward", "backward").index(way)
    if eager_clamp(model, par):
        per, k = CLAMP[way]
        nbytes, kernels = per * tokens * 2 * e.top_k * e.expert_ffn / par.etp * EAGER_PACE["clamp"][i], k
    if e is not None and model.bias and par.framework == "megatron" and not _fused_experts(par):
        dtype = "fp32" if par.dispatcher in ("deepep", "hybridep") else "bf16"
        per, k_expert, k = EXPERT_BIAS[dtype][way]
        nbytes += per * tokens * e.top_k * model.hidden * EAGER_PACE[dtype][i]
        kernels += k_expert * max(1, e.experts // par.ep) + k
    return nbytes, kernels


def rope_extras(model: ModelSpec, par: ParallelConfig, tokens: float, way: str) -> tuple[float, int]:
    """(bytes, kernels) Megatron's unfused RoPE adds over the fused kernel's for `tokens` tokens of a
    micro-batch on one GPU (mbs * seq / cp), where the model's RoPE is YaRN-scaled (ROPE_UNFUSED);
    its cos and sin tables are per position, not per sequence of the micro-batch."""
    if par.framework != "megatron" or not model.yarn or model.mla is not None or elementwise_kernels(par) != "fused":
        return 0.0, 0
    per, table, kernels = ROPE_UNFUSED[way]
    fused = FUSED[way][0][1]                                     # the fused kernel's bytes, counted already
    width = (model.q_dim + model.kv_dim) / par.tp
    pace = EAGER_PACE["rope"][("forward", "backward").index(way)]
    positions = par.seq / par.cp
    return tokens * width * (per * pace - fused) + 2 * table * pace * positions * model.head_dim, 2 * kernels


def permute_bytes(model: ModelSpec, tokens: float) -> float:
    """HBM bytes of an MoE layer's forward permutation and unpermutation for `tokens` tokens, as one
    fused kernel each way runs them (Transformer Engine's moe_permute and moe_unpermute, which
    Megatron's moe_permute_fusion uses): K bf16 copies of each token written out in expert order,
    and read back for the weighted combine, each token gathering its K copies (the backward moves
    twice this)."""
    return 2 * 2 * tokens * model.hidden * model.moe.top_k


# An eager stack's permutation, as torchtitan's token dispatcher runs it: dispatch gathers each
# token's K copies in expert order (read 2, write 2 bytes per copied element); combine scales each
# copy by its routing score through fp32 (three kernels: upcast 2 + 4, multiply 4 + 4, downcast
# 4 + 2 = 20) and scatter_adds it into its token (2 read per copy, 2 written per token, by
# accumulation). Backward mirrors it: the scatter's gradient is a gather (4), the scale's 20, the
# gather's gradient a scatter_add into the input's gradient. With expert parallelism the copies
# are reordered from rank-major to expert-major after the dispatch all-to-all (a gather, 4) and
# back before the combine (an index_put, 4); backward, the index_put's gradient is a gather (4) and
# the gather's an index_put that accumulates into a zero-filled buffer (2 + 6): 12. The routing
# scores are trained through this product, so the backward also forms the scores' gradient: the
# output gradient times the fp32 copies (4 + 4, write 4) summed over the hidden dimension (read 4):
# 16 more, in two kernels (counted from PyTorch's own trace, tests/calculators; our GPU timings ran
# the sequence with fixed scores, `score_grad=False`).
EAGER_PERMUTE = 4 + 20
EP_REORDER = {"forward": 8, "backward": 12}
SCORE_GRAD = 16
# PyTorch's eager accumulating scatter (atomic adds, or its sorted deterministic kernel) moves its
# bytes at about a fifth of the rate the calculators give HBM (hbm_tbps x hbm_fraction): measured
# (benchmarks/sessions/moe_permute.py) at 4.2 to 4.8 times that time on an H100 (atomic bf16
# scatter_add, four MoE shapes; the deterministic kernel, torchtitan 0.3's, 3.5 to 5.4) and 4.6
# to 6.2 on an H200 (deterministic). Fitted on the H100's atomic rows; the rest are the check.
# torch.compile writes the sequence as four Triton kernels with vectorised fp32 atomics. A compiled
# stack takes permute_bytes, which read the H200's compiled runs of it at 0.86 (forward) and 0.81
# (backward) of the count for DeepSeek-V3's 16,384 tokens but 1.1 to 4.5 times for the narrower
# shapes (Llama 4 Scout's top-1: 0.20 ms against 0.044 counted): its forward zeroes, accumulates
# and casts an fp32 buffer per token, 18 to 35 bytes per token and hidden element at the HBM rate
# on these four shapes, which with one or two copies a token outweighs the copies: a known gap.
ACCUMULATE = 5.0


def eager_permute_parts(model: ModelSpec, tokens: float, ep: int, way: str,
                        score_grad: bool = True) -> tuple[float, float]:
    """(bytes the plain kernels move, bytes the accumulating scatter moves) of an eager MoE layer's
    permutation and combine for `tokens` tokens, "forward" or "backward"; `score_grad`: the
    backward forms the routing scores' gradient, as training does."""
    copies = tokens * model.moe.top_k * model.hidden
    per_copy = EAGER_PERMUTE + (EP_REORDER[way] if ep > 1 else 0) + (SCORE_GRAD if score_grad and way == "backward"
                                                                      else 0)
    return per_copy * copies + 2 * tokens * model.hidden, 2 * copies + 2 * tokens * model.hidden   # + zero-fill


def eager_permute_kernels(ep: int, way: str, score_grad: bool = True) -> int:
    """Kernels of the eager permutation and combine: gather, three for the fp32 scale, zero-fill,
    scatter; two for EP's reorders; two backward for the scores' gradient."""
    return 6 + (2 if ep > 1 else 0) + (2 if score_grad and way == "backward" else 0)


def eager_permute_bytes(model: ModelSpec, tokens: float, ep: int, way: str, score_grad: bool = True) -> float:
    """HBM-equivalent bytes of an eager MoE layer's permutation and combine for `tokens` tokens,
    "forward" or "backward", the scatter's counted ACCUMULATE times. With fixed scores
    (score_grad=False) this reads torchtitan's whole sequence on an H100 to within 17% on four MoE
    shapes, with and without expert parallelism (python -m validation.harness); the scores'
    gradient is PyTorch's own count, not timed."""
    plain, scatter = eager_permute_parts(model, tokens, ep, way, score_grad)
    return plain + ACCUMULATE * scatter


def layer_bytes(model: ModelSpec, par: ParallelConfig, moe_layer: bool, tokens: float) -> dict:
    """{"forward": (bytes, kernels), "backward": (bytes, kernels)} of one layer's element-wise
    work for `tokens` tokens of a micro-batch on one GPU, and "mlp_share": the (forward, backward)
    fraction of those bytes that is the MLP's (its activation; an MoE layer's permutation). MoE
    layers add the permutation of the routed tokens to their experts and back: fused, K copies of
    each token each way and twice that backward (permute_bytes); eager, torchtitan's sequence
    (eager_permute_bytes)."""
    t = par.tp
    t_sp = tokens / t if par.sp else tokens
    # eager ops as torchtitan writes them, or as Hugging Face's modules do under DeepSpeed
    kind = elementwise_kernels(par)
    eager = kind != "fused"
    stack = par.framework if par.framework in EAGER else "fsdp2"
    table = FUSED if not eager else EAGER_FUSED_NORM if kind == "eager-fused-norm" else EAGER[stack]
    if moe_layer and model.moe:
        e = model.moe
        f_local = e.top_k * e.expert_ffn / par.etp + e.shared_experts * (e.shared_ffn or e.expert_ffn) / t
        routed = routed_tokens(par, tokens)          # what this GPU permutes: its shard, gathered over expert TP
        if table is FUSED:
            permute = {"forward": permute_bytes(model, routed), "backward": 2 * permute_bytes(model, routed)}
        else:
            permute = {way: eager_permute_bytes(model, routed, par.ep, way) for way in ("forward", "backward")}
    else:
        f_local, permute = model.ffn / t, None
    permute_kernels = {way: 4 if table is FUSED else eager_permute_kernels(par.ep, way)
                       for way in ("forward", "backward")}
    cast = fp8_casts(model, par, moe_layer, tokens) if par.precision == "fp8" else {}
    out, mlp_share = {}, {}
    for way, ((ch, cq, ckv, cf, cd), kernels) in table.items():
        if table is EAGER.get(stack) and stack in EAGER_STACK_PACE:
            pace = EAGER_STACK_PACE[stack][("forward", "backward").index(way)]
            ch, cq, ckv, cf, cd = (c * pace for c in (ch, cq, ckv, cf, cd))
        mlp = cf * tokens * f_local if model.mlp == "swiglu" else GELU[way] * tokens * f_local
        mlp += permute[way] if permute else 0.0
        glu, glu_kernels = glu_extras(model, par, tokens, way) if moe_layer else (0.0, 0)
        mlp, kernels = mlp + glu, kernels + glu_kernels
        attn = tokens * (cq * model.q_dim + ckv * model.kv_dim) / t + cd * tokens * model.head_dim
        rope, rope_kernels = rope_extras(model, par, tokens, way)
        ring, ring_kernels = ring_extras(model, par, tokens, way)
        attn, kernels = attn + rope + ring, kernels + rope_kernels + ring_kernels
        nbytes = ch * t_sp * model.hidden + attn + mlp
        extra, extra_kernels = cast.get(way, (0.0, 0))
        auto, auto_kernels = autocast_extras(model, par, moe_layer, t_sp, way)
        extra, extra_kernels = extra + auto, extra_kernels + auto_kernels
        out[way] = (nbytes + extra, kernels + (permute_kernels[way] if permute else 0) + extra_kernels)
        mlp_share[way] = mlp / (nbytes + extra)
    out["mlp_share"] = (mlp_share["forward"], mlp_share["backward"])
    return out


# GEMMs whose input a Transformer Engine LayerNormLinear writes in FP8 as it normalises (dense q, k,
# v and the dense MLP's gate and up read the norm's output); every other GEMM input is cast alone
_NORM_FED = ("q", "k", "v", "gate", "up", "q_a", "kv_a")


def fp8_casts(model: ModelSpec, par: ParallelConfig, moe_layer: bool, tokens: float) -> dict:
    """{"forward"/"backward": (bytes, kernels)} of the quantization passes FP8 GEMMs need beyond
    the GEMMs themselves, for one layer, GEMM by GEMM (as the framework fuses them). A Hopper FP8
    GEMM takes both operands in FP8 with the reduction dimension contiguous, so the weight-gradient
    GEMM needs transposed copies too. The router stays in bf16.

    - Transformer Engine (megatron, nanotron, deepspeed): the norm-fed GEMMs' inputs come out of
      LayerNormLinear in FP8; every other input (the attention output, the activation, the
      experts' dispatched tokens) is cast and transposed (read 2, write 1 + 1 bytes per element);
      in backward each GEMM's output gradient is (cast_transpose, 4). Weights are cast once per
      step and reused by later micro-batches (not counted).
    - torchao float8 (fsdp2), by recipe (fp8.TORCHAO_CASTS): tensorwise dynamic scaling, eager:
      every Float8Linear finds its input's abs-max (read 2) and casts it (read 2, write 1), 5 bytes
      per element, q, k and v each for themselves; backward the same for each output gradient, and
      a transposed FP8 copy of each input and gradient for the weight gradient (read 1, write 1).
      Under torch.compile the abs-max and cast fuse into the producing kernel: 1 byte written per
      element, 2 for the transposed copy. The rowwise recipes cast each operand along both
      dimensions, the weights after their bf16 gathers, and rescale their slow-accumulation
      backward GEMMs' outputs (fp8.torchao_rescale_bytes); the experts' grouped GEMMs cast as
      torchao's rowwise (or MXFP8) grouped GEMM does (fp8.torchao_casts)."""
    t = par.tp
    fwd = bwd = 0.0
    kernels = 0
    seen_inputs = set()
    for mm in fused_matmuls(model.layer_matmuls(moe_layer), par.framework):
        if mm.name == "router":
            continue
        rows = tokens * (mm.used if mm.expert else 1)            # tokens through this GEMM
        shard = par.etp if mm.expert else t
        fan_in = mm.fan_in / (shard if mm.tp == "row" else 1)
        fan_out = mm.fan_out / (shard if mm.tp == "col" else 1)
        first = mm.name.split("+")[0]
        shared_input = (mm.fan_in, mm.expert, mm.used) in seen_inputs
        seen_inputs.add((mm.fan_in, mm.expert, mm.used))
        kernels += 1
        if par.framework == "fsdp2":
            per = torchao_casts(par, mm.expert)
            weights = mm.fan_in * mm.fan_out / (shard if mm.tp in ("col", "row") else 1) * \
                (mm.stored / par.ep if mm.expert else mm.stored)
            for i in (0, 1):
                add = rows * (per["x"][i] * fan_in + per["g"][i] * fan_out) + weights * per["w"][i]
                fwd, bwd = (fwd + add, bwd) if i == 0 else (fwd, bwd + add)
            if not mm.expert:            # the rescale of the input gradient (rows x fan_in) and weight gradient
                grad_in, grad_w = torchao_rescale_bytes(par)
                bwd += grad_in * rows * fan_in + grad_w * weights
        else:
            fed = first in _NORM_FED and not mm.expert and not first.startswith("shared_")
            fwd += 0.0 if fed or shared_input else rows * 4 * fan_in
            bwd += rows * 4 * fan_out
    return {"forward": (fwd, kernels), "backward": (bwd, 2 * kernels)}
