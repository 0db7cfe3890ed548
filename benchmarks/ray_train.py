"""The Ray backend: each group of a sweep is one Ray Train run (a TorchTrainer of `world` workers).

Ray Train starts the workers as actors in one placement group, sets up torch.distributed in them
(gloo on CPU, NCCL on GPUs: TorchConfig's default) and gives each its world and local rank; each
worker then runs the group's configs through runner.run_case, as a torchrun rank of `python -m
benchmarks sweep` does, on a Grid built from those ranks. Rank 0's row of each config goes, as
soon as it is made, to a small actor on the launching machine that appends it to
DIR/<group>.jsonl (results.append), so a run that dies keeps the rows it had finished; the
launcher records the configs it had not reached with the run's status: `oom` when a worker ran
out of memory (torch's or Ray's OutOfMemoryError, or a worker that Ray's memory monitor killed
"due to the node running low on memory"), else `error`.

The workers import this package as the driver does: Ray puts the driver's working directory on
their path, which on a cluster assumes the same checkout on every node; `ray job submit
--working-dir .` ships it instead (README). Ray Train keeps its run records (no checkpoints: the
harness writes none) under DIR/ray, RunConfig's storage_path.

Placement: a group that fits one node asks for STRICT_PACK (every worker on one node); a larger
one for PACK, which fills a node before using the next, and Ray Train numbers workers node by
node, so a node's ranks are neighbours as under torchrun. A failed run is not retried
(FailureConfig(max_failures=0)): the next launch resumes instead of repeating finished configs.

Sources: Ray Train with PyTorch https://docs.ray.io/en/latest/train/getting-started-pytorch.html;
ScalingConfig https://docs.ray.io/en/latest/train/api/doc/ray.train.ScalingConfig.html; placement
strategies https://docs.ray.io/en/latest/ray-core/scheduling/placement-group.html; out-of-memory
prevention https://docs.ray.io/en/latest/ray-core/scheduling/ray-oom-prevention.html.
"""
from __future__ import annotations

import sys
from pathlib import Path

from calculators.specs.errors import ConfigError

from . import results
from .groups import Group, split

INSTALL = "the ray backend needs Ray Train: pip install -r requirements-cluster.txt"


def _ray():
    try:
        import ray
        import ray.train.torch      # noqa: F401 (Ray Train's extras come with ray[train])
    except ImportError as exc:
        raise ConfigError(f"{INSTALL} ({exc})") from None
    return ray


def connect(address: str = "") -> bool:
    """Join the Ray cluster at `address` (or the one RAY_ADDRESS or `ray start` names, or start one on
    this machine); True when this call started Ray, which then is the caller's to shut down."""
    ray = _ray()
    if ray.is_initialized():
        return False
    ray.init(address=address or None)
    return True


def device_for(device: str, group: Group, cpus_per_worker: float) -> str:
    """cpu or cuda for this cluster; warns when it holds too little now (an autoscaler may add more)."""
    ray = _ray()
    have = ray.cluster_resources()
    if device == "auto":
        device = "cuda" if have.get("GPU", 0) > 0 else "cpu"
    need = {"GPU": group.world} if device == "cuda" else {}
    need["CPU"] = group.world * cpus_per_worker
    short = [f"{n:g} {r} (it has {have.get(r, 0):g})" for r, n in need.items() if have.get(r, 0) < n]
    if short:
        print(f"warning: group {group.name} needs {', '.join(short)}: Ray waits for the cluster to grow",
              file=sys.stderr, flush=True)
    return device


class _Rows:
    """Appends rows to one results file, on the machine that runs the launch (a Ray actor)."""

    def __init__(self, path: str):
        self.path = path

    def append(self, row: dict) -> None:
        results.append(self.path, row)

    def ready(self) -> bool:
        return True


def train_loop(setup: dict) -> None:
    """What each Ray Train worker runs: the group's configs in order, as a torchrun rank would."""
    import ray
    import ray.train

    from . import host
    from .runner import run_case, summary
    ctx = ray.train.get_context()
    g = host.Grid(ctx.get_world_rank(), ctx.get_world_size(), ctx.get_local_rank(), ctx.get_local_world_size(),
                  launcher="ray")
    device = host.pick_device(setup["device"], g)    # Ray Train shows a node's GPUs to all its workers
    for config in setup["configs"]:
        row = run_case(*split(config), None, g, device)
        if g.rank == 0:
            ray.get(setup["rows"].append.remote(row))  # written before the next config starts
            print(summary(row), flush=True)          # Ray shows it on the driver, prefixed by the worker


def run_group(group: Group, configs: list[dict], out_file: Path, opts) -> tuple[str, str] | None:
    """Run `configs` as one Ray Train run; None when it finished, else (status, message) for the
    configs it left without a row."""
    ray = _ray()
    from ray.train import FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
    device = device_for(opts.device, group, opts.cpus_per_worker)
    here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
    rows = ray.remote(num_cpus=0)(_Rows).options(scheduling_strategy=here).remote(str(Path(out_file).resolve()))
    ray.get(rows.ready.remote())              # started before the workers: rank 0 never waits for it
    per_worker = {"CPU": opts.cpus_per_worker, **({"GPU": 1} if device == "cuda" else {})}
    trainer = TorchTrainer(
        train_loop, train_loop_config={"configs": configs, "device": device, "rows": rows},
        scaling_config=ScalingConfig(num_workers=group.world, use_gpu=device == "cuda",
                                     resources_per_worker=per_worker,
                                     placement_strategy="STRICT_PACK" if group.nodes == 1 else "PACK"),
        run_config=RunConfig(name=group.name, storage_path=str(Path(opts.out, "ray").resolve()),
                             failure_config=FailureConfig(max_failures=0)))
    try:
        trainer.fit()
        return None
    except ray.train.TrainingFailedError as exc:    # a worker, or Ray Train's controller, failed
        return failure(exc)
    finally:
        ray.kill(rows)


def failure(exc: Exception) -> tuple[str, str]:
    """(status, message) of a failed run from the TrainingFailedError fit() raised: a WorkerGroupError
    carries each failed rank's exception (an out-of-memory one names the failure: the others' are
    often its echo, a collective broken by the rank that died), a ControllerError the controller's."""
    workers = sorted((getattr(exc, "worker_failures", None) or {}).items())
    oom = [(rank, cause) for rank, cause in workers if _out_of_memory(cause)]
    if workers:
        rank, cause = (oom or workers)[0]
        where = f"rank {rank}"
    else:
        where, cause = "its controller", getattr(exc, "controller_failure", None) or exc
    text = str(cause).strip().splitlines()
    return ("oom" if oom or _out_of_memory(cause) else "error",
            f"the Ray Train run failed on {where}: {type(cause).__name__}: {text[-1] if text else ''}")


def _out_of_memory(exc: BaseException) -> bool:
    return "OutOfMemory" in type(exc).__name__ or "low on memory" in str(exc)
