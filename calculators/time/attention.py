"""Attention kernels' time, forward and backward, by kernel family, sequence length, head dim and
causal masking, from kernel measurements: published ones, and our own on one H100.

Sources. FlashAttention-2 and FlashAttention-3: the FlashAttention-3 paper (Shah et al. 2024, arXiv
2407.08608, Figures 5 and 6), BF16 TFLOP/s on one H100 80GB SXM5, head dim 128, batch x sequence =
16k tokens. cuDNN: our own measurement of cuDNN 9.19's fused attention through PyTorch 2.11's
`scaled_dot_product_attention` on one H100 80GB SXM5 in the same setup
(validation/data/h100_harness/attention.jsonl, `python -m benchmarks attention`), which runs 13 to
15% faster (median) than the 2024 cuDNN the paper measured; cuDNN is what Transformer Engine runs
on Hopper, and the releases whose runs we compare with are recent. The same measurement checks the
paper's FlashAttention-2 rows: PyTorch's flash backend runs at 0.97 of them forward and 0.96
backward (median), and holds its 16k rate to 128k tokens. Causal FLOPs count half the square (our
convention, flops.py).

| seq | 512 | 1k | 2k | 4k | 8k | 16k | 32k |
|---|---|---|---|---|---|---|---|
| FA2 forward, causal | 191 | 260 | 298 | 319 | 333 | 335 | |
| FA2 forward | 309 | 350 | 362 | 368 | 370 | 370 | |
| FA2 backward | 214 | 260 | 291 | 310 | 318 | 322 | |
| cuDNN forward, causal (ours) | 212 | 443 | 517 | 573 | 607 | 629 | 590 |
| cuDNN forward (ours) | 533 | 608 | 653 | 670 | 678 | 681 | |
| cuDNN backward (ours) | 297 | 417 | 502 | 551 | 579 | 517 | |
| cuDNN backward, causal (ours) | 195 | 290 | 392 | 471 | 523 | 525 | 527 |
| FA3 forward, causal | 292 | 423 | 521 | 579 | 602 | 616 | |
| FA3 forward | 467 | 565 | 625 | 638 | 646 | 648 | |
| FA3 backward | 316 | 424 | 501 | 542 | 559 | 561 | |

The paper plots backward without the causal mask only; for FA2 and FA3 a causal backward is taken
to lose what a causal forward loses at the same length (the backward times the causal/non-causal
forward ratio). Our cuDNN rows measure the causal backward itself (at 16k it loses nothing, where
the rule would take 8% off). Head dim 64 and 256 scale each kernel by its non-causal forward at
16k over head dim 128's (FA2 0.88 and 0.88, FA3 0.77 and 1.17, the paper's figures; cuDNN's 256,
0.98, the paper's), interpolated in log2 of the head dim. cuDNN at head dim 64 is ours, forward
and backward apart: the median over our 13 pairs of H100 rows at 1k to 64k tokens, causal and not,
0.757 forward and 0.812 backward (a single non-causal forward at 16k, 0.717, had been taken for
both; our H200 rows give 0.73 to 0.76 and 0.78 to 0.83). FA2 keeps the paper's 0.876 both ways:
our flash rows' own ratio is 0.87 to 0.89 forward and 0.92 to 0.93 backward (medians over the
pairs with and without GQA), but their head dim 128 backward runs 0.96 of the paper's, and the
product is what they measure at head dim 64 (median 0.997 forward, 0.995 backward of the
calculators' rates). Lengths are clamped to each
row's measured range; log-linear in between. Our causal cuDNN rows go on to 32k (590 forward, 527
backward), and fall further by 128k (546, 524); FA2 holds its 16k rate to 128k. With context
parallelism the kernels run chunk by chunk: the load-balanced ring splits each sequence into
2 cp chunks and computes attention between chunks (Megatron/Transformer Engine's
AttnFuncWithCPAndKVP2P, torch's context_parallel), so a kernel's length is seq / (2 cp), and only
the step where a rank attends to its own chunks is masked: 1/cp of the work runs at the causal
rate, the rest at the unmasked one. (NeMo's long-sequence table, Llama 2 7B in FP8 from 32k to 1M
tokens with CP 2 to 32, measured 536 to 610 model TFLOP/s per GPU: at the unmasked rate, which
the causal one would put 20 to 30% lower.)

Other GPUs: the profile's `attention_fraction` is the fraction of the bf16 peak FA2 reaches at
its plateau (causal, head dim 128, forward + backward); the table gives every kernel's rate
relative to that (H100: 303 TFLOP/s, 0.306 of 989). FlashAttention-3 runs on Hopper only; on
other GPUs a framework asking for it gets FA2's cost.

Blackwell (B200, GB200, GB300) is not Hopper scaled by its peak: its tensor cores doubled, the units
softmax needs did not, so each kernel family moves on its own.
- cuDNN: cudnn-frontend's published SDPA training benchmark on a GB200 with cuDNN 9.22
  (NVIDIA/cudnn-frontend, benchmark/sdpa_benchmark_training/results/llama3.1/gb200, 2026-04;
  Llama 3.1 shape: batch 2, 64 query and 8 kv heads, head dim 128, causal counted as half the
  square), 2k to 16k tokens (GB200_CUDNN); below 2k it keeps Hopper cuDNN's shape. The same
  benchmark on an H200 with cuDNN 9.19 (results/h200_919_only_cudnn) lands within 10% of our H100
  rows, causal, at 2k to 16k (tests/calculators/test_attention.py), so the two measure alike
  (ours dips at 16k unmasked backward: 517 TFLOP/s against its 612). Other Blackwell GPUs scale
  it by their bf16 peak: PyTorch's FA2 kernel ran 0.89 to 0.90 as fast on a B200 as on a GB200
  in that repository's earlier runs (benchmark/sdpa_benchmark_training/artifacts, 2025-10 and
  2025-12), the ratio of their peaks. cuDNN's 2025 releases were slower (below). All these rows
  time short bursts (the 2025 benchmark slept ten times a kernel's time after each launch;
  today's times 10 launches), where the GEMM rates are sustained
  at the power cap; whether cuDNN attention under a step's sustained load falls as a GEMM does
  (0.875 of its burst on our H100) is not assumed: the GPU sessions' `sustained` stage measures it
  (benchmarks/sessions/sustained.py).
- FlashAttention-2 (PyTorch's flash backend, the flash-attn package): 1.14 times its H100 rate,
  not 2.5 times: Azure's AI benchmarking guide ran flash-attn's own benchmark (head dim 128,
  batch 2, 8k, forward + backward) at 373.9 TFLOP/s on a GB200 and 327.9 on an H100 (our H100
  table: 331 there). The B200 and GB200 profiles' attention_fraction carries it.
- cuDNN's 2025 releases on Blackwell (kernel "cudnn-2025": 9.9 to 9.13; 9.14 to 9.16 were not
  measured, 9.17 runs as today's table forward) are their own tables, cudnn-frontend's causal rows
  through PyTorch's SDPA (pyt_cudnn; Llama 3.1 405B's shape, 128 query and 8 kv heads, head dim 128,
  batch 1): a B200's with cuDNN 9.10.2 (benchmark/sdpa_benchmark_training/artifacts at 9793df5,
  2025-07), which 9.13.1 repeats within 3% at 2k to 32k (0b1577c, 2025-10), for every Blackwell GPU
  but the GB300, which has its own 9.13.1 rows there. Scaled by the peaks, the B200's run 0.49 and
  0.46 (forward, backward) of today's table at 2k and below, 0.69 and 0.67 at 4k, 0.85 and 0.78 at
  8k, 0.88 and 0.90 at 16k, 0.98 and 1.02 at 32k (the GB300's, of its own: 0.43 and 0.50 at 2k to
  0.92 and 0.89 at 32k). The GB200's cuDNN 9.17 rows of that benchmark (d48a60e, 2025-12, called
  directly) stand between: forward within 4% of today's, backward 26% slower at 2k, 8 to 9% at 4k
  to 8k, alike at 16k. The path differs: cudnn-frontend's own example (README at 9793df5) ran one
  9.10.2 kernel at 32k alike forward through PyTorch and directly, backward 7% faster directly (the
  path of today's table and of Transformer Engine), so for Megatron's stacks part of the backward's
  gap may be path, not release; one point, not applied. Only the causal kernel was timed in 2025:
  the unmasked rows take today's unmasked-to-causal ratio at each length, and below 2k (where a
  batch of 1 measures launches) Hopper cuDNN's fall-off, as today's. On Hopper one table serves
  every release: the H200 rows of cudnn-frontend's Llama 3.2 1B training benchmark (cuDNN 9.9.0)
  sit as close to our predictions with cuDNN as with FlashAttention-2 (validation/stacks.py).
- GB300 (Blackwell Ultra, twice the exponential rate): its own cuDNN 9.22 rows from the same
  benchmark (results/llama3.1/gb300: 1.18 times GB200's forward at 8k, 1.08 backward), and
  FlashAttention-2 at 399.7 TFLOP/s in Azure's guide (1.22 times H100's).

Windowed layers (a sliding window of W keys shorter than the sequence: Mistral, Gemma, gpt-oss). A
flash kernel runs each tile of 128 queries against the W/128 + 1 key tiles its band crosses (the two
at its ends partly masked), and each query tile pays a fixed cost (loading its queries, the
softmax's last rescaling, writing its output and log-sum-exp; backward, its dQ) worth k key tiles.
Over the pairs it attends to (W per query, flops.py), its rate is the kernel's causal plateau (the
best rate along its causal row: long full tiles) times (W/128) / (k + W/128 + 1). k is fitted on our
own H200 measurement of cuDNN 9.19 through cudnn-frontend, Transformer Engine's path
(benchmarks/sessions/window_attention.py, validation/data/h100_harness/window_attention_h200.jsonl):
windows of 128 to 4,096 at 4k, 8k and 32k tokens, head dim 64 (64 query and 8 kv heads, gpt-oss's)
and 128, each over the same path's causal rate at 32k, its best: 1.58 forward (rms 6%, worst 13%;
head dim 128 runs up to 13% under the form at windows of 512 and more, 64 up to 4% over), 2.84
backward (rms 1.7%, worst 5%). So at gpt-oss's 128 tokens cuDNN runs at 0.28 of its causal rate
forward and 0.21 backward: those layers take 3.6 and 4.8 times what their FLOPs would at the causal
rate. Checked on a kernel it was not fitted on: PyTorch's FlexAttention (torchtitan's windowed
attention) on the same GPU, over its own causal rate at 32k, runs 2 to 14% under the form forward
and within 2% of it backward at windows 128 and 1,024 (window_attention_flex_h200.jsonl).
FlashAttention-2 and -3 take cuDNN's Hopper k on every GPU (not measured). cuDNN on Blackwell: k
from cudnn-frontend's gpt-oss benchmark on a GB200 with cuDNN 9.22 (results/gpt_oss/gb200, window
128, head dim 64, median of 4k to 16k, non-deterministic backward as Transformer Engine allows by
default), over the GB200 table's causal plateau at head dim 64: 5.84 forward, 3.78 backward, the
forward's fixed cost nearly four times Hopper's in key tiles and the backward's 1.3 times (the
tensor cores doubled, the per-tile softmax and memory work did not). On a GB300
(results/gpt_oss/gb300) they come out 10% too fast forward and 7% backward. Only W = 128 is measured
on Blackwell: how the rate grows with W is the tile count's. Other GPUs take Hopper's k. Chunked
layers (Llama 4) are causal attention over sequences of the chunk's length: the causal rate at that
length.

Attention sinks (gpt-oss: a learned logit per head joins each softmax's denominator; Transformer
Engine runs them on its cuDNN backend only, softmax_type "learnable"). On our H200, cuDNN 9.19's
forward takes the same time with them, and its backward 1.72 ns more per query token per head (1.56
to 1.91 over windows of 128 and causal, head dims 64 and 128, 4k to 32k tokens, each against the
same case without sinks in the same call: validation/data/h100_harness/window_attention_sink_h200.jsonl),
whatever the window or head dim: a cost per query row and head, not per FLOP, as the sink's gradient
is a sum over every query row of its head. At gpt-oss's shapes that nearly triples the windowed
layers' backward (1.97 to 5.62 ms for 32k tokens) and adds 44% to a full layer's at 4k. Costed for
cuDNN on every GPU (measured on Hopper only); other kernels' sinks (torchtitan's FlexAttention) are
not costed.
"""
from __future__ import annotations

