"""GPU and cluster specs: a data table with a source per row, not magic numbers.

Conventions: TFLOP/s are dense (no 2:4 sparsity); bandwidths are per GPU, one direction, GB/s
(1e9 bytes/s); memory is what the driver exposes, in GiB (2^30 bytes).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from . import limits
from .errors import ConfigError, require
from .validate import check_fields, link, show


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
    host_gbps: float = 0.0       # GPU <-> host memory, one direction, GB/s; 0: DEFAULT_HOST_GBPS

    def __post_init__(self):
        p = check_fields(self, "hardware.gpu", limits.GPU, texts=("name",))
        for key in ("intra_node_gbps", "inter_node_gbps", "host_gbps"):
            link(p, f"hardware.gpu.{key}", getattr(self, key))
        if p:
            raise ConfigError(p)

    @property
    def host_link_gbps(self) -> float:
        """GPU <-> host memory, one direction, GB/s: the preset's measured copy rate, else a PCIe
        Gen5 x16 link's (DEFAULT_HOST_GBPS)."""
        return self.host_gbps or DEFAULT_HOST_GBPS

    def peak_tflops(self, precision: str) -> float:
        if precision == "fp8":
            if self.fp8_tflops <= 0:
                raise ConfigError(f"{self.name} has no FP8 tensor cores; use precision 'bf16'")
            return self.fp8_tflops
        return self.bf16_tflops


_NV = "NVIDIA {} datasheet"
GPU_PRESETS: dict[str, GPUSpec] = {g.name: g for g in [
    # memory_gib: the total the driver reports (nvidia-smi's memory.total, rocm-smi's VRAM total):
    # 40,536 MiB on A100-40GB, 81,920 MiB on A100-80GB, 81,559 MiB on H100, 143,771 MiB on H200,
    # 183,359 MiB on B200 (AWS Deep Learning AMI Developer Guide, "Software requirements for P6
    # instances", its nvidia-smi example on p6-b200), 189,471 MiB on GB200 and 284,208 MiB on GB300
    # (nvidia-smi on NVL72 compute trays, drivers 570 to 595, in public tray logs), 205,822,885,888
    # bytes on MI300X (rocm-smi --showmeminfo vram). Blackwell and MI300X expose more than their
    # datasheets' decimal GB (180, 186, 288, 192) read as bytes: taking those put them 7% short.
    GPUSpec("A100-40GB", 39.59, 312, 0, 1.555, 300, 25, 8,
            _NV.format("A100 Tensor Core GPU (SXM4)") + "; DGX A100: 8x 200 Gb/s HDR per node"),
    GPUSpec("A100-80GB", 80.0, 312, 0, 2.039, 300, 25, 8,
            _NV.format("A100 Tensor Core GPU (SXM4 80GB)") + "; DGX A100: 8x 200 Gb/s HDR per node"),
    GPUSpec("H100-80GB", 79.65, 989.4, 1978.9, 3.35, 450, 50, 8,
            _NV.format("H100 Tensor Core GPU (SXM5)") + "; NVLink 4 900 GB/s bidirectional; "
            "DGX H100: 8x 400 Gb/s NDR per node"),
    # H800: H100 SXM compute and memory, its NVLink cut to 400 GB/s bidirectional (200 one way);
    # DeepSeek-V3's cluster: one 400 Gb/s InfiniBand NIC per GPU (technical report, section 3.1)
    GPUSpec("H800", 79.65, 989.4, 1978.9, 3.35, 200, 50, 8,
            _NV.format("H800 SXM5 (H100 compute, NVLink 400 GB/s bidirectional)")
            + "; DeepSeek-V3 report (arXiv 2412.19437) section 3.1: 8x 400 Gb/s InfiniBand per node"),
    GPUSpec("H200-141GB", 140.4, 989.4, 1978.9, 4.8, 450, 50, 8,
            _NV.format("H200 Tensor Core GPU (SXM)")),
    GPUSpec("B200", 179.06, 2250, 4500, 8.0, 900, 50, 8,
            _NV.format("DGX B200 (72 PF FP8 / 8 GPUs, 1,440 GB HBM3e, NVLink 5 1.8 TB/s)")
            + "; 8x 400 Gb/s ConnectX-7 per node"),
    GPUSpec("GB200", 185.03, 2500, 5000, 8.0, 900, 100, 72,
            _NV.format("GB200 NVL72 (per GPU: 186 GB HBM3e, 8 TB/s, NVLink 5 1.8 TB/s; 72-GPU NVLink domain)")
            + "; 800 Gb/s ConnectX-8 per GPU"),
    # GB300 (Blackwell Ultra): the GB200's dense bf16 and FP8 peaks, twice its softmax exponential
    # rate (what its attention kernels gain), 288 GB, 1,400 W
    GPUSpec("GB300", 277.55, 2500, 5000, 8.0, 900, 100, 72,
            _NV.format("GB300 NVL72 (rack: 180 PF bf16 and 360 PF FP8 dense over 72 GPUs; per GPU 288 GB HBM3e, "
                       "8 TB/s, NVLink 5 1.8 TB/s; 72-GPU NVLink domain)") + "; 800 Gb/s ConnectX-8 per GPU"),
    GPUSpec("MI300X", 191.69, 1307.4, 2614.9, 5.3, 448, 50, 8,
            "AMD Instinct MI300X datasheet (192 GB HBM3, 5.3 TB/s, 7x 64 GB/s Infinity Fabric links)"),
]}

