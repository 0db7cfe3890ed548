"""Goodput at scale: the share of a training run's wall-clock time that trains, once failures,
checkpoints and restarts are paid.

A synchronous job stops when any of its GPUs fails, and restarts from its last checkpoint:

    M   = 1 / (failure rate per GPU-day x N GPUs)          job's mean time between failures
    δ   = checkpoint bytes / storage bandwidth              time to write one checkpoint (blocking)
    R   = restart + checkpoint bytes / storage bandwidth    time from a failure to training again
    τ   = sqrt(2 δ M)                                       checkpoint interval (Young 1974), with
          Daly's higher-order terms (Daly 2006)
    T_wall / T_work = (M / τ) e^(R/M) (e^((τ+δ)/M) - 1)     expected wall time per unit of work, for
                                                            exponential failures (Daly 2006)

Young, A first order approximation to the optimum checkpoint interval, CACM 17(9), 1974; Daly, A
higher order estimate of the optimum checkpoint interval for restart dumps, FGCS 22(3), 2006.
    goodput = T_work / T_wall

Worked example (the defaults, Llama 3 405B on 16,384 H100s): M = 3.1 h; a 5.7 TB checkpoint
(405B x 14 bytes, Megatron's layout) at 2 TB/s takes δ = 2.8 s, so τ = 4.2 min, R = 10 min, and
goodput is 93%: close to the "more than 90% effective training time" the Llama 3 paper reports.

Defaults and their sources:
- failures: 419 unexpected interruptions in 54 days of Llama 3 405B pre-training on 16,384 H100s
  (Dubey et al. 2024, The Llama 3 Herd of Models, section 3.3.4 and Table 5): 4.74e-4 per
  GPU-day. The 47 planned interruptions (upgrades) are left out: they can follow a checkpoint.
- storage: 2 TB/s, the sustained throughput of the Tectonic file system Llama 3 checkpointed to
  (same paper, section 3.3.1).
- restart: 10 minutes. The paper does not give one; its more than 90% effective training time with
  466 interruptions in 54 days leaves at most 17 minutes lost per interruption, the restart and
  the work since the last checkpoint together.

Not modelled: asynchronous checkpointing (which hides most of δ), in-memory or peer checkpoints,
failures that correlate (a switch, a power domain), stragglers, and a cluster's storage bandwidth
falling with its size (set checkpoint_gbps to yours).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ..specs.errors import ConfigError
from ..specs.frameworks import bytes_per_param
from ..specs.models import ModelSpec

LLAMA3_FAILURES, LLAMA3_DAYS, LLAMA3_GPUS = 419, 54, 16_384
FAILURES_PER_GPU_DAY = LLAMA3_FAILURES / (LLAMA3_DAYS * LLAMA3_GPUS)
CHECKPOINT_GBPS = 2000.0         # GB/s, aggregate, Tectonic's sustained throughput (Llama 3 section 3.3.1)
RESTART_S = 600.0
MIN_GOODPUT = 0.01               # below this a run makes almost no progress: an error, not a number
DAY_S = 86_400.0


@dataclass(frozen=True)
class Goodput:
    goodput: float               # training time over wall time, 0..1
    mtbf_s: float                # the job's mean time between failures (inf: no failures)
    checkpoint_gb: float         # one checkpoint, GB (1e9 bytes)
    write_s: float               # δ
    restore_s: float             # reading it back after a failure
    interval_s: float            # τ, seconds of training between checkpoints (inf: none needed)
    restart_s: float

    def as_dict(self) -> dict:
        finite = lambda x: x if math.isfinite(x) else None        # noqa: E731 - JSON has no infinity
        return {"goodput": self.goodput, "mtbf_h": finite(self.mtbf_s / 3600), "checkpoint_gb": self.checkpoint_gb,
                "write_s": self.write_s, "restore_s": self.restore_s, "interval_s": finite(self.interval_s),
                "restart_s": self.restart_s}


def checkpoint_bytes(model: ModelSpec, framework: str = "megatron", zero: int = 1, master: str = "fp32") -> float:
    """Weights and optimizer state in the framework's layout (frameworks.bytes_per_param), every
    parameter once: sharded or not, the ranks together write one copy. Megatron: bf16 weights, fp32
    master weights and two Adam moments, 14 bytes per parameter (12 with its precision-aware
    optimizer's remainders, `master`, whose bf16 moments it saves in fp32); FSDP2: fp32 weights and
    moments, 12. Gradients are not saved."""
    layout = bytes_per_param(framework, zero, master=master)
    return model.total_params * sum(max(layout[role]) for role in ("weights", "master", "optimizer"))


def young_daly_interval(write_s: float, mtbf_s: float) -> float:
    """Seconds of work between checkpoints: Young's sqrt(2 δ M) with Daly's higher-order terms,
    and M itself once a checkpoint takes as long as two MTBFs (Daly 2006)."""
    if not math.isfinite(mtbf_s):
        return math.inf
    if write_s >= 2 * mtbf_s:
        return mtbf_s
    x = write_s / (2 * mtbf_s)
    return math.sqrt(2 * write_s) * math.sqrt(mtbf_s) * (1 + math.sqrt(x) / 3 + x / 9) - write_s   # no overflow


def goodput(model: ModelSpec, gpus: int, framework: str = "megatron", zero: int = 1,
            failures_per_gpu_day: float = FAILURES_PER_GPU_DAY, checkpoint_gbps: float = CHECKPOINT_GBPS,
            restart_s: float = RESTART_S, interval_s: float | None = None, master: str = "fp32") -> Goodput:
    """The expected goodput of a run of `model` on `gpus` GPUs (Daly's complete model, above);
    `interval_s` None takes the optimal interval. ConfigError when failures come so often that the
    run would make almost no progress (goodput under MIN_GOODPUT)."""
    size = checkpoint_bytes(model, framework, zero, master)
    write = size / (checkpoint_gbps * 1e9)
    rate = failures_per_gpu_day * gpus / DAY_S                  # job failures per second
    mtbf = 1 / rate if rate > 0 else math.inf
    tau = interval_s if interval_s is not None else young_daly_interval(write, mtbf)
    lost = restart_s + write                                   # a restart reads the checkpoint back
    if math.isinf(mtbf) or math.isinf(tau) or (tau + write) / mtbf == 0:   # no failures, or too few to count
        share = 1.0 if math.isinf(tau) else tau / (tau + write)   # only the writes cost
    else:
        # log of T_wall / T_work, so that a hopeless case is a small number, not an overflow
        log_ratio = math.log(mtbf / tau) + lost / mtbf + _log_expm1((tau + write) / mtbf)
        share = math.exp(-log_ratio) if log_ratio < 700 else 0.0
    if share < MIN_GOODPUT:
        raise ConfigError(f"on {gpus:,} GPUs the job fails every {mtbf / 60:,.3g} minutes on average, and a "
                          f"checkpoint takes {write:,.3g} s to write and {lost:,.3g} s to restart from: it would "
                          f"train under {MIN_GOODPUT:.0%} of the time. Use fewer GPUs, a lower failure rate "
                          "(failures_per_gpu_day), faster checkpoint storage (checkpoint_gbps) or a shorter "
                          "restart (restart_s)")
    return Goodput(min(share, 1.0), mtbf, size / 1e9, write, write, tau, restart_s)


def _log_expm1(x: float) -> float:
    """log(e^x - 1), without overflow for large x."""
    return x + math.log1p(-math.exp(-x)) if x > 30 else math.log(math.expm1(x))
