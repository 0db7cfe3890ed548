"""Which kernel a framework runs for the attention core, the cross-entropy, a GPU's local experts
and the element-wise ops, and what the loss's kernels move and keep. `parallel.attention`,
`parallel.loss`, `parallel.experts` and `parallel.elementwise` override the framework's choice;
the time and memory models ask here."""
from __future__ import annotations

import math

from .hardware import AMD, BLACKWELL


def attention_kernel(framework: str, gpu_name: str = "") -> str:
    """The attention kernel a framework runs by default on this GPU (calculators/time/attention.py):

    - megatron: cuDNN. Transformer Engine's DotProductAttention prefers its FusedAttention
      backend (cuDNN's flash-style kernels) over flash-attn on sm90 (NVTE_FUSED_ATTN defaults on);
    - fsdp2 (torchtitan): FlashAttention-2, the flash backend PyTorch's scaled_dot_product_attention
      picks first on CUDA (its vendored FA2 kernels); on Blackwell cuDNN, which torchtitan puts
      first in SDPA's backend list on devices of compute capability 10.0 and up (3b85aa31f,
      2025-05-14, "Use cudnn backend on B200");
    - nanotron: FlashAttention-2 (the flash-attn package's flash_attn_varlen_func);
    - deepspeed (Hugging Face modules, attn_implementation sdpa or flash_attention_2): FlashAttention-2.
    On AMD's MI300X every framework runs a FlashAttention-2 (ROCm's Composable Kernel port; there is
    no cuDNN), costed as FA2 with MI300X's own measured rate (time/profiles.py).
    `parallel.attention` overrides it (fa2, fa3, cudnn, or cudnn-2025: cuDNN's 2025 releases)."""
    if gpu_name in AMD:
        return "fa2"
    if framework == "megatron" or (framework == "fsdp2" and gpu_name in BLACKWELL):
        return "cudnn"
    return "fa2"


def layout_attention(par, gpu_name: str) -> str:
    """The attention kernel a layout runs on this GPU: `parallel.attention` where set, else its
    framework's default (attention_kernel)."""
    return par.attention or attention_kernel(par.framework, gpu_name)


def loss_kernel(par) -> str:
    """How a framework runs its cross-entropy over the logits (`parallel.loss` overrides it):

    - megatron: "fused", its vocabulary-parallel cross-entropy in one kernel each way
      (cross_entropy_loss_fusion, on in NVIDIA's recipes);
    - nanotron: "nanotron", its sharded_cross_entropy, unfused in fp32;
    - fsdp2 (torchtitan): "compiled" under torch.compile, else "eager". torchtitan compiles its
      loss function whenever training.compile is on since 2025-04-02 (commit bbb1b616e,
      torchtitan/components/loss.py build_cross_entropy_loss); runs before that compiled the
      model only (say loss="eager");
    - deepspeed: "eager", PyTorch's F.cross_entropy on an fp32 upcast of the logits;
    - "chunked" is asked for: Liger-Kernel's fused linear cross-entropy (loss_bytes_per_logit).
    """
    if par.loss:
        return par.loss
    if par.framework == "megatron":
        return "fused"
    if par.framework == "nanotron":
        return "nanotron"
    return "compiled" if par.framework == "fsdp2" and par.compile else "eager"


