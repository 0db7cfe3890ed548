"""The memory suite: one rank of a large layout on one device, with the fake process group.

`torch.testing._internal.distributed.fake_pg` makes every collective a no-op while each rank's
shards keep their real shapes, so one process can be rank r of a 64-GPU layout: its parameters,
gradients and optimizer state are exactly that rank's, and (on a GPU) the allocator's peak is
what that rank would allocate, minus communication buffers. This checks the memory model of
multi-GPU layouts on one GPU (torchtitan's memory estimation does the same).

Numbers reported (GiB, 2^30 bytes): the rank's parameter, gradient and optimizer-state bytes,
counted from the tensors after one step, and on CUDA the peak allocated and reserved. On CPU the
allocator has no peak counter, so only the exact state bytes are reported. Pipeline parallelism
is not covered (a stage needs its neighbours' activations).
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from calculators.specs.errors import ConfigError

from . import host, predict, results
from .config import RunSpec


def _local_bytes(t) -> int:
    if t is None:
        return 0
    local = t.to_local() if hasattr(t, "to_local") else t
    return local.numel() * local.element_size()


def _state_gib(parts, opt) -> dict:
    params = [p for m in parts for p in m.parameters()]
    opt_bytes = sum(_local_bytes(v) for s in opt.state.values() for v in s.values() if torch.is_tensor(v) and v.dim())
    return {"params_gib": sum(_local_bytes(p) for p in params) / 2**30,
            "grads_gib": sum(_local_bytes(p.grad) for p in params) / 2**30,
            "optimizer_gib": opt_bytes / 2**30}


def run_memory(run: RunSpec, world: int, rank: int, out: str | None) -> dict:
    from torch.testing._internal.distributed.fake_pg import FakeStore

    from .train import Trainer
    device = host.pick_device(run.device, host.Grid(rank, world, 0, 1))
    status, error, metrics, prediction, config = "ok", "", {}, {}, run.as_dict() | {"world": world, "rank": rank}
    g = host.Grid(rank, world, rank % min(world, 8), min(world, 8))
    try:
        if run.pp > 1:
            raise ConfigError("the memory suite does not cover pipeline parallelism: use pp=1")
        if not 0 <= rank < world:
            raise ConfigError(f"rank {rank} must be in [0, {world})")
        dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world)
        spec, par = run.spec(), run.parallel(world)
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        trainer = Trainer(spec, run, par, g, device)
        trainer.step(0, spec.vocab)
        # after a step the gradients are freed (set_to_none); run one more backward to count them
        # without stepping, so params, grads and optimizer state are all live at once
        tokens = torch.zeros(run.mbs, run.seq, dtype=torch.long, device=device)
        with trainer._context(tokens):             # CP shards the tokens and the rope table alike
            out_ = trainer.parts[0](tokens)
            out_.float().sum().backward()
        metrics = _state_gib(trainer.parts, trainer.opt)
        if device.type == "cuda":
            metrics.update(peak_allocated_gib=torch.cuda.max_memory_allocated(device) / 2**30,
                           peak_reserved_gib=torch.cuda.max_memory_reserved(device) / 2**30)
        hw = {"gpu": host.gpu_preset(device) or "H100-80GB", "nodes": max(1, world // 8), "gpus_per_node": min(world, 8)}
        config["scenario"] = predict.scenario(run, hw, world)
        prediction = predict.train(config["scenario"])
    except torch.OutOfMemoryError as exc:
        status, error = "oom", str(exc).splitlines()[0]
    except ConfigError as exc:
        status, error = "error", str(exc)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    row = results.make_row("memory", config, status, metrics=metrics, prediction=prediction,
                           host=host.facts(device, g), error=error)
    if out:
        results.append(out, row)
    return row