import math

from .flops import attention_flops_by_layer
from ..specs.hardware import BLACKWELL, GPU_PRESETS, HOPPER, GPUSpec
from ..specs.models import ModelSpec
from ..specs.parallel import ParallelConfig
from .profiles import BLACKWELL_FA2_FRACTION as GB200_FA2_FRACTION, GB300_FA2_FRACTION, HardwareProfile

SEQS = (512, 1024, 2048, 4096, 8192, 16384, 32768)   # a row may stop at 16k: longer is held at its last
H100_TFLOPS = {
    "fa2": {"causal": (191, 260, 298, 319, 333, 335), "full": (309, 350, 362, 368, 370, 370),
            "backward": (214, 260, 291, 310, 318, 322)},
    "cudnn": {"causal": (212, 443, 517, 573, 607, 629, 590), "full": (533, 608, 653, 670, 678, 681),
              "backward": (297, 417, 502, 551, 579, 517), "backward_causal": (195, 290, 392, 471, 523, 525, 527)},
    "fa3": {"causal": (292, 423, 521, 579, 602, 616), "full": (467, 565, 625, 638, 646, 648),
            "backward": (316, 424, 501, 542, 559, 561)},
}
HEAD_DIM_SCALE = {"fa2": (0.876, 1.0, 0.881), "cudnn": (0.757, 1.0, 0.976), "fa3": (0.767, 1.0, 1.167)}   # 64, 128, 256
BACKWARD_HEAD_DIM_SCALE = {"cudnn": (0.812, 1.0, 0.976)}       # where the backward's differs from the forward's