# GPU <-> host memory copies, GB/s one direction (the lower of host-to-device and device-to-host),
# nvbandwidth and TransferBench in Azure's AI benchmarking guide (Azure_Results/ND_*_results.md,
# github.com/egmsft/AI-benchmarking-guide at 3371c0c): H100 51 (PCIe Gen5 x16), GB200 193 and GB300
# 193 (NVLink-C2C to the Grace CPU), MI300X 55. H800, H200 and B200 sit on the same PCIe Gen5 x16
# link as H100 and take its rate; A100's Gen4 link half of it. One GPU copying alone: GPUs that
# share a PCIe switch or the host's memory bandwidth get less each (not modelled).
DEFAULT_HOST_GBPS = 51.0
_HOST_GBPS = {"A100-40GB": 25.5, "A100-80GB": 25.5, "H100-80GB": 51.0, "H800": 51.0, "H200-141GB": 51.0,
              "B200": 51.0, "GB200": 193.0, "GB300": 193.0, "MI300X": 55.0}
GPU_PRESETS = {name: replace(g, host_gbps=_HOST_GBPS[name]) for name, g in GPU_PRESETS.items()}

# Presets by architecture where the attention kernels' measurements differ
# (calculators/time/attention.py): Hopper's rows (FlashAttention-3, cuDNN) and Blackwell's (cuDNN).
# The H800 is an H100 but for its NVLink, so it runs Hopper's kernels.
HOPPER = ("H100-80GB", "H200-141GB", "H800")
BLACKWELL = ("B200", "GB200", "GB300")
AMD = ("MI300X",)


def gpu_from_name(name: str) -> GPUSpec:
    for key, gpu in GPU_PRESETS.items():
        if isinstance(name, str) and key.lower() == name.strip().lower():
            return gpu
    raise ConfigError(f"unknown GPU preset {show(name)}; choose one of: {', '.join(GPU_PRESETS)} "
                      "or give an object with name, memory_gib, bf16_tflops, fp8_tflops, hbm_tbps")


# A custom GPU object may leave out its network (shared/DESIGN.md): then it gets a DGX H100-class
# node's, NVLink 4 (450 GB/s per GPU, one way) and one 400 Gb/s NIC per GPU (50 GB/s).
DEFAULT_NETWORK = {"gpus_per_node": 8, "intra_node_gbps": 450.0, "inter_node_gbps": 50.0}


# The host memory traffic per node that an offloaded optimizer's step sustains (parallel.optimizer_offload),
# GB/s: the parameters stepped on the node's host times the bytes their step moves there
# (memory/host.py, HOST_STEP_BYTES) over the seconds it took. Fitted on one run: ALST's 8 x H100
# baseline (arXiv 2506.13996, Table 1: Llama 3.1 8B, DeepSpeed ZeRO-3 with its optimizer on the CPU,
# seq 32K, 17 s an iteration) leaves 8.6 s beyond this model's GPU step, for 8.0B parameters at 34 B
# each: 32 GB/s. Far below a server's memory bandwidth (400 to 600 GB/s on a two-socket DGX): the
# step is bound by its threads (DeepSpeed's CPU Adam runs OpenMP threads in every rank, unbound
# unless --bind_cores_to_rank) and by the cores a job gets. Public reports run about 2x either way
# (DeepSpeed issue #6834: a 72B model over 4 x 8 A100 with everything offloaded stepped in about 10 s,
# some 60 GB/s per node): set hardware.host_optimizer_gbps from a measured step where it matters.
DEFAULT_HOST_OPTIMIZER_GBPS = 32.0


@dataclass(frozen=True)
class ClusterSpec:
    gpu: GPUSpec
    nodes: int = 1
    gpus_per_node: int = 0       # 0: the GPU preset's
    intra_node_gbps: float = 0.0  # 0: the GPU preset's
    inter_node_gbps: float = 0.0  # 0: the GPU preset's
    host_optimizer_gbps: float = 0.0  # host memory traffic a node's CPU optimizer sustains (offloaded optimizer
                                      # steps), GB/s; 0: DEFAULT_HOST_OPTIMIZER_GBPS

    def __post_init__(self):
        p = check_fields(self, "hardware", limits.CLUSTER)
        for key in ("intra_node_gbps", "inter_node_gbps", "host_optimizer_gbps"):
            link(p, f"hardware.{key}", getattr(self, key))
        if not isinstance(self.gpu, GPUSpec):
            p.append("hardware.gpu must be a GPU preset id or an object with name, memory_gib, bf16_tflops, "
                     "fp8_tflops, hbm_tbps")
        if p:
            raise ConfigError(p)
        # 0: the GPU's own figures; a custom GPU without them gets DEFAULT_NETWORK's (its source says whose)
        for key in ("gpus_per_node", "intra_node_gbps", "inter_node_gbps"):
            if not getattr(self, key):
                object.__setattr__(self, key, getattr(self.gpu, key) or DEFAULT_NETWORK[key])
        require(p, self.nodes * self.gpus_per_node <= limits.MAX_GPUS,
                lambda: f"hardware: {self.nodes:,} nodes x {self.gpus_per_node} GPUs = "
                        f"{self.nodes * self.gpus_per_node:,} GPUs; the limit is {limits.MAX_GPUS:,}")
        if p:
            raise ConfigError(p)

    @property
    def world(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def host_optimizer_rate(self) -> float:
        """Host memory traffic a node's offloaded optimizer step sustains, bytes/s."""
        return (self.host_optimizer_gbps or DEFAULT_HOST_OPTIMIZER_GBPS) * 1e9
