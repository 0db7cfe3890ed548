"""The time model against published runs of stacks it was not developed on (validation/stacks.py:
torchtitan and PyTorch's FSDP runs, NVIDIA's DGX Cloud benchmarks and Megatron-Bridge tables,
Megatron-LM's scaling table, MoE recipes, FP8; 8 to 6,144 GPUs). One knob is fitted to twelve of
them (host.EXPERT_LOOP_FP8_MS, checked below on the runs it was not fitted on); nothing else is. What
holds is asserted; what does not yet is named, and asserted to still miss, so the list stays
true when the model improves."""
from dataclasses import replace

import pytest

from validation.stacks import fit_misses, load, memory_summary, score, summary

# source -> why its median is over 20%
KNOWN_MISSES = {
    "torchao-training-docs": "torchtitan on 8 power-limited B200 (limit not stated) and 8 MI300X in 2025-08 "
                             "(torch 2.9 nightly): 19 to 24% MFU where the kernel measurements the B200 and "
                             "MI300X profiles carry put it at 33 to 54% (of the bf16 peak)",
}


@pytest.fixture(scope="module")
def scored():
    runs, skipped = load()
    return [score(r) for r in runs], skipped


def test_nearly_every_readable_run_is_expressed_and_every_refusal_says_why(scored):
    rows, skipped = scored
    expressed = [s for s in rows if s.predicted is not None]
    assert len(rows) >= 300 and len(expressed) / len(rows) >= 0.99
    assert all(s.reason for s in rows if s.predicted is None)
    assert all(why for _, why in skipped)


def test_held_out_runs_are_predicted_within_the_targets_and_beat_a_constant_mfu(scored):
    """Over the same 339 runs p90 went from 33% to 37% when Blackwell's kernels moved from H100's
    rates scaled by its peak to measured ones (cuDNN attention 1.8 times faster than that, GEMMs
    15% slower): the dense Blackwell runs stay within 11%, and MoE on Blackwell and CP on B200,
    whose other costs the scaled rates had hidden, rose above 33%. The 24 one-GPU runs added to
    check those kernels (cudnn-frontend's, SDPA backends forced) land within 25% and bring p90
    back to 33%. Reading the recipes' expert TP (1, where Megatron's default is TP) made the last
    four Qwen3-235B-A22B rows expressible and brought the ModelZoo's long-context ones from -29..-5%
    to -5..+8%; three of the four are Megatron-Bridge's H100 runs with EP 32 across 4 nodes, which
    the MoE model misses (+12% and +14% with the all-to-all dispatcher, +102% with DeepEP, measured
    within 6% of each other; -38% and -37% for the first two while all-to-alls, all-gathers and
    reduce-scatters crossed nodes at half the NIC's rate): p90 35%. Megatron's per-expert host
    time in FP8 (host.EXPERT_LOOP_FP8_MS, test below) brought the MoE rows of Megatron-Bridge's
    tables from +12..+72% to within 25% but for the H100 DeepEP row (+76%): p90 23%. DeepEP's kernels
    taking 20 SMs from the compute they overlap (profiles.dispatch_sm_share) brought that row to +63%
    and the GB200 rows with EP overlap from +15..+21% to +11..+16%: p90 22%. Costing the Blackwell
    runs of 2025 stacks with cuDNN's 2025 kernels (test below) brought NeMo's long-context table from
    24.6% to 14.7% median: p90 19%. Reading Megatron-LM's 2024 weak-scaling table from its TFLOP/s
    with Megatron's count of that date, not as an MFU of ours: 18%. torchtitan's Qwen3-30B-A3B with
    DeepEP on B200 (six runs, +19 to +27%, a known miss) and its DeepSeek-V3 on 512 H100 with EP 32
    across nodes (+28% with DeepEP, +53% with the all-to-all) added: 20%. DeepEP's intranode kernels on
    Blackwell at their measured SM-bound rate (dispatch.py; torchtitan's on 128 SMs, Megatron's on 20),
    HybridEP kept on the link model: torchtitan's DeepEP runs +10 to +18%, 19%. torchtitan's own
    benchmarks on Meta's 500 W H100s (33 runs, validation/gpus.py) read, its async TP costed as
    torchtitan runs it (forward only, overlap.tp_pipelining) and its pipelines with their
    default micro-batches and FSDP's weights kept through them: 20% (its context-parallel runs,
    +13 to +68%, are the new misses above 20%). GPT-OSS 120B's 14 Megatron-Bridge rows, expressible
    once the calculators read gpt-oss, added (+16 to +85%, a named miss, test below): 25.4%; its
    experts' eager clamp and unfused bias costed (elementwise.CLAMP, EXPERT_BIAS): 22.9%."""
    rows, _ = scored
    n, median, p90, signed, mfu40, mfu50 = summary(rows)["all"]
    assert n >= 300 and median <= 0.05 and p90 <= 0.25 and abs(signed) <= 0.05
    assert median < min(mfu40, mfu50)
    for source, (n, median, _, _, mfu40, mfu50) in summary(rows, lambda s: s.run.source).items():
        if n >= 20 and source not in KNOWN_MISSES:
            assert median < min(mfu40, mfu50), source
        if n >= 5:
            assert (median <= 0.20) != (source in KNOWN_MISSES), (source, median)