def _from_2k(measured: dict) -> dict:
    """A table measured from 2k to 32k, completed at 512 and 1k by Hopper cuDNN's fall-off below 2k."""
    return {row: tuple(v[0] * H100_TFLOPS["cudnn"][row][i] / H100_TFLOPS["cudnn"][row][2] for i in (0, 1)) + v
            for row, v in measured.items()}


# cuDNN 9.22 on Blackwell at SEQS, TFLOP/s (cudnn-frontend, results/llama3.1/{gb200,gb300})
GB200_CUDNN = _from_2k({"causal": (1097, 1408, 1574, 1708, 1622), "full": (1433, 1599, 1771, 1697, 1634),
                        "backward": (1124, 1350, 1404, 1374, 1262),
                        "backward_causal": (885, 1148, 1332, 1328, 1226)})
GB300_CUDNN = _from_2k({"causal": (1373, 1703, 1856, 1915, 1953), "full": (1805, 1900, 2017, 2014, 1836),
                        "backward": (1213, 1429, 1531, 1536, 1427),
                        "backward_causal": (967, 1248, 1435, 1507, 1490)})
# cuDNN 9.10.2 on a B200 and 9.13.1 on a GB300 through PyTorch's SDPA, causal, 2k to 32k (cudnn-frontend
# artifacts at 9793df5 and 0b1577c); their unmasked rows by today's GB200 ratios
def _of_2025(causal: tuple, backward_causal: tuple) -> dict:
    measured = {"causal": causal, "backward_causal": backward_causal}
    return _from_2k({**measured, **{
        row: tuple(round(c * GB200_CUDNN[row][i + 2] / GB200_CUDNN[of][i + 2]) for i, c in enumerate(measured[of]))
        for row, of in (("full", "causal"), ("backward", "backward_causal"))}})


