"""GPU and cluster specs: a data table with a source per row, not magic numbers.

Conventions: TFLOP/s are dense (no 2:4 sparsity); bandwidths are per GPU, one direction, GB/s
(1e9 bytes/s); memory is what the driver exposes, in GiB (2^30 bytes).
"""
from __future__ import annotations

from dataclasses import dataclass

from .errors import ConfigError, require


@dataclass(frozen=True)
class GPUSpec:
    name: str
    memory_gib: float            # usable HBM, GiB
    bf16_tflops: float           # dense peak
    fp8_tflops: float            # dense peak; 0 where the GPU has no FP8 tensor cores
    hbm_tbps: float              # HBM bandwidth, TB/s
    intra_node_gbps: float = 0.0  # NVLink / xGMI per GPU, one direction, GB/s
    inter_node_gbps: float = 0.0  # the GPU's share of the node's NICs, one direction, GB/s
    gpus_per_node: int = 8       # GPUs in one fast-link domain (a node; 72 for an NVL72 rack)
    source: str = ""

    def __post_init__(self):
        p: list[str] = []
        for key in ("memory_gib", "bf16_tflops", "hbm_tbps"):
            require(p, getattr(self, key) > 0, f"gpu.{key} must be positive (got {getattr(self, key)})")
        require(p, self.fp8_tflops >= 0, f"gpu.fp8_tflops must be >= 0 (got {self.fp8_tflops})")
        require(p, self.gpus_per_node >= 1, f"gpu.gpus_per_node must be >= 1 (got {self.gpus_per_node})")
        if p:
            raise ConfigError(p)

    def peak_tflops(self, precision: str) -> float:
        if precision == "fp8":
            if self.fp8_tflops <= 0:
                raise ConfigError(f"{self.name} has no FP8 tensor cores; use precision 'bf16'")
            return self.fp8_tflops
        return self.bf16_tflops


_NV = "NVIDIA {} datasheet"
GPU_PRESETS: dict[str, GPUSpec] = {g.name: g for g in [
    # memory_gib: the total nvidia-smi / rocm-smi reports where known (40,536 MiB on A100-40GB,
    # 81,920 MiB on A100-80GB, 81,559 MiB on H100, 143,771 MiB on H200), else the datasheet's GB.
    GPUSpec("A100-40GB", 39.59, 312, 0, 1.555, 300, 25, 8,
            _NV.format("A100 Tensor Core GPU (SXM4)") + "; DGX A100: 8x 200 Gb/s HDR per node"),
    GPUSpec("A100-80GB", 80.0, 312, 0, 2.039, 300, 25, 8,
            _NV.format("A100 Tensor Core GPU (SXM4 80GB)") + "; DGX A100: 8x 200 Gb/s HDR per node"),
    GPUSpec("H100-80GB", 79.65, 989.4, 1978.9, 3.35, 450, 50, 8,
            _NV.format("H100 Tensor Core GPU (SXM5)") + "; NVLink 4 900 GB/s bidirectional; "
            "DGX H100: 8x 400 Gb/s NDR per node"),
    GPUSpec("H200-141GB", 140.4, 989.4, 1978.9, 4.8, 450, 50, 8,
            _NV.format("H200 Tensor Core GPU (SXM)")),
    GPUSpec("B200", 167.6, 2250, 4500, 8.0, 900, 50, 8,
            _NV.format("DGX B200 (72 PF FP8 / 8 GPUs, 1,440 GB HBM3e, NVLink 5 1.8 TB/s)")
            + "; 8x 400 Gb/s ConnectX-7 per node"),
    GPUSpec("GB200", 173.2, 2500, 5000, 8.0, 900, 100, 72,
            _NV.format("GB200 NVL72 (per GPU: 186 GB HBM3e, 8 TB/s, NVLink 5 1.8 TB/s; 72-GPU NVLink domain)")
            + "; 800 Gb/s ConnectX-8 per GPU"),
    GPUSpec("MI300X", 178.8, 1307.4, 2614.9, 5.3, 448, 50, 8,
            "AMD Instinct MI300X datasheet (192 GB HBM3, 5.3 TB/s, 7x 64 GB/s Infinity Fabric links)"),
]}


def gpu_from_name(name: str) -> GPUSpec:
    for key, gpu in GPU_PRESETS.items():
        if key.lower() == name.strip().lower():
            return gpu
    raise ConfigError(f"unknown GPU preset {name!r}; choose one of: {', '.join(GPU_PRESETS)} "
                      "or give an object with name, memory_gib, bf16_tflops, fp8_tflops, hbm_tbps")


@dataclass(frozen=True)
class ClusterSpec:
    gpu: GPUSpec
    nodes: int = 1
    gpus_per_node: int = 0       # 0: the GPU preset's
    intra_node_gbps: float = 0.0  # 0: the GPU preset's
    inter_node_gbps: float = 0.0  # 0: the GPU preset's

    def __post_init__(self):
        for key in ("gpus_per_node", "intra_node_gbps", "inter_node_gbps"):
            if not getattr(self, key):
                object.__setattr__(self, key, getattr(self.gpu, key))
        p: list[str] = []
        require(p, self.nodes >= 1, f"hardware.nodes must be >= 1 (got {self.nodes})")
        require(p, self.gpus_per_node >= 1, f"hardware.gpus_per_node must be >= 1 (got {self.gpus_per_node})")
        require(p, self.intra_node_gbps > 0 and self.inter_node_gbps > 0,
                "hardware.intra_node_gbps and inter_node_gbps must be positive")
        if p:
            raise ConfigError(p)

    @property
    def world(self) -> int:
        return self.nodes * self.gpus_per_node
