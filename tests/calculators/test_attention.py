"""Attention kernels' time from the FlashAttention-3 paper's H100 measurements and ours (attention.py)."""
import pytest

from calculators.time import attention
from calculators.specs.frameworks import attention_kernel
from calculators.specs.hardware import gpu_from_name
from calculators.specs.models import ModelSpec
from calculators.specs.parallel import ParallelConfig
from calculators.time.profiles import default_profile

L8B = ModelSpec(layers=32, hidden=4096, heads=32, kv_heads=8, ffn=14336, vocab=128256)


def test_the_table_is_reproduced_at_its_points():
    for kernel, table in attention.H100_TFLOPS.items():
        for i, seq in enumerate(attention.SEQS):
            fwd, bwd = attention.rates(kernel, seq, 128, causal=False)
            assert fwd == pytest.approx(table["full"][i]) and bwd == pytest.approx(table["backward"][i])
            assert attention.rates(kernel, seq, 128)[0] == pytest.approx(table["causal"][i])
            if "backward_causal" in table:
                assert attention.rates(kernel, seq, 128)[1] == pytest.approx(table["backward_causal"][i])


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
    """Transformer Engine prefers cuDNN's fused attention on Hopper; the PyTorch-native stacks run
    FlashAttention-2. FA3 and cuDNN are measured on H100 only: elsewhere they cost as FA2."""
    assert attention_kernel("megatron") == "cudnn" and attention_kernel("fsdp2") == "fa2"
    a100, prof = gpu_from_name("A100-80GB"), default_profile("A100-80GB")
    par = ParallelConfig(mbs=1, seq=4096)
    assert attention.attention_time(L8B, par, "fa3", a100, prof) == attention.attention_time(L8B, par, "fa2", a100,
                                                                                              prof)


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