B200_CUDNN_2025 = _of_2025((485, 874, 1197, 1350, 1430), (368, 695, 940, 1073, 1124))
GB300_CUDNN_2025 = _of_2025((594, 1145, 1496, 1702, 1796), (487, 893, 1130, 1268, 1319))
# Blackwell GPU -> (its cuDNN table, the peak and FA2 plateau of the GPU measured); B200: GB200's
BLACKWELL_CUDNN = {"GB200": (GB200_CUDNN, GPU_PRESETS["GB200"].bf16_tflops, GB200_FA2_FRACTION),
                   "GB300": (GB300_CUDNN, GPU_PRESETS["GB300"].bf16_tflops, GB300_FA2_FRACTION)}
# the same for cuDNN's 2025 releases; GB200: the B200's
BLACKWELL_CUDNN_2025 = {"B200": (B200_CUDNN_2025, GPU_PRESETS["B200"].bf16_tflops, GB200_FA2_FRACTION),
                        "GB300": (GB300_CUDNN_2025, GPU_PRESETS["GB300"].bf16_tflops, GB300_FA2_FRACTION)}
# a kernel release costed with its family's H100 table and head-dim scaling
FAMILY = {"cudnn-2025": "cudnn"}


WINDOW_TILE = 128                                      # queries and keys per tile of a windowed layer
WINDOW_COST = {"hopper": (1.58, 2.84), "blackwell": (5.84, 3.78)}   # a query tile's fixed cost in key tiles
# s per query token per head, cuDNN's backward with sinks: six pairs of call 14; call 20's five held-out
# shapes gave 1.62 to 1.73 ns windowed, 1.30 causal at 16k (validation/data/h100_harness/README.md)
SINK_BACKWARD = 1.72e-9