def loss_bytes_per_logit(kernel: str) -> tuple[tuple[float, int], tuple[float, int]]:
    """HBM bytes per logit, and kernels, of the loss's element-wise passes over the bf16 logits
    (kernel: loss_kernel's): ((forward bytes, kernels), (backward bytes, kernels)).

    - nanotron: its sharded_cross_entropy runs unfused in fp32. Forward: the cast to fp32 (read 2,
      write 4), the max (read 4), subtracting it (4 + 4), exp (4 + 4), the sum (4), dividing by it
      for the saved softmax (4 + 4): 38 bytes in 6 kernels. Backward: scaling the softmax by the
      loss's gradient (4 + 4) and the cast back to bf16 (4 + 2): 14 in 2. Counting 16 bytes
      instead put the one-node TP 1 runs, whose 131,072-entry vocabulary TP does not shard, 9% too
      fast (median); 2% with this count and the host time refitted to it.
    - compiled: Inductor fuses the upcast, the log-sum-exp and the gather into one reduction over
      the bf16 logits (read 2), and the backward into one pass that reads them again and writes
      the bf16 gradient (2 + 2).
    - bf16: eager F.cross_entropy on the bf16 logits themselves (NeMo Automodel's MaskedCrossEntropy
      with fp32_upcast false): the log-softmax reads and writes bf16 (2 + 2); backward the loss's
      gradient is written (2) and the log-softmax's backward reads it and its output and writes the
      logits' gradient (2 + 2 + 2).
    - eager (Hugging Face's loss function, torchtitan without compile): F.cross_entropy on an fp32
      upcast of the bf16 logits. PyTorch's trace counts 18 bytes forward (the upcast, 2 + 4; the
      log-softmax, 4 + 4; the NLL) and 26 backward in 3 kernels each way
      (tests/calculators/test_hf_loss.py); our H200 took the time the calculators' streaming rate
      moves 25 and 24 bytes a logit in (call 24, validation/data/h100_harness/hf_loss_h200.jsonl:
      forward, the upcast took 11 bytes' time against its 6, in a non-vectorized copy kernel, the
      softmax 14 against 8, and the NLL, which reads one logit a token, almost none of the 4 the
      trace counts for its whole input): taken from Llama 3.2 1B at 16,384 tokens (25.3, 24.0);
      held out, 4,096 tokens and Llama 3 8B at 8,192 within 4% and 8%. They had been 8 and 8, not
      counted.
    - fused (Megatron's cross_entropy_loss_fusion, on in NVIDIA's recipes): 8 and 8, about four
      fp32 passes, one kernel each way (not measured).
    - chunked (Liger-Kernel's fused linear cross-entropy, which ALST's tiled logits and loss and the
      Hugging Face trainers' use_liger_kernel run): a chunk of tokens at a time, its logits' GEMM, then
      one kernel that reads the chunk's bf16 logits twice (the online softmax, then the gradient) and
      writes the gradient in their place, 6 bytes; the two backward GEMMs run in the forward too, and
      the backward only scales what they left (nothing per logit; Liger skips it for a gradient of 1:
      src/liger_kernel/ops/fused_linear_cross_entropy.py). Not measured.
    """
    if kernel == "nanotron":
        return (38.0, 6), (14.0, 2)
    if kernel == "compiled":
        return (2.0, 1), (4.0, 1)
    if kernel == "bf16":
        return (4.0, 2), (8.0, 2)
    if kernel == "eager":
        return (25.0, 3), (24.0, 3)
    if kernel == "chunked":
        return (6.0, 1), (0.0, 0)
    return (8.0, 2), (8.0, 2)


def liger_chunk(tokens: float, vocab: int, hidden: int) -> int:
    """Tokens a chunk of Liger-Kernel's fused linear cross-entropy holds (loss "chunked"): its
    chunk_size, the tokens over ceil(V / h) rounded up to a power of two, at most all of them, so that
    a chunk's logits are about T x h (src/liger_kernel/ops/fused_linear_cross_entropy.py)."""
    chunks = max(1, math.ceil(vocab / hidden))
    return int(min(tokens, 2 ** math.ceil(math.log2(max(1.0, math.ceil(tokens / chunks))))))


def loss_activation_bytes(kernel: str) -> tuple[float, float]:
    """(bytes per logit kept from the loss's forward to its backward, bytes per logit transient
    beside them at the peak), for loss_kernel's kernels; checked against what PyTorch saves in
    tests/calculators/test_activations_torch.py:

    - eager: F.cross_entropy keeps its fp32 log-softmax (4); the bf16 logits and the fp32 upcast
      are transient (2 + 4);
    - compiled: Inductor's partitioner keeps the bf16 logits (2) and the per-token log-sum-exp
      and recomputes the softmax in backward, whose bf16 gradient is the transient (2);
    - bf16: F.cross_entropy without the upcast keeps its bf16 log-softmax (2), the bf16 logits
      beside it (2);
    - fused (Megatron's vocabulary-parallel loss): its fp32 softmax (4), the bf16 logits or their
      gradient beside it (2);
    - nanotron: the fp32 softmax (4); it casts the logits to fp32 in a pipeline block and makes a
      contiguous transposed copy before its loss: 2 + 4 + 4 transient;
    - chunked: no logit is kept, and only a chunk's are ever alive (activations.output_layer_activations
      counts what it keeps instead: the input's and the weight's gradients, made in the forward).
    """
    return {"compiled": (2.0, 2.0), "bf16": (2.0, 2.0), "fused": (4.0, 2.0), "chunked": (0.0, 0.0),
            "nanotron": (4.0, 10.0)}.get(kernel, (4.0, 6.0))


