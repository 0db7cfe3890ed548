"""Attention kernels' time from the FlashAttention-3 paper's H100 measurements and ours (attention.py)."""
import pytest

from calculators.time import attention
from calculators.time.flops import attention_flops
from calculators.specs.kernels import attention_kernel
from calculators.specs.hardware import gpu_from_name
from calculators.specs.models import ModelSpec
from calculators.specs.parallel import ParallelConfig
from calculators.time.profiles import default_profile

L8B = ModelSpec(layers=32, hidden=4096, heads=32, kv_heads=8, ffn=14336, vocab=128256)


def test_the_table_is_reproduced_at_its_points():
    for kernel, table in attention.H100_TFLOPS.items():
        for i, seq in enumerate(attention.SEQS):
            def at(row):                                 # a row that stops short is held at its last point
                return table[row][min(i, len(table[row]) - 1)]
            fwd, bwd = attention.rates(kernel, seq, 128, causal=False)
            assert fwd == pytest.approx(at("full")) and bwd == pytest.approx(at("backward"))
            assert attention.rates(kernel, seq, 128)[0] == pytest.approx(at("causal"))
            if "backward_causal" in table:
                assert attention.rates(kernel, seq, 128)[1] == pytest.approx(at("backward_causal"))


def test_the_h100_profile_is_fa2s_plateau_and_the_faster_kernels_are_faster():
    h100 = default_profile("H100-80GB")
    assert h100.attention_fraction == pytest.approx(attention.ANCHOR / 989.4, abs=0.001)
    gpu = gpu_from_name("H100-80GB")
    par = ParallelConfig(mbs=1, seq=8192)
    fa2, cudnn, fa3 = (sum(attention.attention_time(L8B, par, k, gpu, h100)) for k in ("fa2", "cudnn", "fa3"))
    assert max(fa3, cudnn) < 0.65 * fa2         # cuDNN 9.19 (ours) runs level with the paper's FA3
    assert abs(cudnn / fa3 - 1) < 0.05
    # short sequences run well under the plateau, forward and backward
    assert all(s < 0.8 * p for s, p in zip(attention.rates("fa2", 512, 128), attention.rates("fa2", 8192, 128)))


def test_kernels_by_framework_and_gpu():
    """Transformer Engine prefers cuDNN's fused attention; the PyTorch-native stacks run
    FlashAttention-2, but torchtitan puts cuDNN first on Blackwell. FA3 runs on Hopper only and
    cuDNN is measured on Hopper and Blackwell: elsewhere they cost as FA2."""
    assert attention_kernel("megatron") == "cudnn" and attention_kernel("fsdp2") == "fa2"
    assert attention_kernel("fsdp2", "B200") == attention_kernel("fsdp2", "GB200") == "cudnn"
    assert attention_kernel("deepspeed", "B200") == attention_kernel("fsdp2", "H100-80GB") == "fa2"
    a100, prof = gpu_from_name("A100-80GB"), default_profile("A100-80GB")
    par = ParallelConfig(mbs=1, seq=4096)
    assert attention.attention_time(L8B, par, "fa3", a100, prof) == attention.attention_time(L8B, par, "fa2", a100,
                                                                                              prof)


def test_the_caption_names_the_kernel_and_any_stand_in():
    assert attention.kernel_note("cudnn", "GB200") == "cuDNN"
    assert attention.kernel_note("fa3", "B200") == \
        "FlashAttention-3, costed as FlashAttention-2 (not measured on this GPU)"
    assert attention.kernel_note("cudnn", "MI300X").endswith("costed as FlashAttention-2 (not measured on this GPU)")
    assert attention.kernel_note("fa3", "H100-80GB") == "FlashAttention-3"


# cudnn-frontend's SDPA training benchmark on an H200 with cuDNN 9.19 (NVIDIA/cudnn-frontend,
# benchmark/sdpa_benchmark_training/results/h200_919_only_cudnn/llama3.1_20260227_034703.csv):
# batch 1, 64 query and 8 kv heads, head dim 128; milliseconds forward and backward, causal.
H200_CUDNN_919_MS = {2048: (0.142, 0.464), 4096: (0.465, 1.450), 8192: (1.708, 5.083), 16384: (6.531, 19.002)}