def window_fraction(window: float, gpu_name: str, kernel: str = "cudnn") -> tuple[float, float]:
    """(forward, backward) rate of a layer attending within `window` keys, as a fraction of the
    kernel's causal plateau (docstring: Windowed layers)."""
    n = window / WINDOW_TILE
    family = "blackwell" if gpu_name in BLACKWELL and FAMILY.get(kernel, kernel) == "cudnn" else "hopper"
    return tuple(n / (k + n + 1) for k in WINDOW_COST[family])


def causal_plateau(kernel: str, head_dim: float, table: dict | None = None) -> tuple[float, float]:
    """(forward, backward) causal rate at the best length of the kernel's rows: the rate a long
    windowed layer's full key tiles run at."""
    at = [rates(kernel, s, head_dim, table=table) for s in SEQS]
    return max(f for f, _ in at), max(b for _, b in at)


def _at(values: tuple, seq: float) -> float:
    """A row's rate at `seq`: log-linear between its points, held at its ends (SEQS[len - 1])."""
    x = min(max(math.log2(max(seq, 1.0)), math.log2(SEQS[0])), math.log2(SEQS[len(values) - 1]))
    i = min(int(x - 9), len(values) - 2)
    w = x - (9 + i)
    return values[i] * (1 - w) + values[i + 1] * w


def _head_scale(kernel: str, head_dim: float, backward: bool = False) -> float:
    scales = BACKWARD_HEAD_DIM_SCALE if backward and kernel in BACKWARD_HEAD_DIM_SCALE else HEAD_DIM_SCALE
    lo, mid, hi = scales[kernel]
    x = min(max(math.log2(head_dim), 6.0), 8.0) - 7.0            # -1 at 64, 0 at 128, 1 at 256
    return mid + x * (mid - lo) if x < 0 else mid + x * (hi - mid)


def rates(kernel: str, seq: float, head_dim: float, causal: bool = True,
          table: dict | None = None) -> tuple[float, float]:
    """(forward, backward) TFLOP/s of `kernel` at this length and head dim: on an H100 SXM5, or
    from `table` (GB200_CUDNN: on a GB200)."""
    kernel = FAMILY.get(kernel, kernel)
    t = table or H100_TFLOPS[kernel]
    fwd = _at(t["causal" if causal else "full"], seq)
    if causal and "backward_causal" in t:
        bwd = _at(t["backward_causal"], seq)
    else:
        bwd = _at(t["backward"], seq) * (fwd / _at(t["full"], seq) if causal else 1.0)
    return fwd * _head_scale(kernel, head_dim), bwd * _head_scale(kernel, head_dim, backward=True)


def _combined(fwd: float, bwd: float) -> float:
    """Forward + backward rate for FLOPs split 1 : 2.5 (the backward recomputes the scores)."""
    return 3.5 / (1 / fwd + 2.5 / bwd)


ANCHOR = _combined(*rates("fa2", SEQS[-1], 128))            # FA2's plateau on H100: 303 TFLOP/s


