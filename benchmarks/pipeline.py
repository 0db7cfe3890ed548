"""Pipeline parallelism with torch.distributed.pipelining: which stages a rank holds, which layers
a stage holds, and the schedule that runs them.

Stage placement (p pipeline ranks, S stages):
- gpipe, 1f1b: one stage per rank, S = p;
- interleaved: v stages per rank, looped: rank r holds r, r+p, r+2p ... (S = v*p);
- zb (ZBV zero bubble) and dualpipe (DualPipeV): two stages per rank in a V: rank r holds r and
  2p-1-r, so the first and the last stage share rank 0 (S = 2p).

    >>> stage_ids(rank=1, p=4, schedule="interleaved", vpp=2)
    [1, 5]
    >>> stage_ids(rank=1, p=4, schedule="zb", vpp=1)
    [1, 6]
    >>> stage_layers(layers=10, stages=4, split=())
    [[0, 1, 2], [3, 4, 5], [6, 7], [8, 9]]
"""
from __future__ import annotations

import torch
from torch.distributed.pipelining import (PipelineStage, Schedule1F1B, ScheduleDualPipeV, ScheduleGPipe,
                                          ScheduleInterleaved1F1B, ScheduleZBVZeroBubble)

from benchmarks.config import stage_ids, stage_layers, stages_per_rank   # torch-free, so the run spec can use them
from calculators.specs.errors import ConfigError

SCHEDULES = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B, "interleaved": ScheduleInterleaved1F1B,
             "zb": ScheduleZBVZeroBubble, "dualpipe": ScheduleDualPipeV}
MULTI = ("interleaved", "zb", "dualpipe")   # schedules that take a list of stages per rank
__all__ = ["SCHEDULES", "MULTI", "stage_ids", "stage_layers", "stages_per_rank", "check", "trim_to_stage",
           "build_schedule"]


def check(run, model_layers: int, microbatches: int, p: int) -> None:
    problems = []
    if run.split and run.schedule in ("zb", "dualpipe"):
        problems.append(f"--split gives layers per stage in order (gpipe, 1f1b, interleaved); {run.schedule} "
                        "folds its stages into a V: drop --split or change the schedule")
    elif run.split and len(run.split) != p * stages_per_rank(run.schedule, run.vpp):
        problems.append(f"--split lists {len(run.split)} stages; pp={p}"
                        + (f" x vpp={run.vpp}" if run.schedule == "interleaved" else "")
                        + f" needs {p * stages_per_rank(run.schedule, run.vpp)}")
    if run.schedule != "interleaved" and run.vpp != 1:
        problems.append(f"vpp={run.vpp} needs --schedule interleaved")
    if run.schedule in ("zb", "dualpipe") and microbatches < 2 * p:
        problems.append(f"{run.schedule} needs at least 2*pp = {2 * p} micro-batches per step, got {microbatches}: "
                        f"raise gbs or lower mbs")
    if run.schedule == "interleaved" and microbatches % p:
        problems.append(f"interleaved needs micro-batches ({microbatches}) divisible by pp={p}")
    if run.compile and run.schedule in ("zb", "dualpipe"):
        problems.append(f"{run.schedule} splits backward into input and weight parts, which torch.compile does not support")
    if problems:
        raise ConfigError(problems)


def trim_to_stage(model, stage: int, n_stages: int, layers: list[int]):
    """Delete what stage `stage` does not hold (the model is on the meta device: nothing is freed)."""
    keep = {str(i) for i in layers}
    for name in list(model.layers.keys()):
        if name not in keep:
            del model.layers[name]
    if stage > 0:
        model.tok_embeddings = None
    if stage < n_stages - 1:
        model.norm = None
        model.output = None
    return model


def build_schedule(modules: list, ids: list[int], n_stages: int, pp_group, device: torch.device,
                   schedule: str, microbatches: int, loss_fn):
    stages = [PipelineStage(m, i, n_stages, device, group=pp_group) for m, i in zip(modules, ids)]
    cls = SCHEDULES[schedule]
    # scale_grads: gradients are averaged over micro-batches, as gradient accumulation does
    if schedule in MULTI:
        return cls(stages, n_microbatches=microbatches, loss_fn=loss_fn, scale_grads=True)
    return cls(stages[0], n_microbatches=microbatches, loss_fn=loss_fn, scale_grads=True)