def test_gpt_oss_holds_by_mechanism(scored):
    """Megatron-Bridge's GPT OSS 120B runs (26.02 to 26.08, H100, B200, GB200) first came out 16 to
    85% too fast, where the same tables' Qwen3 and DeepSeek-V3 runs on the same systems land within
    about 5%. Each pass that closed the gap was found in Megatron-Core's source and timed on our own
    H200, none fitted to these runs:
    - its experts' eager passes: the clamp of the GLU's input before the compiled activation, and
      the second bias added per local expert (in fp32 and cast back under HybridEP), counted from
      PyTorch's trace (elementwise.CLAMP, EXPERT_BIAS) at the pace the H200 ran them (EAGER_PACE:
      PyTorch's non-vectorized kernels on strided and broadcast operands); the MXFP8 runs' fused
      grouped MLP folds both in;
    - YaRN's rotary embedding, which Megatron applies unfused (ROPE_UNFUSED, traced and timed the
      same way);
    - cuDNN's 128-token window, at 0.28 of the causal rate forward and 0.21 backward, and the
      attention sinks' 1.72 ns per query token and head in the backward (attention.py).
    The paces were timed on Hopper and are taken on Blackwell, where 12 of the 14 ran. Now: 0 to
    +19% (median +10%), MXFP8 +5 and +6%. Still open: the GB200 BF16 runs stay 10 to 19% fast; the MXFP8 runs' FP8 attention, whose backward does not skip the window's masked blocks on
    Blackwell (cudnn-frontend's gpt-oss benchmark), is not costed; the sinks are costed on Blackwell at
    their Hopper time (not measured there)."""
    rows = [s for s in scored[0] if s.run.model.name == "gpt-oss-120b"]
    assert len(rows) == 14 and all(s.error < 0.22 for s in rows)
    assert sorted(s.error for s in rows)[len(rows) // 2] < 0.12
    assert all(s.error < 0.08 for s in rows if s.run.par.experts == "fused")
    assert all(s.predicted > 1.08 * s.run.measured for s in rows
               if s.run.cluster.gpu.name == "GB200" and s.run.par.precision == "bf16")


def test_the_expert_loops_host_time_holds_on_runs_it_was_not_fitted_on(scored, monkeypatch):
    """host.EXPERT_LOOP_FP8_MS is fitted on the twelve Megatron FP8 runs of Qwen3-30B-A3B whose
    experts run Transformer Engine's per-expert loop (16 and 8 local experts; H100, B200, GB200).
    The other Megatron FP8 MoE runs (Qwen3-235B-A22B, DeepSeek-V3: 2 to 32 local experts) are the
    check: from 6.1% median error without it to 3.3% with it (12.3% to under 8% before the output
    layer was costed in bf16 under FP8, as every stack runs it; 13.4% before DeepEP's kernels on
    Blackwell were costed at their measured rate and its NVLink share corrected, which refitted it
    from 0.22 to 0.20 ms)."""
    from calculators.specs.kernels import expert_kernel
    from calculators.time import host
    moe = [s.run for s in scored[0] if s.run.model.moe_layers and s.run.measured and s.predicted
           and s.run.par.framework == "megatron" and s.run.par.precision == "fp8"]
    fit = [r for r in moe if r.model.name == "qwen3-30b-a3b" and expert_kernel(r.par) == "loop"]
    held = [r for r in moe if r.model.name != "qwen3-30b-a3b"]
    assert len(fit) >= 10 and len(held) >= 20

    def median_error(runs):
        errors = sorted(abs(score(r).error) for r in runs)
        return (errors[(len(errors) - 1) // 2] + errors[len(errors) // 2]) / 2

    held_with = median_error(held)
    assert median_error(fit) <= 0.05 and held_with <= 0.05
    monkeypatch.setattr(host, "EXPERT_LOOP_FP8_MS", 0.0)
    assert median_error(fit) >= 0.3 and median_error(held) >= 1.5 * held_with


# torchao's bf16 baseline of its MXFP8 grouped GEMM, forward + backward with an MSE loss, on a B200
# (torch 2.10.0a0; torchao/prototype/moe_training/README.md at d6c6dba04): (tokens, N, K, groups) -> us
GROUPED_MM_B200_US = {(128000, 8192, 5120, 1): 43140.2, (128000, 8192, 5120, 2): 39487.6,
                      (128000, 8192, 5120, 4): 39189.2, (128000, 8192, 5120, 8): 37700.7,
                      (128000, 2048, 7168, 1): 13064.8, (128000, 2048, 7168, 2): 14900.2,
                      (128000, 2048, 7168, 4): 15823.6, (128000, 2048, 7168, 8): 14966.8}


def test_torchtitans_grouped_experts_on_blackwell_run_at_the_kernels_measured_share(scored, monkeypatch):
    """kernels.GROUPED_MM_BLACKWELL_BF16 is the median of eight kernel runs of torch._grouped_mm on a
    B200 against the calculators' dense GEMM time at their shapes, with the benchmark's loss (read
    the output and its labels, write the output's gradient) and the gradients' accumulation into
    A and B counted as memory-bound passes; fitted there, on no training run. It applies to
    torchtitan's bf16 experts on Blackwell only. The training runs it was not fitted on,
    torchtitan's MoE runs in bf16 on B200 and GB200 (Qwen3-30B-A3B with DeepEP, Llama 4 Scout),
    all come closer, each by 9 to 15 points, and none overshoots."""
    from calculators.specs import kernels
    from calculators.specs.hardware import gpu_from_name
    from calculators.specs.parallel import ParallelConfig
    from calculators.time.compute import gemm_time, memory_time
    from calculators.time.profiles import default_profile
    gpu, prof = gpu_from_name("B200"), default_profile("B200")
    shares = []
    for (m, n, k, g), us in GROUPED_MM_B200_US.items():
        gemms = sum(gemm_time(a, b, c, gpu, prof, count=g) for a, b, c in ((m / g, n, k), (m / g, k, n), (n, k, m / g)))
        around = memory_time(2 * (5 * m * n + 3 * m * k + 3 * g * k * n), 4, gpu, prof)
        shares.append((gemms + around) / (us * 1e-6))
    shares.sort()
    assert kernels.GROUPED_MM_BLACKWELL_BF16 == pytest.approx((shares[3] + shares[4]) / 2, abs=0.01)
    from pathlib import Path                # chapter 7 and README quote the share as typed text
    root = Path(__file__).resolve().parents[2]
    quoted = f"{kernels.GROUPED_MM_BLACKWELL_BF16:.2f}"
    assert quoted in (root / "playbook/chapters/07-expert-parallel.md").read_text()
    assert quoted in (root / "README.md").read_text()
    titan = ParallelConfig(framework="fsdp2", ep=8, dp=8)
    assert kernels.expert_gemm_share(titan, "GB200") == kernels.GROUPED_MM_BLACKWELL_BF16
    for par, name in ((titan, "H100-80GB"), (ParallelConfig(framework="fsdp2", precision="fp8"), "B200"),
                      (ParallelConfig(framework="megatron", experts="fused"), "GB200")):
        assert kernels.expert_gemm_share(par, name) == 1.0
    held = [s for s in scored[0] if s.run.par.framework == "fsdp2" and s.run.model.moe and s.run.measured
            and s.run.par.precision == "bf16" and s.run.cluster.gpu.name in ("B200", "GB200")]
    assert len(held) >= 8
    monkeypatch.setattr(kernels, "GROUPED_MM_BLACKWELL_BF16", 1.0)
    for s in held:
        before = score(s.run).error
        assert 0.08 < before - s.error < 0.16 and s.error > 0, (s.run.line, before, s.error)


def test_runs_of_nvidias_performance_recipes_keep_bf16_gradients(scored):
    """Megatron-Bridge's performance recipes and Megatron-LM's Llama 3 example reduce gradients in
    bf16 (recipes.BF16_GRADS); NeMo 2.0's benchmarks before 2025-06 kept Megatron's fp32 except in
    FP8, which its performance scripts reduce in bf16 (recipes.NEMO2_PERF_FP8).
    Megatron-MoE-ModelZoo's FP8 runs keep Adam's moments in bf16, its BF16 runs in fp32."""
    runs = [s.run for s in scored[0]]
    bridge = [r for r in runs if r.source.startswith("megatron-bridge-")]
    assert bridge and all(r.par.grad_dtype == "bf16" for r in bridge)
    # NeMo 2.0 kept Megatron's fp32 in BF16 and reduced in bf16 in FP8 (dgxc v25.04 and v25.05.01 run
    # its performance scripts); the NeMo 1.x launcher's Nemotron-4 340B ran Apex's optimizer with
    # grad_sync_dtype bf16 (recipes.APEX_ADAM)
    def expected(r):
        apex_bf16 = r.model.name == "nemotron4-340b" and r.par.master_dtype
        nemo2_fp8 = r.source in ("dgxc-benchmarking-v25.04", "dgxc-benchmarking-v25.05.01") and r.par.precision == "fp8"
        return "bf16" if apex_bf16 or nemo2_fp8 else ""
    dgxc = [r for r in runs if r.source.startswith("dgxc-benchmarking-")]
    assert all(r.par.grad_dtype == expected(r) for r in dgxc)
    assert any(expected(r) and not r.par.master_dtype for r in dgxc)
    zoo = [r for r in runs if r.source.startswith("megatron-moe-modelzoo-")]
    assert {r.par.moment_dtype for r in zoo if r.par.precision == "fp8"} == {"bf16"}
    assert {r.par.moment_dtype for r in zoo if r.par.precision == "bf16"} == {""}


def test_pytorch_native_runs_on_transformer_engine_modules_run_its_kernels(scored):
    """NeMo Automodel's "TE" runs (FSDP2 over Transformer Engine's RMSNorm, Linear and
    DotProductAttention) run fused element-wise kernels and cuDNN attention, not torchtitan's eager
    ops and FlashAttention-2; so do ALST's runs with its tiled logits on Liger-Kernel's modules
    (ArcticTraining's model type liger); the other PyTorch-native rows keep their framework's."""
    runs = [s.run for s in scored[0]]
    te = [r for r in runs if r.source == "nemo-automodel-perf"]
    assert te and all(r.par.elementwise == "fused" and r.par.attention == "cudnn" for r in te)
    alst = [r for r in runs if r.source.startswith("arxiv-2506.13996")]
    assert {r.line for r in alst if r.par.elementwise == "fused"} == {r.line for r in alst if r.par.loss == "chunked"}
    assert len({r.par.elementwise for r in alst}) == 2
    native = [r for r in runs if r.par.framework in ("fsdp2", "deepspeed") and r.source != "nemo-automodel-perf"
              and r not in alst]
    assert native and all(r.par.elementwise == "" for r in native)


def test_nemo_launcher_runs_keep_apexs_optimizer_state(scored):
    """NeMo 1.x launcher runs on Apex's DistributedFusedAdam keep 16-bit master remainders, or, with
    Nemotron-4 340B's bf16 optimizer state, no master, bf16 moments and bf16 gradients
    (recipes.APEX_ADAM); NeMo 2.0's runs keep Megatron's fp32 master."""
    runs = [s.run for s in scored[0]]
    apex = {(r.source, r.model.name): r.par for r in runs if r.par.master_dtype in ("remainder", "16bit", "none")}
    assert {p.master_dtype for p in apex.values()} == {"remainder", "16bit", "none"}
    # Megatron-MoE-ModelZoo's MXFP8 runs keep fp32 masters despite their precision-aware optimizer:
    # Megatron keeps remainders under delayed scaling only (frameworks.master_dtype reads fp8_recipe)
    from calculators.specs.frameworks import master_dtype
    zoo = [r.par for r in runs if r.source.startswith("megatron-moe-modelzoo-") and r.par.precision == "fp8"]
    assert zoo and {(p.fp8_recipe, p.moment_dtype, master_dtype(p)) for p in zoo} == {("mxfp8", "bf16", "fp32")}
    launcher = ("dgxc-benchmarking-v24.11", "dgxc-benchmarking-v25.02", "nemo-24.07", "megatron-bridge-")
    assert all(src.startswith(launcher) for src, _ in apex)
    sft = [p for (src, name), p in apex.items() if src == "nemo-24.07" and name.startswith("llama2")]
    assert len(sft) == 3
    assert {(p.grad_dtype, p.moment_dtype, p.master_dtype) for p in sft} == {("bf16", "bf16", "16bit")}
    big = [p for (src, name), p in apex.items() if name == "nemotron4-340b"]
    assert big and all((p.grad_dtype, p.moment_dtype, p.master_dtype) == ("bf16", "bf16", "none") for p in big)
    assert not any(r.par.master_dtype for r in runs if r.source.startswith("dgxc-benchmarking-v25.04"))
    # Megatron-Bridge's performance scripts run its precision-aware optimizer in bf16 (remainders)
    bridge = [r for r in runs if r.source.startswith("megatron-bridge-")]
    assert {r.par.master_dtype for r in bridge if r.par.precision == "bf16"} == {"remainder"}
    assert {r.par.master_dtype for r in bridge if r.par.precision == "fp8"} == {""}


def test_memory_is_reported_per_framework(scored):
    """torchtitan's published peaks (reserved, op-level SAC, its loss compiled or not): within 10%
    at the median (the MoE debug model's 145 GiB, 21% over the model, is not explained)."""
    rows, _ = scored
    memory = memory_summary(rows)
    assert memory["fsdp2"][0] >= 10 and 0 < memory["fsdp2"][1] <= 0.10


def test_the_fit_call_lets_published_runs_fit_and_keeps_published_ooms_out(scored):
    """Every published run ran but two (torchtitan's 70B at batch 2 on A100, reported out of memory).
    The fit rule calls both of those out of memory, and at most 6% of Megatron's runs that ran out
    of memory (13 of 293 with the GPUs' memory as their drivers report it; nanotron's 77% called 141
    of 293); the rest named in validation.stacks' list."""
    rows, _ = scored
    called_oom, called_fit, ran, oom = fit_misses(rows)
    assert oom == 2 and not called_fit
    megatron = [s for s in rows if s.ran and s.fits is not None and s.run.par.framework == "megatron"]
    missed = [s for s in called_oom if s.run.par.framework == "megatron"]
    assert len(megatron) >= 250 and len(missed) <= 0.06 * len(megatron), len(missed)


def test_readme_quotes_the_scripts_figures(scored):
    from pathlib import Path

    from validation.stacks import readme_block
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    assert readme_block(scored[0]) in readme, "README's validation.stacks figures are stale: paste readme_block()"


def test_blackwell_runs_of_2025_stacks_attend_at_cudnn_2025_rates(scored):
    """A row whose stack carries cuDNN 9.9 to 9.13 (recipes.cudnn_2025) runs cuDNN's attention on
    Blackwell at the 2025 table's rates. The check it was not built on: cudnn-frontend's own Llama
    3.2 1B training runs on a B200 with cuDNN 9.9.0, SDPA forced to cuDNN, went from +5..+24% (the
    miss growing with the sequence, where the FlashAttention-2 runs beside them stay within 4%) to
    within 24% (-10..+13% since Hugging Face's measured element-wise pace and loss, -7..+16% with
    today's table: closer at 8k and 16k, further at 768 to 4k; before those it came closer on every
    one, within 20% while head dim 64's cuDNN backward took the forward's ratio to head dim 128, our
    H100 rows' own, 0.81, costing it faster, on every GPU); so did the GB200 runs of NeMo 25.04 and
    its long-context B200 runs up to 16k-token chunks (the 32k chunks, where the releases run alike,
    moved by 1%)."""
    from validation.recipes import cudnn_2025
    assert all(cudnn_2025({"framework_version": v}) for v in (
        "torchtitan @6fc499f, torch 2.9.0.dev20250815+cu128", "PyTorch 2.7.0, cuDNN 9.9.0, CUDA 12.9",
        "container nemo:25.04.01 (README enroot import)", "NeMo 25.04.rc2 container", "NeMo container 25.04"))
    assert not any(cudnn_2025({"framework_version": v}) for v in (
        "NeMo container 25.11 (Megatron-Bridge)", "torch 2.10.0", "torch 2.7.1 (cu128 wheel)", "cuDNN 9.17.0",
        "torchtitan main (2026-04 doc)"))
    rows = [s for s in scored[0] if s.run.par.attention == "cudnn-2025"]
    assert {s.run.source for s in rows} == {"cudnn-frontend-llama3.2-1b-training", "dgxc-benchmarking-v25.05.01",
                                            "nemo-long-context", "torchao-training-docs",
                                            "torchtitan-deepep-qwen3-2026-01"}
    today = {s.run.line: score(replace(s.run, par=replace(s.run.par, attention="cudnn"))).error for s in rows}
    # closer on every row but the 1B's four at 768 to 4,096 tokens: since Hugging Face's measured
    # element-wise pace and loss those come out 3 to 7% slow with today's table and 3 to 10% with
    # 2025's, whose slower attention moves them further (their attention is a small part of the step)
    short_1b = {s.run.line for s in rows
                if s.run.source == "cudnn-frontend-llama3.2-1b-training" and s.run.par.seq <= 4096}
    assert len(short_1b) == 4
    assert all(abs(s.error) < abs(today[s.run.line]) + 0.015 for s in rows
               if s.run.source != "torchao-training-docs" and s.run.line not in short_1b)
    # (torchtitan's DeepEP runs, added later, name cuDNN 9.10.2 and come closer too, at 4k tokens)
    assert all(s.error < today[s.run.line] for s in rows if s.run.par.seq / s.run.par.cp <= 32768)
    check = [s.error for s in rows if s.run.source == "cudnn-frontend-llama3.2-1b-training"]
    assert len(check) == 6 and max(check) < 0.25


def test_torchtitans_async_tp_gains_what_its_own_pairs_measured(scored, monkeypatch):
    """torchtitan's vanilla/async TP pairs (70B on 256 and 8B on 64 H100, bf16 and float8
    tensorwise; the rowwise pairs gather in bf16 and run other GEMMs, which fsdp2's FP8 does not
    describe): async TP hides the forward's TP collectives only (overlap.tp_pipelining). Each
    pair's predicted gain is nearer the measured one than if the backward's were pipelined too, as
    Transformer Engine's are, which put each gain at about twice the measured."""
    import csv
    import calculators.time.layercomm as layercomm
    from validation.stacks import DATA
    with open(DATA, newline="") as fh:
        rowwise = {line for line, row in enumerate(csv.DictReader(fh), start=2) if "rowwise" in row["fp8_recipe"]}
    rows, _ = scored
    titan = {s.run.line: s for s in rows if s.run.source == "torchtitan-asynctp-2025-06" and s.run.line not in rowwise}
    pairs = [(v, titan[line + 1]) for line, v in titan.items()
             if not v.run.par.tp_overlap and line + 1 in titan and titan[line + 1].run.par.tp_overlap]
    assert len(pairs) == 4 and all(v.run.model == a.run.model and v.run.par.precision == a.run.par.precision
                                   for v, a in pairs)
    monkeypatch.setattr(layercomm, "tp_pipelining", lambda framework: "both")
    for vanilla, fused in pairs:
        measured = fused.run.measured / vanilla.run.measured
        ours = fused.predicted / vanilla.predicted
        pipelined = score(fused.run).predicted / vanilla.predicted
        assert 1.0 < ours < pipelined and abs(ours - measured) < abs(pipelined - measured), (fused.run.line, ours)


def test_runs_on_a_gpu_the_source_only_bounds_say_what_the_bound_moves(scored):
    """Meta's 500 W H100s (torchtitan's benchmarks, and torchao's float8 table): read as a custom GPU
    at the midpoint of the peak its source bounds (validation/gpus.py) and scored at both ends too:
    a higher peak predicts every run faster, and each source on it stays within the issue's 20% at
    the peak taken."""
    from validation.gpus import PEAK_BOUND, at_peak
    from validation.stacks import peak_bound
    rows, _ = scored
    on_it = [s for s in rows if s.run.cluster.gpu.name == "H100-96GB-500W"]
    assert len(on_it) == 36 and all(s.predicted for s in on_it)       # torchtitan 33, torchao 3
    low, high = PEAK_BOUND["H100-96GB-500W"]
    for s in on_it[::4]:
        ends = [score(replace(s.run, cluster=replace(s.run.cluster, gpu=at_peak(s.run.cluster.gpu, peak)))).predicted
                for peak in (low, high)]
        assert ends[0] < s.predicted < ends[1], s.run.line
    bounds = peak_bound(rows)
    assert {source for source, _ in bounds} == {"torchtitan-bench-2024-12", "torchtitan-asynctp-2025-06",
                                                "torchtitan-perf-2024-08", "torchao-float8-readme-2025-03"}
    for (source, _), (n, _, mid, _) in bounds.items():
        assert n < 5 or mid <= 0.20, source
    with pytest.raises(ValueError):
        at_peak(rows[0].run.cluster.gpu, 900.0)
