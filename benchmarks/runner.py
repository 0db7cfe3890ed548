"""Run one case of any suite and record it: the measurement, the prediction, and an honest status.

Every rank runs the case; rank 0 appends the row. A layout that cannot run (bad sizes, an
unsupported combination) is recorded as status `error` with the message that says what to
change; running out of GPU memory is status `oom`, not a crash, and the sweep goes on.
"""
from __future__ import annotations

import gc
import sys
import time
import traceback

import torch
import torch.distributed as dist

from calculators.specs.errors import ConfigError

from . import host, results
from .config import RunSpec
from .groups import run_fields


def _suite_fn(suite: str):
    if suite == "train":
        from .train import measure
        return measure
    if suite == "collectives":
        from .collectives import measure
        return measure
    if suite == "gemm":
        from .gemm import measure
        return measure
    if suite == "attention":
        from .attention import measure
        return measure
    if suite == "moe":
        from .moe import measure
        return measure
    raise ConfigError(f"suite {suite!r} cannot run in a sweep; choose train, collectives, gemm, attention or moe")


def run_case(suite: str, config: dict, out: str | None, g: host.Grid, device: torch.device) -> dict:
    """Measure `config` with `suite` on this process grid; rank 0 appends the row to `out`.
    Launch fields (world, nodes ...: groups.py) are where the config runs, not what: the key
    keeps them, the suite and the recorded config do not (host facts say where it ran)."""
    asked, config = config, run_fields(config)
    status, error, metrics, prediction, recorded = "ok", "", {}, {}, dict(config)
    try:
        if suite == "train":
            from .train import predict, scenario_of
            run = RunSpec.from_dict(config)
            recorded = run.as_dict()
            # the prediction first, so that a run that runs out of memory still carries it
            recorded["scenario"] = scenario_of(run, g, device)
            prediction = predict(recorded["scenario"])
            metrics, _ = _suite_fn(suite)(run, g, device)
        else:
            metrics, prediction = _suite_fn(suite)(config, g, device)
    except torch.OutOfMemoryError as exc:
        status, error = "oom", str(exc).splitlines()[0]
    except ConfigError as exc:
        status, error = "error", str(exc)
    except Exception as exc:            # a failed run is a result too; the sweep continues
        status, error = "error", f"{type(exc).__name__}: {exc}"
        if g.rank == 0:
            traceback.print_exc(file=sys.stderr)
    finally:
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
    row = results.make_row(suite, recorded, status, metrics=metrics, prediction=prediction,
                           host=host.facts(device, g), error=error)
    row["key"] = results.run_key(suite, asked)      # the key of what was asked, for resuming
    if out and g.rank == 0:
        results.append(out, row)
    return row


def summary(row: dict) -> str:
    m, cfg = row["metrics"], row["config"]
    what = cfg.get("name") or " ".join(f"{k}={cfg[k]}" for k in ("model", "tp", "pp", "zero", "schedule")
                                       if k in cfg) or row["suite"]
    if row["status"] != "ok":
        return f"{row['suite']} {what}: {row['status']}: {row.get('error', '')}"
    if row["suite"] == "train":
        return (f"train {what}: {m['step_time_s'] * 1e3:.1f} ms/step, {m['tokens_per_s_per_gpu']:.0f} tok/s/GPU, "
                f"MFU {m['mfu']:.1%}, loss {m['losses'][0]:.3f} -> {m['losses'][-1]:.3f}")
    p = row["prediction"]
    if row["suite"] == "collectives":
        return (f"{m['op']} {m['bytes']:.3g} B over {m['group_size']} ranks ({cfg.get('placement')}): busbw "
                f"{m['busbw_gbps']:.2f} GB/s, predicted {p.get('busbw_gbps', float('nan')):.2f}")
    if row["suite"] == "gemm":
        return (f"gemm {cfg.get('name', '')} {m['m']}x{m['n']}x{m['k']} {m['dtype']}: {m['tflops']:.2f} TFLOP/s, "
                f"predicted {p.get('tflops', float('nan')):.2f}")
    if row["suite"] == "attention":
        return (f"attention {m['backend']} seq {m['seq']} hd {m['head_dim']} heads {m['heads']}/{m['kv_heads']} "
                f"({m['gqa_mode']}){' causal' if m['causal'] else ''}: forward {m['forward_tflops']:.0f} TFLOP/s "
                f"(predicted {p.get('forward_tflops', float('nan')):.0f}), backward {m['backward_tflops']:.0f} "
                f"(predicted {p.get('backward_tflops', float('nan')):.0f})")
    if row["suite"] == "moe":
        parts = [f"{part} {m[part + '_s'] * 1e3:.3g} ms (predicted {p.get(part + '_s', float('nan')) * 1e3:.3g})"
                 for part in ("router", "permute", "experts", "experts_loop") if part + "_s" in m]
        return f"moe {what}, forward + backward: " + ", ".join(parts)
    return f"{row['suite']} {what}: ok"


class Progress:
    """A one-line progress bar on rank 0 (stderr): done/total, elapsed, estimated time left."""

    def __init__(self, total: int, rank: int):
        self.total, self.done, self.rank, self.t0 = total, 0, rank, time.perf_counter()

    def update(self, line: str) -> None:
        self.done += 1
        if self.rank:
            return
        elapsed = time.perf_counter() - self.t0
        left = elapsed / self.done * (self.total - self.done)
        width = 20
        bar = "#" * (width * self.done // max(1, self.total))
        print(f"[{bar:<{width}}] {self.done}/{self.total} {elapsed:.0f}s elapsed, ~{left:.0f}s left | {line}",
              file=sys.stderr, flush=True)


def barrier() -> None:
    if dist.is_initialized():
        dist.barrier()