KERNEL_NAMES = {"fa2": "FlashAttention-2", "fa3": "FlashAttention-3", "cudnn": "cuDNN",
                "cudnn-2025": "cuDNN 9.9 to 9.13 (2025)"}


def costed_kernel(kernel: str, gpu_name: str) -> str:
    """The kernel whose measurements cost `kernel` on this GPU: itself where it is measured there
    (all three on Hopper, cuDNN of 2025 and of today and FA2 on Blackwell), else FlashAttention-2;
    on Hopper cuDNN's 2025 releases are costed as cuDNN (one table serves every release there)."""
    if gpu_name in HOPPER:
        return FAMILY.get(kernel, kernel)
    return kernel if kernel in (("fa2", "cudnn", "cudnn-2025") if gpu_name in BLACKWELL else ("fa2",)) else "fa2"


def kernel_note(kernel: str, gpu_name: str) -> str:
    """How the attention is costed, for a caption: 'cuDNN', or 'FlashAttention-3, costed as
    FlashAttention-2 (not measured on this GPU)'."""
    costed = costed_kernel(kernel, gpu_name)
    name = KERNEL_NAMES.get(kernel, kernel)
    if costed == kernel:
        return name
    why = "one table for every release on this GPU" if costed == FAMILY.get(kernel) else "not measured on this GPU"
    return f"{name}, costed as {KERNEL_NAMES[costed]} ({why})"


def attention_time(model: ModelSpec, par: ParallelConfig, kernel: str, gpu: GPUSpec,
                   profile: HardwareProfile) -> tuple[float, float]:
    """(forward, backward) seconds of one layer's attention core for one micro-batch on one GPU
    (its heads a/tp, its T = mbs * seq / cp queries against the causal context), averaged over the
    layers as flops.attention_flops is: the full layers at the rate for the sequence (for its chunks
    under CP), the windowed ones at the window's, the chunked ones at the chunk's; with sinks on
    cuDNN, their backward time beside."""
    table = None
    scale = gpu.bf16_tflops * profile.attention_fraction / ANCHOR * 1e12   # FLOP/s per table TFLOP/s
    kernel = costed_kernel(kernel, gpu.name)
    if gpu.name in BLACKWELL and kernel in ("cudnn", "cudnn-2025"):
        # the measured GPU's table at its profile's attention_fraction, scaled by this GPU's peak
        # and by how its profile's FA2 plateau stands to the measured one's
        tables, default = (BLACKWELL_CUDNN_2025, "B200") if kernel == "cudnn-2025" else (BLACKWELL_CUDNN, "GB200")
        table, peak, fa2 = tables.get(gpu.name, tables[default])
        scale = gpu.bf16_tflops / peak * profile.attention_fraction / fa2 * 1e12
    full, local = attention_flops_by_layer(model, par.seq, causal=True)
    flops = par.mbs * par.seq / par.cp * full / par.tp
    share = par.mbs * par.seq / par.cp / par.tp                 # this GPU's queries times its heads' share
    head_dim = model.q_dim / model.heads
    if par.cp == 1:
        fwd, bwd = rates(kernel, par.seq, head_dim, table=table)
        times = flops / (fwd * scale), 2.5 * flops / (bwd * scale)
    else:
        chunk = par.seq / (2 * par.cp)
        (cf, cb), (ff, fb) = rates(kernel, chunk, head_dim, table=table), rates(kernel, chunk, head_dim, False, table)
        masked = 1 / par.cp
        times = (flops * (masked / cf + (1 - masked) / ff) / scale,
                 2.5 * flops * (masked / cb + (1 - masked) / fb) / scale)
    if local:
        if model.chunked:
            lf, lb = rates(kernel, model.window, head_dim, table=table)
        else:
            plateau = causal_plateau(kernel, head_dim, table)
            lf, lb = (p * f for p, f in zip(plateau, window_fraction(model.window, gpu.name, kernel)))
        times = times[0] + share * local / (lf * scale), times[1] + 2.5 * share * local / (lb * scale)
    if model.sinks and FAMILY.get(kernel, kernel) == "cudnn":
        times = times[0], times[1] + SINK_BACKWARD * share * model.heads
    return times