def expert_kernel(par) -> str:
    """How a framework runs one GPU's local experts (`parallel.experts` overrides it):

    - megatron: "loop". TEGroupedMLP's Transformer Engine GroupedLinear takes the tokens per expert
      as a Python list (`m_splits.tolist()`, a device-to-host sync) and loops over its experts in
      Python and C++: one GEMM launch per expert and, in FP8, each expert's weight and input
      quantized for itself (transformer_engine/pytorch/module/grouped_linear.py);
    - deepspeed (Hugging Face modules): "loop", the MoE block's Python loop over the experts a
      batch hit, found with a device-to-host read (transformers 4.57's Mixtral and Qwen3-MoE
      blocks: `.nonzero()`, then `for expert_idx in expert_hit`), one module call per expert;
    - fsdp2 (torchtitan): "fused", one grouped kernel over all local experts (torch._grouped_mm);
      nanotron: "fused" (no MoE run of it is modelled).
    Megatron's cuteDSL fused grouped MLP (cutedsl_fused_grouped_mlp) and TE's grouped-tensor path
    are "fused"."""
    if par.experts:
        return par.experts
    return "loop" if par.framework in ("megatron", "deepspeed") else "fused"


# torch._grouped_mm in bf16 on Blackwell against the calculators' dense GEMM time (compute.gemm_time):
# torchao's microbenchmark of the bf16 baseline of its MXFP8 grouped GEMM on a B200 (torch 2.10.0a0;
# torchao/prototype/moe_training/README.md at d6c6dba04, the "Autograd function" tables: 128,000
# tokens in 1, 2, 4 or 8 groups of random sizes, at Llama 4 Scout's 5120 x 8192 and DeepSeek-V3's
# 7168 x 2048) times the grouped GEMM's forward and backward with an MSE loss and the gradients'
# accumulation around it; counting those as memory-bound passes, the eight runs ran 0.66 to 0.87 of
# the dense rate (712 to 863 TFLOP/s of GEMM): the median, fitted on those kernel runs, not on any
# training run, and used beyond their shapes (Qwen3-30B-A3B's experts are 2048 x 768).
GROUPED_MM_BLACKWELL_BF16 = 0.75


def expert_gemm_share(par, gpu_name: str) -> float:
    """The share of the dense GEMM rate a GPU's local experts run at: GROUPED_MM_BLACKWELL_BF16 for
    torchtitan's grouped kernel (fsdp2's "fused" experts, torch._grouped_mm) in bf16 on Blackwell;
    1 elsewhere. On our H100 torch._grouped_mm took 0.74 to 1.09 of the predicted time (median
    0.90; validation/data/h100_harness/moe.jsonl): there the dense rate holds for it.
    FP8 grouped GEMMs (torchao's MXFP8) are not scaled: their quantization kernels are counted
    apart, and their kernels' rates moved with each release."""
    blackwell_grouped = par.framework == "fsdp2" and expert_kernel(par) == "fused" and gpu_name in BLACKWELL
    return GROUPED_MM_BLACKWELL_BF16 if blackwell_grouped and par.precision != "fp8" else 1.0


def elementwise_kernels(par) -> str:
    """Whether the norms, RoPE and the MLP's activation run "eager" (one PyTorch op per step of the
    math, each through HBM) or "fused" (one kernel each); calculators/time/elementwise.py counts the
    bytes of both. `parallel.elementwise` overrides the framework's:

    - megatron and nanotron: fused (Transformer Engine's norms and RoPE, fused bias-SwiGLU;
      nanotron's fused norm);
    - fsdp2 (torchtitan) and deepspeed (Hugging Face modules): eager, fused under torch.compile.
      "eager" is torchtitan's ops as PyTorch 2.7 and earlier ran them (nn.RMSNorm op by op, what
      the published eager runs used); on PyTorch 2.8 and later a GPU's nn.RMSNorm is one fused
      kernel each way: say elementwise="eager-fused-norm" (the benchmark harness does).
      A PyTorch-native stack built on Transformer Engine's modules, as NeMo Automodel's "TE"
      kernel optimizations are (RMSNorm, Linear and DotProductAttention), or on Liger's kernels,
      runs them fused without compiling: say elementwise="fused".
    It sets what the kernels move (time); the activation bytes follow `framework` and `compile` (and
    deepspeed's fused is Liger's modules, which keep less: memory/activations.liger), and so do
    torchao's FP8 casts (elementwise.fp8_casts: a Transformer Engine stack in FP8 is not modelled
    under fsdp2)."""
    if par.elementwise:
        return par.elementwise
    return "eager" if par.framework in ("fsdp2", "deepspeed") and not par.compile else "fused"


def eager_ops(par) -> bool:
    """Whether the layout runs its element-wise work op by op (either eager flavour)."""
    return elementwise_kernels(par) in ("eager", "eager-fused-norm")