def test_our_h100_cudnn_rows_match_nvidias_benchmark_on_hopper():
    """The Blackwell cuDNN table comes from cudnn-frontend's benchmark; on Hopper the same
    benchmark and our own measurement (same cuDNN release) agree within 10% on the causal rows
    training runs, so the two tables measure alike."""
    for seq, (fwd_ms, bwd_ms) in H200_CUDNN_919_MS.items():
        flops = 4 * 64 * seq * seq * 128 / 2                    # causal: half the square
        fwd, bwd = attention.rates("cudnn", seq, 128)
        assert fwd == pytest.approx(flops / fwd_ms / 1e9, rel=0.10), seq
        assert bwd == pytest.approx(2.5 * flops / bwd_ms / 1e9, rel=0.10), seq


def test_blackwell_runs_cudnn_from_its_own_measurement_and_fa2_barely_faster_than_on_hopper():
    """GB200: cuDNN at the published rates (1,574 forward, 1,332 backward at 8k, causal), B200 at
    its peak's share of them; FlashAttention-2 only 1.14 times its H100 rate, where scaling by the
    peak would have given 2.5 times."""
    par = ParallelConfig(mbs=1, seq=8192)
    flops = 8192 * attention_flops(L8B, 8192, causal=True)
    gb200, b200, h100 = (gpu_from_name(n) for n in ("GB200", "B200", "H100-80GB"))
    fwd, bwd = attention.attention_time(L8B, par, "cudnn", gb200, default_profile("GB200"))
    assert flops / fwd / 1e12 == pytest.approx(1574, rel=1e-3)
    assert 2.5 * flops / bwd / 1e12 == pytest.approx(1332, rel=1e-3)
    gb300 = gpu_from_name("GB300")                        # Blackwell Ultra: its own measured rows
    f3, b3 = attention.attention_time(L8B, par, "cudnn", gb300, default_profile("GB300"))
    assert flops / f3 / 1e12 == pytest.approx(1856, rel=1e-3)
    assert 2.5 * flops / b3 / 1e12 == pytest.approx(1435, rel=1e-3)
    b = sum(attention.attention_time(L8B, par, "cudnn", b200, default_profile("B200")))
    assert b == pytest.approx((fwd + bwd) * 2500 / 2250)
    fa2 = {g.name: sum(attention.attention_time(L8B, par, "fa2", g, default_profile(g.name))) for g in (gb200, h100)}
    assert fa2["H100-80GB"] / fa2["GB200"] == pytest.approx(373.9 / 327.9, rel=0.01)
    assert fwd + bwd < 0.3 * fa2["GB200"]


def test_cudnn_of_2025_on_blackwell_runs_at_its_own_measured_rates():
    """cuDNN 9.10.2 on a B200 (cudnn-frontend's artifacts at 9793df5, causal, head dim 128): the
    B200 reads them back at 2k to 32k, a GB200 at its peak's share more, and they sit under
    today's table up to 16k (over 10% at 8k and 16k); the GB300 has its own 9.13.1 rows; on
    Hopper one table serves both."""
    measured = {2048: (485, 368), 4096: (874, 695), 8192: (1197, 940), 16384: (1350, 1073), 32768: (1430, 1124)}
    b200, gb200, h100 = (gpu_from_name(n) for n in ("B200", "GB200", "H100-80GB"))
    for seq, (fwd_rate, bwd_rate) in measured.items():
        par = ParallelConfig(mbs=1, seq=seq)
        flops = seq * attention_flops(L8B, seq, causal=True)
        fwd, bwd = attention.attention_time(L8B, par, "cudnn-2025", b200, default_profile("B200"))
        assert (flops / fwd / 1e12, 2.5 * flops / bwd / 1e12) == pytest.approx((fwd_rate, bwd_rate), rel=1e-3)
        old, new = (sum(attention.attention_time(L8B, par, k, gb200, default_profile("GB200")))
                    for k in ("cudnn-2025", "cudnn"))
        assert old == pytest.approx((fwd + bwd) * 2250 / 2500)
        if seq < 32768:                       # at 32k the two releases run alike
            assert old > new * (1.1 if seq in (8192, 16384) else 1.0)
        assert attention.attention_time(L8B, par, "cudnn-2025", h100, default_profile("H100-80GB")) == \
            attention.attention_time(L8B, par, "cudnn", h100, default_profile("H100-80GB"))
    assert attention.kernel_note("cudnn-2025", "B200") == "cuDNN 9.9 to 9.13 (2025)"
    assert attention.kernel_note("cudnn-2025", "H100-80GB").endswith("costed as cuDNN (one table for every release "
                                                                     "on this GPU)")
    gb300, par = gpu_from_name("GB300"), ParallelConfig(mbs=1, seq=8192)   # its own 9.13.1 rows
    fwd, bwd = attention.attention_time(L8B, par, "cudnn-2025", gb300, default_profile("GB300"))
    flops = 8192 * attention_flops(L8B, 8192, causal=True)
    assert (flops / fwd / 1e12, 2.5 * flops / bwd / 1e12) == pytest.approx((1496, 1130), rel=1e-3)
    assert attention.kernel_note("cudnn-2025", "MI300X").endswith("costed as FlashAttention-2 (not measured on this GPU)")


