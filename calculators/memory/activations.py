"""Activation bytes one transformer layer keeps for backward, per micro-batch, on one GPU.

Counted tensor by tensor for a Llama-style block as autograd saves it (checked against PyTorch
itself: tests/calculators/test_activations_torch.py records every saved tensor with
FakeTensorMode and saved-tensor hooks). Conventions:
- bf16 activations (2 bytes); fp32 norm statistics and attention log-sum-exp; no dropout
  (modern LLM pre-training uses none). Under Transformer Engine's FP8 (Megatron) a linear keeps
  the FP8 copy of an input nothing else keeps (`gemm_input_bytes`, 1 byte); torchao's float8
  is counted in bf16 (its published runs measure alike in both).
- Tokens on one GPU per micro-batch: T = mbs * seq / cp. Tensors between the TP regions (norm
  inputs and outputs) hold T/tp tokens with sequence parallelism, T without. With SP the input of
  a column-parallel linear is saved sharded and all-gathered again in backward (Megatron, nanotron).
- flash attention stores q, k, v, the output and the log-sum-exp; without it the bf16 softmax
  probabilities (mbs * heads/tp * S^2) are stored too (fused scale-mask-softmax, as Megatron).
- recompute policies (calculators/specs/recompute.py): core_attn (Megatron's "selective") recomputes the
  attention core (QK^T, softmax, .V), so it frees the score matrix and nothing more once flash
  attention is on; op_sac (torchtitan's "selective") keeps the layer's input, every other
  matmul's output, the attention output and its log-sum-exp (`sac_bytes`); "full" keeps only each
  layer's input; layer:N recomputes every N-th layer in full. The layer being recomputed adds
  what it re-materialises (`recomputed_extra`, see memory.py).
- SwiGLU saves gate, up, silu(gate) and their product (4 x T*f/tp) in PyTorch's unfused form;
  Megatron's fused bias-SwiGLU saves 3 (the gate/up output and the product); under torch.compile
  (parallel.compile, fsdp2 and deepspeed) 3 (gate, up and the product, the down projection's
  input), each norm keeps its input and rstd, not its output, and the attention output is kept
  twice (the kernel's, and the output projection's input as a buffer of its own).
- fsdp2 at ZeRO 0/1 runs autocast over fp32 weights (`autocast_over_fp32`): bf16 weight casts,
  fp32 norm inputs and per-linear input casts are kept too.
- tiled MLP (parallel.tiled_mlp, DeepSpeed's TiledMLP): the dense MLP runs its forward without
  autograd in ceil(T / hidden) tiles along the sequence and keeps only its input (the norm's
  output, counted with the norm); backward runs each tile's forward again with autograd and its
  backward, into one T x h gradient of the input (memory/working.py).
- MoE (dropless, token choice, permute -> expert GEMMs -> weighted combine): fp32 router
  probabilities (T*E), int64 top-k indices, the K*T dispatched tokens, expert MLP intermediates
  for K*T tokens, and the K*T expert outputs kept for the weighted combine.
- MLA is approximated: attention with q/k head dim (nope + rope) and v head dim, plus the
  compressed latents c_q and c_kv (with their norms) saved.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

from ..specs.kernels import elementwise_kernels, liger_chunk, loss_activation_bytes, loss_kernel
from ..specs.models import ModelSpec
from ..specs.parallel import ParallelConfig, routed_tokens
from ..specs.recompute import (MODULES, modules, policy, recomputed_modules, recomputed_norms, sac_recomputes_attention,
                               sac_saved)

BF16 = 2
FP32 = 4


@dataclass(frozen=True)
class LayerActivations:
    """Bytes per micro-batch for one layer, by part."""
    attention: float
    scores: float                # s x s softmax probabilities (only without flash attention)
    mlp: float
    layer_input: float           # what full recompute keeps

    @property
    def total(self) -> float:
        return self.attention + self.scores + self.mlp


def tokens(par: ParallelConfig) -> float:
    """T: tokens of one micro-batch on one GPU (context parallel splits the sequence)."""
    return par.mbs * par.seq / par.cp


def gemm_input_bytes(par: ParallelConfig) -> int:
    """Bytes per element a linear keeps of its input for the weight gradient, where no other op
    keeps that input: under Transformer Engine's FP8 (Megatron, precision fp8) the FP8 copy it cast
    for the GEMM, column-wise data only (transformer_engine/pytorch/module/linear.py,
    layernorm_linear.py: update_usage(rowwise_usage=False); its maintainers expect half of
    PyTorch's bytes for these inputs, NVIDIA/TransformerEngine issue 1764), 1 byte; the per-block
    scales of the MXFP8 and blockwise recipes add 1/32 byte (not counted). Else bf16, 2. torchao's
    float8 (torchtitan) is counted in bf16: its published runs (op-level SAC, and MXFP8 without
    recompute) measure the same peak in FP8 as in bf16; a tensorwise run whose compiled backward
    keeps the FP8 casts can save more (pytorch/ao issue 4101 reports 30%, its settings unstated).
    Where another op keeps the input in bf16 (the attention output, which the fused attention
    keeps; a MoE layer's norm output, which the router keeps), Megatron-Core has the
    linear keep that tensor instead of a copy (set_save_original_input, since 2025-08 with
    Transformer Engine 2.6 and a current-scaling, MX or blockwise recipe); delayed scaling and
    earlier releases keep a 1-byte copy beside it (not counted)."""
    return 1 if par.framework == "megatron" and par.precision == "fp8" else BF16


def _norm_kept(par: ParallelConfig) -> int:
    """Bytes per element an RMSNorm keeps for backward besides its fp32 rstd, counting the output
    the linear after it saves:
    - Megatron/TE: the norm fused into the linear after it (TELayerNormColumnParallelLinear) keeps
      its bf16 input and the GEMM's input (`gemm_input_bytes`), 4 in bf16 and 3 in FP8;
    - fused (nanotron, and torchtitan's nn.RMSNorm on CUDA, where PyTorch runs its
      fused kernel, FusedRmsNormBackward0): its bf16 input and output, 4. Measured on an H100
      with PyTorch 2.11 (validation/data/h100_harness/saved_bytes_*.json); on a CPU nn.RMSNorm is
      still composite and keeps 10 (the fp32 upcast, the fp32 normalised value, the bf16 output);
    - eager Hugging Face (LlamaRMSNorm, its own Python): the fp32 upcast, the bf16 normalised value
      and the weighted bf16 output, 8; with Liger's kernels (`liger`) its LigerRMSNorm keeps its bf16
      input (and rstd), the linear after it the output, 4;
    - under torch.compile: the input only (the output is recomputed), 2."""
    if _compiled(par):
        return BF16
    if par.framework == "megatron":
        return BF16 + gemm_input_bytes(par)
    return FP32 + 2 * BF16 if par.framework == "deepspeed" and not liger(par) else 2 * BF16


def liger(par: ParallelConfig) -> bool:
    """Whether a deepspeed layout's Hugging Face model runs Liger-Kernel's modules (elementwise fused:
    AutoLigerKernelForCausalLM, ArcticTraining's model type liger): LigerRMSNorm and LigerSiLUMulFunction
    keep what their save_for_backward names (liger_kernel/ops/rms_norm.py, swiglu.py: the norm's input
    and rstd, SwiGLU's gate and up), its RoPE rotates q and k in place."""
    return par.framework == "deepspeed" and not par.compile and elementwise_kernels(par) == "fused"


def _separate_norm_kept(par: ParallelConfig) -> int:
    """What a Megatron norm that is a module of its own keeps (a MoE layer's pre-MLP norm, MLA's
    input norm): its bf16 input and its bf16 output, which the router keeps, or the two FP8 copies
    MLA's down projections cast, 4 either way. Other frameworks: `_norm_kept`."""
    return 2 * BF16 if par.framework == "megatron" else _norm_kept(par)


def autocast_over_fp32(par: ParallelConfig) -> bool:
    """torchtitan without FSDP (fsdp2 at ZeRO 0/1: DDP, or one GPU) trains fp32 weights under
    torch.autocast. Autocast casts each weight to bf16 in every forward and autograd keeps the cast
    until the backward (2 bytes per parameter per micro-batch in flight); the residual stream is
    fp32 (the embedding's output), so each norm keeps an fp32 input, and eagerly each linear casts
    its fp32 input to bf16 on its own and keeps that copy (q, k and v: three). Under torch.compile
    Inductor fuses the casts and keeps what a bf16 model keeps, plus the weight casts. Measured
    tensor by tensor on an H100 (validation/data/h100_harness/saved_bytes_*.json). With tp, pp or cp
    this is our harness's layout (benchmarks/train.py autocasts at ZeRO 0 whatever the other
    degrees), not torchtitan's: it autocast only under DDP or on one GPU (with TP, PP or CP it trained
    without mixed precision) and since 2026-06 applies fully_shard always, also over one rank, mixed
    precision by FSDP's policy (its llama3 parallelize.py, commit d92336fee)."""
    return par.framework == "fsdp2" and par.zero <= 1


def _weight_casts(model: ModelSpec, par: ParallelConfig, moe_layer: bool) -> tuple[float, float]:
    """(attention's, the MLP's) bf16 weight copies autocast keeps for one micro-batch of one layer."""
    att = mlp = 0.0
    for mm in model.layer_matmuls(moe_layer):
        n = mm.fan_in * mm.fan_out * mm.stored
        n /= par.ep * par.etp if mm.expert else par.tp if mm.tp in ("col", "row") else 1
        if mm.name in ATTENTION_MATMULS:
            att += BF16 * n
        else:
            mlp += BF16 * n
    return att, mlp


ATTENTION_MATMULS = ("q", "k", "v", "o", "q_a", "q_b", "kv_a", "kv_b")


def _compiled(par: ParallelConfig) -> bool:
    """torch.compile's min-cut partitioner recomputes cheap pointwise work in backward rather than
    save it (torch._functorch.partitioners; reductions such as the norm's rstd stay saved): the
    norm's output from its input and rstd, silu(gate) and its product with up from gate and up."""
    return par.compile and par.framework in ("fsdp2", "deepspeed")


def _ffn_bytes(model: ModelSpec, par: ParallelConfig) -> int:
    """Bytes an MLP keeps per element of its T x ffn intermediates: SwiGLU keeps gate, up,
    silu(gate) and the product eagerly; Megatron's fused bias-SwiGLU and torch.compile drop
    silu(gate); GELU its input and output. The last of them (the product, GELU's output) is the
    down projection's input, kept at `gemm_input_bytes`; the others in bf16."""
    tensors = 2 if model.mlp != "swiglu" else 3 if _compiled(par) or par.framework == "megatron" or liger(par) else 4
    return BF16 * (tensors - 1) + gemm_input_bytes(par)


def _ffn_inputs(model: ModelSpec) -> int:
    """T x ffn tensors an MLP's activation reads (SwiGLU gate and up, GELU its input)."""
    return 2 if model.mlp == "swiglu" else 1


def _unfused_core(model: ModelSpec, par: ParallelConfig) -> tuple[float, float]:
    """(the bf16 s x s softmax probabilities, k and v repeated to all heads for the batched
    matmuls) that attention without a flash kernel keeps."""
    t = par.tp
    scores = BF16 * par.mbs * (model.heads / t) * (par.seq / par.cp) ** 2
    return scores, (BF16 * tokens(par) * 2 * (model.q_dim - model.kv_dim) / t if not model.mla else 0.0)


def _mlp_parts(model: ModelSpec, par: ParallelConfig, moe_layer: bool) -> dict:
    """What the MLP (or the MoE block) keeps beyond its input, by part: a dense layer's MLP; an
    MoE layer's router (fp32 probabilities, int64 top-k indices), dispatch (the K x T dispatched
    inputs, which the experts' first GEMM keeps, and the outputs kept for the combine), routed
    experts and shared experts."""
    t, T = par.tp, tokens(par)
    ffn_bytes = _ffn_bytes(model, par)
    if not moe_layer:
        return {"mlp": 0.0 if par.tiled_mlp else ffn_bytes * T * model.ffn / t}
    e = model.moe
    Tr = T / t if par.sp else T                       # tokens routed by this GPU
    # the tokens its experts run on: gathered over the expert-TP group (parallel.routed_tokens)
    routed = e.top_k * routed_tokens(par, T)
    return {"router": FP32 * Tr * e.experts + 8 * Tr * e.top_k,
            "dispatch": (gemm_input_bytes(par) + BF16) * routed * model.hidden,
            "experts": ffn_bytes * routed * e.expert_ffn / par.etp,
            "shared_experts": ffn_bytes * T * e.shared_experts * (e.shared_ffn or e.expert_ffn) / t}


def layer_activations(model: ModelSpec, par: ParallelConfig, moe_layer: bool) -> LayerActivations:
    t = par.tp
    T = tokens(par)
    T_sp = T / t if par.sp else T                      # tokens in the norm regions
    h = model.hidden
    compiled = _compiled(par)
    norm_region = T_sp * (_norm_kept(par) * h + FP32)    # per norm: what it keeps, its rstd
    separate = T_sp * (_separate_norm_kept(par) * h + FP32)
    autocast = autocast_over_fp32(par)
    att_norm = separate if model.mla else norm_region
    mlp_norm = separate if moe_layer else norm_region
    if autocast and not compiled:       # an fp32 input, and one bf16 copy of the output per linear reading it
        att_norm = T_sp * (FP32 * h + FP32) + BF16 * T * h * (1 if model.mla else 3)
        if not moe_layer:
            mlp_norm = T_sp * (FP32 * h + FP32) + BF16 * T * h * (2 if model.mlp == "swiglu" else 1)
        else:                           # an MoE layer's dispatch under autocast was not measured: the
            mlp_norm = T_sp * ((2 * FP32 + BF16) * h + FP32)    # composite count this layout had before
    qkv_width = model.q_dim + (model.q_dim if model.mla else 2 * model.kv_dim)
    v_width = model.attn_out_dim if model.mla else 0      # MLA: v has its own head dim
    attention = (att_norm
                 + BF16 * T * (qkv_width + v_width) / t   # q, k, v after RoPE (flash inputs)
                 # attention output = o_proj input (compiled: o_proj's input is a buffer of its own)
                 + BF16 * T * model.attn_out_dim / t * (2 if compiled else 1)
                 + (FP32 * T * model.heads / t if par.flash else 0.0))  # log-sum-exp per head
    if model.mla:
        x = model.mla
        # each latent and its norm's output (fused into the up projection: the GEMM's input)
        attention += (BF16 + gemm_input_bytes(par)) * T_sp * (x.q_lora_rank + x.kv_lora_rank)
        attention += BF16 * T_sp * x.qk_rope_dim
    scores = 0.0
    if not par.flash and _keeps_scores(par):
        scores, repeated_kv = _unfused_core(model, par)
        attention += repeated_kv
    mlp = mlp_norm                                    # norm output = input of the MLP / router
    for part in _mlp_parts(model, par, moe_layer).values():
        mlp += part
    layer_input = (FP32 if autocast else BF16) * T_sp * h
    if autocast:
        casts = _weight_casts(model, par, moe_layer)
        attention, mlp = attention + casts[0], mlp + casts[1]
    return LayerActivations(attention=attention, scores=scores, mlp=mlp, layer_input=layer_input)


def _keeps_scores(par: ParallelConfig) -> bool:
    """Whether the layer keeps its attention scores (unfused attention): not when any recompute
    reruns the attention core (every policy but none, and module lists without core_attn)."""
    kind, every = policy(par.framework, par.recompute)
    if kind == "modules":
        return "core_attn" not in modules(par.recompute)
    return (kind, every) == ("none", 1)


def module_freed(model: ModelSpec, par: ParallelConfig, moe_layer: bool) -> dict:
    """Bytes per micro-batch that each of Megatron's recompute modules (recompute.MODULES) frees
    in one layer, from the counts of layer_activations; a module the layer lacks frees 0:
    - core_attn: the s x s scores (only without flash attention);
    - layernorm: what the norms it reruns keep (recompute.recomputed_norms: under Megatron a MoE
      layer's pre-MLP norm and MLA's input norm; `_norm_kept`: their outputs, which the linears
      after them read, and eager norms' fp32 copies) and their rstd, less their bf16 input, which
      the recompute keeps (a compiled norm keeps only its input: it frees the rstd). Under FP8 the
      linears reading a recomputed norm keep its bf16 output instead of casting copies
      (Megatron's set_for_recompute_input_layernorm / set_for_recompute_pre_mlp_layernorm), so the
      whole output is freed;
    - moe_act: the routed experts' activation output, fc2's input (SwiGLU keeps its gate and up;
      under FP8 fc2 keeps the bf16 output it discards instead of its FP8 copy, the same bytes);
    - mla_up_proj: MLA's q, k and v after the up projections and RoPE;
    - mlp (dense layers): the MLP's intermediates; moe (MoE layers): everything the MoE block keeps
      but its input (router, dispatched tokens, experts, shared experts); shared_experts: the
      shared experts' intermediates."""
    t = par.tp
    T = tokens(par)
    T_sp = T / t if par.sp else T
    out = dict.fromkeys(MODULES, 0.0)
    if not par.flash:
        out["core_attn"] = sum(_unfused_core(model, par))
    # each norm keeps _norm_kept bytes per element and its rstd; recomputed, it keeps its bf16 input
    norms = recomputed_norms(par.framework, model.mla is not None, moe_layer)
    out["layernorm"] = norms * T_sp * ((_separate_norm_kept(par) - BF16) * model.hidden + FP32)
    if model.mla:
        out["mla_up_proj"] = BF16 * T * (2 * model.q_dim + model.attn_out_dim) / t
    parts = _mlp_parts(model, par, moe_layer)
    if not moe_layer:
        out["mlp"] = parts["mlp"]
        return out
    ffn_bytes = _ffn_bytes(model, par)
    out["moe_act"] = parts["experts"] * (ffn_bytes - BF16 * _ffn_inputs(model)) / ffn_bytes
    out["shared_experts"] = parts["shared_experts"]
    out["moe"] = sum(parts.values())
    return out


@lru_cache(maxsize=4096)
def modules_kept(model: ModelSpec, par: ParallelConfig, moe_layer: bool) -> tuple[float, float]:
    """(bytes the layer keeps, the most one recomputed module re-materialises in backward) under a
    module list: everything but what its modules free (moe covers moe_act and shared_experts).
    layer_activations already leaves out the scores when the list has core_attn."""
    mods = recomputed_modules(par.recompute)
    freed = module_freed(model, par, moe_layer)
    kept = layer_activations(model, par, moe_layer).total - sum(freed[m] for m in mods - {"core_attn"})
    return kept, max((freed[m] for m in mods), default=0.0)


def sac_bytes(model: ModelSpec, par: ParallelConfig, moe_layer: bool) -> float:
    """What op_sac keeps of one layer per micro-batch: the checkpoint's input, the outputs of the
    matmuls it saves (recompute.sac_saved: a column-parallel one's T x fan_out/tp shard, a
    row-parallel one's T x h before its reduction), with sequence parallelism the reduce-scatters'
    outputs (saved collectives), the attention output and log-sum-exp, and in MoE layers the top-k
    routing and, with expert parallelism, the all-to-alls' outputs. op_sac+core_attn keeps no
    attention output: its kernel is not in the save list."""
    t = par.tp
    T = tokens(par)
    T_sp = T / t if par.sp else T
    layer_input = (FP32 if autocast_over_fp32(par) else BF16) * T_sp * model.hidden    # fp32 under autocast
    kept = layer_input
    if not sac_recomputes_attention(par.recompute):
        kept += BF16 * T * model.attn_out_dim / t + FP32 * T * model.heads / t
    mms = model.layer_matmuls(moe_layer)
    for mm, saved in zip(mms, sac_saved(mms)):
        if saved:
            kept += BF16 * T * mm.used * (mm.fan_out / t if mm.tp == "col" else mm.fan_out)
        if mm.tp == "row" and t > 1 and par.sp:
            kept += BF16 * T_sp * model.hidden
    if moe_layer and model.moe:
        k = model.moe.top_k
        kept += T_sp * k * (FP32 + 8)
        if par.ep > 1:
            kept += 2 * BF16 * T_sp * k * model.hidden
    return kept


def _kept(model: ModelSpec, par: ParallelConfig, moe_layer: bool, kind: str) -> float:
    if kind == "modules":
        return modules_kept(model, par, moe_layer)[0]
    act = layer_activations(model, par, moe_layer)
    return {"full": act.layer_input, "op_sac": sac_bytes(model, par, moe_layer)}.get(kind, act.total)


def saved_per_layer(model: ModelSpec, par: ParallelConfig, moe_layer: bool) -> float:
    """Bytes one layer keeps per in-flight micro-batch under the layout's recompute policy (with
    layer:N, the mean over N layers: one recomputed in full, N - 1 keeping everything); what of it
    stays on the GPU under fine-grained offloading: offload.kept_on_gpu."""
    kind, every = policy(par.framework, par.recompute)
    if every == 1:
        return _kept(model, par, moe_layer, kind)
    everything = layer_activations(model, replace(par, recompute="none", recompute_ranks=()), moe_layer).total
    return everything + (_kept(model, par, moe_layer, kind) - everything) / every


def recomputed_extra(model: ModelSpec, par: ParallelConfig, moe_layer: bool) -> float:
    """Bytes a recomputed layer re-materialises while its backward runs, beyond what it kept: the
    working set that recompute adds on top of one layer's gradients (0 without recompute)."""
    kind, _ = policy(par.framework, par.recompute)
    if kind in ("none", "core_attn"):
        return 0.0
    if kind == "modules":
        return modules_kept(model, par, moe_layer)[1]
    return layer_activations(model, par, moe_layer).total - _kept(model, par, moe_layer, kind)


def output_layer_activations(model: ModelSpec, par: ParallelConfig) -> tuple[float, float]:
    """Last stage, per micro-batch: (bytes kept until backward, transient bytes at the peak).

    Kept: the final norm's input, rstd and output, and what the loss keeps of the T x V/tp logit
    shard; transient: what sits beside it at the peak. Per logit by the loss's kernel
    (kernels.loss_kernel, loss_activation_bytes): eager PyTorch 4 kept + 6 transient, compiled
    2 + 2, Megatron's fused loss 4 + 2, nanotron's 4 + 10.
    """
    T = tokens(par)
    T_sp = T / par.tp if par.sp else T
    logits = T * model.vocab / par.tp
    kept_per_logit, transient = loss_activation_bytes(loss_kernel(par))
    kept = BF16 * 2 * T_sp * model.hidden + FP32 * T_sp + kept_per_logit * logits
    if loss_kernel(par) == "chunked":
        # Liger's fused linear cross-entropy (one rank holds the whole vocabulary: tp 1) makes the input's
        # and the weight's gradients in the forward and keeps them, in the input's and the weight's dtype
        # (fp32 under autocast over fp32 weights), and not the norm's output, which only its forward
        # read; beside them a chunk's bf16 logits (kernels.liger_chunk) and an fp32 loss a token
        grad = FP32 if autocast_over_fp32(par) else BF16
        kept += grad * (T * model.hidden + model.vocab * model.hidden) - BF16 * T_sp * model.hidden
        return kept, BF16 * liger_chunk(T, model.vocab, model.hidden) * model.vocab + FP32 * T
    return kept, transient * logits
