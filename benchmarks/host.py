"""Where a run happens: the process grid from torchrun's environment, the device, host facts for
the result row, and the calculators' hardware description of this machine (for the prediction).
"""
from __future__ import annotations

import dataclasses
import os
import time
from dataclasses import dataclass
from functools import lru_cache

import torch
import torch.distributed as dist

from calculators.specs.errors import ConfigError
from calculators.specs.hardware import GPU_PRESETS


@dataclass(frozen=True)
class Grid:
    rank: int
    world: int
    local_rank: int
    local_world: int
    launcher: str = "none"        # what started the ranks: torchrun, ray (Ray Train) or none (one process)

    @property
    def nodes(self) -> int:
        return max(1, self.world // self.local_world)


def grid() -> Grid:
    """torchrun's RANK / WORLD_SIZE / LOCAL_RANK / LOCAL_WORLD_SIZE; one process without them."""
    env = os.environ
    return Grid(int(env.get("RANK", 0)), int(env.get("WORLD_SIZE", 1)), int(env.get("LOCAL_RANK", 0)),
                int(env.get("LOCAL_WORLD_SIZE", env.get("WORLD_SIZE", 1))),
                "torchrun" if "WORLD_SIZE" in env else "none")


def pick_device(name: str, g: Grid) -> torch.device:
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError("--device cuda asked for, but PyTorch sees no GPU; use --device cpu")
        torch.cuda.set_device(g.local_rank)
        return torch.device("cuda", g.local_rank)
    if name != "cpu":
        raise ConfigError(f"device must be auto, cpu or cuda (got {name!r})")
    torch.set_num_threads(1)              # one thread per rank: ranks share the cores
    return torch.device("cpu")


def init_distributed(g: Grid, device: torch.device) -> None:
    if g.world > 1 and not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo", device_id=device if
                                device.type == "cuda" else None)


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def facts(device: torch.device, g: Grid) -> dict:
    out = {"device": device.type, "gpus": g.world, "nodes": g.nodes, "torch": torch.__version__,
           "launcher": g.launcher}
    if "SLURM_JOB_ID" in os.environ:         # the job's accounting (sacct) tells its nodes and times
        out["slurm_job"] = os.environ["SLURM_JOB_ID"]
    if device.type == "cuda":
        out.update(gpu=torch.cuda.get_device_name(device), cuda=torch.version.cuda,
                   nccl=".".join(map(str, torch.cuda.nccl.version())))
        # the caching allocator's settings set how far peak reserved sits above peak allocated
        # (torchtitan's launcher turns on expandable segments)
        alloc = os.environ.get("PYTORCH_ALLOC_CONF") or os.environ.get("PYTORCH_CUDA_ALLOC_CONF")
        if alloc:
            out["alloc_conf"] = alloc[:200]
    else:
        out["gpu"] = "cpu"
    return out


def gpu_preset(device: torch.device) -> str | None:
    """The calculators' GPU preset for this device, matched on its name and memory."""
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device).upper()
    gib = torch.cuda.get_device_properties(device).total_memory / 2**30
    for key in ("GB300", "GB200", "B200", "H200", "H100", "MI300X", "A100"):
        if key in name:
            matches = [p for p in GPU_PRESETS if p.upper().startswith(key)]
            return min(matches, key=lambda p: abs(GPU_PRESETS[p].memory_gib - gib)) if matches else None
    return None


@lru_cache(maxsize=1)
def cpu_tflops() -> float:
    """Measured fp32 matmul TFLOP/s of one CPU thread: the 'peak' a CPU run's prediction uses."""
    a = torch.randn(512, 512)
    a @ a
    t0 = time.perf_counter()
    for _ in range(8):
        a @ a
    return 8 * 2 * 512**3 / (time.perf_counter() - t0) / 1e12


def hardware(device: torch.device, g: Grid) -> dict:
    """The calculators' `hardware` object for this machine."""
    preset = gpu_preset(device)
    if preset:
        return {"gpu": preset, "nodes": g.nodes, "gpus_per_node": g.local_world}
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        raise ConfigError(f"no calculators GPU preset matches {props.name}; predictions need one "
                          f"(see calculators/specs/hardware.py)")
    tflops = cpu_tflops()
    gpu = {"name": "cpu", "memory_gib": os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30,
           "bf16_tflops": tflops, "fp8_tflops": 0.0, "hbm_tbps": 0.02,
           "intra_node_gbps": 5.0, "inter_node_gbps": 1.0}
    return {"gpu": gpu, "nodes": g.nodes, "gpus_per_node": g.local_world}


def peak_tflops(hw: dict, precision: str) -> float:
    gpu = hw["gpu"]
    if isinstance(gpu, str):
        spec = GPU_PRESETS[gpu]
        return spec.fp8_tflops if precision == "fp8" else spec.bf16_tflops
    return gpu["bf16_tflops"]


def model_ref(spec) -> dict:
    """The calculators' `model` object for a ModelSpec (its full shape: presets can change)."""
    d = dataclasses.asdict(spec)
    d.pop("source", None)
    return d
