"""GPUs that published runs ran on and the product has no preset for, built the way a user builds a
custom GPU (hardware.gpu in a scenario), each field with where it comes from. validation.stacks
reads a row's `gpu` here when it is not a preset.

H100-96GB-500W: Meta's Grand Teton H100s, on which torchtitan's own benchmarks ran
(benchmarks/llama3_h100_202412_torchtitan.md and asyncTP_llama3_h100_2025-06_torchtitan.md,
"Hardware"; docs/performance.md at 3faaa1a, footnote), and, read so, torchao's float8 table of
2025-03, which names no part but whose roofline gives its H100 as Meta's variant: 96 GB of HBM2e at
2.4 TB/s, eight GPUs per host on NVLink, 400 Gb/s of RDMA per GPU, run at the default 500 W power
limit instead of the SXM part's 700 W. The dense bf16 peak is not published: the 2024-12 page's
footnote puts it "between SXM and NVL" (989.4 and 835 TFLOP/s, NVIDIA's H100 datasheet); the
midpoint, 912, is taken, and `validation.stacks` scores these runs at both ends of that bound too
(`PEAK_BOUND`), so what the unknown peak could move is stated beside each error. FP8 twice bf16, as
on every Hopper part. Memory: the driver's total is not published; 96 GB is read by the H100 NVL's
ratio (95,830 MiB for its 94 GB): 95.6 GiB. NVLink and the host link as the H100 SXM's (the same
board family). The time model costs it with H100's fractions of its own peaks
(profiles.default_profile for a GPU that is not a preset), so the 500 W clocks enter through the
peak alone: an assumption, not a measurement of this part.
"""
from __future__ import annotations

from calculators.specs.hardware import GPUSpec

PEAK_BOUND = {"H100-96GB-500W": (835.0, 989.4)}   # bf16 TFLOP/s, the source's bound


def _grand_teton(bf16: float) -> GPUSpec:
    return GPUSpec("H100-96GB-500W", 95.6, bf16, 2 * bf16, 2.4, 450, 50, 8,
                   "Meta Grand Teton H100 (torchtitan benchmarks: 96 GB HBM2e 2.4 TB/s, 400 Gb/s RDMA per GPU, "
                   "500 W); bf16 peak between the H100 NVL's and SXM's, midpoint taken", host_gbps=51.0)


VALIDATION_GPUS: dict[str, GPUSpec] = {"H100-96GB-500W": _grand_teton(sum(PEAK_BOUND["H100-96GB-500W"]) / 2)}


def at_peak(gpu: GPUSpec, bf16: float) -> GPUSpec:
    """The same GPU at another bf16 peak (FP8 twice it): for scoring a run across PEAK_BOUND."""
    if gpu.name != "H100-96GB-500W":
        raise ValueError(f"{gpu.name}: its peak is not one a source only bounds (PEAK_BOUND)")
    return _grand_teton(bf16)