def test_context_parallel_chunks_run_at_their_own_length_mostly_unmasked():
    """The load-balanced ring computes attention between chunks of seq / (2 cp) tokens, and only
    the step on a rank's own chunks is masked: 1/cp of the work at the causal rate."""
    gpu, prof = gpu_from_name("H100-80GB"), default_profile("H100-80GB")
    one = sum(attention.attention_time(L8B, ParallelConfig(mbs=1, seq=4096), "cudnn", gpu, prof))
    ring = sum(attention.attention_time(L8B, ParallelConfig(mbs=1, seq=16384, cp=4), "cudnn", gpu, prof))
    (f4, b4), (cf, cb), (ff, fb) = (attention.rates("cudnn", 4096, 128), attention.rates("cudnn", 2048, 128),
                                    attention.rates("cudnn", 2048, 128, causal=False))
    per_flop = (0.25 / cf + 0.75 / ff) + 2.5 * (0.25 / cb + 0.75 / fb)
    # four times the context per query at a quarter of the queries
    assert ring / one == pytest.approx(4 * per_flop / (1 / f4 + 2.5 / b4))


@pytest.mark.parametrize("backend,kernel", [("cudnn", "cudnn"), ("flash", "fa2")])
def test_head_dim_64_runs_at_our_measured_rates_both_ways(backend, kernel):
    """Our H100 rows of cuDNN and of PyTorch's flash kernel (FA2) at head dim 64
    (validation/data/h100_harness/attention.jsonl, 1k to 64k tokens, causal and not, MHA and GQA):
    the calculators' rates within 5% at the median, forward and backward apart (one forward ratio
    for both had put cuDNN's backward 13% slow). FA2's hd64/hd128 backward ratio in our rows is
    0.92 to 0.93, not the paper's 0.876, but its hd128 backward runs at 0.96 of the paper's table:
    their product, what the calculators use, is what the hd64 rows measure (median 0.995), so the
    table stands."""
    import json
    import pathlib
    import statistics
    data = pathlib.Path(__file__).parents[2] / "validation" / "data" / "h100_harness" / "attention.jsonl"
    ratios = {"forward": [], "backward": []}
    for r in map(json.loads, data.read_text().splitlines()):
        c, m = r["config"], r.get("metrics", {})
        if r.get("status") != "ok" or c["backend"] != backend or c["head_dim"] != 64 or c["seq"] < 1024:
            continue
        fwd, bwd = attention.rates(kernel, c["seq"], 64, causal=c["causal"])
        ratios["forward"].append(m["forward_tflops"] / fwd)
        ratios["backward"].append(m["backward_tflops"] / bwd)
    assert len(ratios["forward"]) >= 10
    for way, got in ratios.items():
        assert abs(statistics.median(got) - 1) < 0.05, (way, sorted(got))
