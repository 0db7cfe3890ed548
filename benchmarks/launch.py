"""python -m benchmarks launch configs.jsonl --backend local|slurm|ray --out DIR: a sweep whose
configs need different numbers of processes, run on the engine the cluster already runs.

    python -m benchmarks launch configs.jsonl --backend local --out results/mine
    python -m benchmarks launch configs.jsonl --backend slurm --partition gpu --time 02:00:00 --out results/mine
    python -m benchmarks launch configs.jsonl --backend ray --address auto --out results/mine

The configs are grouped by where they run (groups.py: world size, nodes); the configs whose
result DIR already holds are skipped (the sweep's resume rule, `--retry-errors` to run errors
again), and each group is one launch: torchrun on this machine (local), one sbatch job
(slurm.py), or one Ray Train run (ray_train.py). Nothing here schedules: the engine places
and starts the processes, the harness (runner.run_case) measures, as under a plain torchrun.

Each group appends to DIR/<group>.jsonl (one writer per file, even when Slurm runs several jobs
at once on different nodes); DIR as a whole is the sweep's result set, which results.load,
the explorer and the resume rule read. The local and Ray backends watch their groups end: a
config left without a row (torchrun or a Ray worker died) is recorded with the failure's
status, never lost. Slurm jobs end after `launch` returns; launch again once `squeue` shows
them gone, to count them and to resume.

Progress goes to stderr, one line per group as it starts and ends, with the sweep's counts:
done (ok), failed (error or oom) and left. Scripts (`--dry-run`) go to stdout.
"""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from calculators.specs.errors import ConfigError

from . import results
from .config import numbered_configs
from .groups import Group, counted, key, pending, plan, run_fields, split

BACKENDS = ("local", "slurm", "ray")


@dataclass(frozen=True)
class Options:
    backend: str = "local"
    out: str = "results"             # a directory: one results file per group
    device: str = "auto"
    retry_errors: bool = False
    dry_run: bool = False
    gpus_per_node: int = 8           # slurm and ray: a larger world spans world / gpus_per_node nodes
    partition: str = ""              # slurm
    account: str = ""                # slurm
    time: str = ""                   # slurm, as sbatch --time takes it
    address: str = ""                # ray: the cluster (empty: RAY_ADDRESS, a `ray start` one, or a new local one)
    cpus_per_worker: float = 1       # ray


def say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def results_file(opts: Options, group: Group) -> Path:
    return Path(opts.out) / f"{group.name}.jsonl"


def launch(path: str, opts: Options) -> int:
    """Run (or submit, or print) every group with configs left; 0 when all that ran are ok."""
    if opts.backend not in BACKENDS:
        raise ConfigError(f"backend must be one of {', '.join(BACKENDS)} (got {opts.backend!r})")
    if opts.gpus_per_node < 1 or opts.cpus_per_worker <= 0:
        raise ConfigError("--gpus-per-node must be 1 or more and --cpus-per-worker more than 0")
    numbered = numbered_configs(path)
    groups = plan(numbered, None if opts.backend == "local" else opts.gpus_per_node)
    done = results.finished_keys(opts.out, opts.retry_errors)
    work = [(group, pending(group, done)) for group in groups]
    left = sum(len(configs) for _, configs in work)
    say(f"launch ({opts.backend}): {counted(len(numbered), 'config')} in {counted(len(groups), 'group')}, "
        f"{len(numbered) - left} already in {opts.out}, {left} to run")
    if opts.backend == "slurm":
        return _slurm(work, opts)
    if opts.dry_run:
        for i, (group, configs) in enumerate(work, 1):
            say(f"[{i}/{len(work)}] {group.name}: would run {counted(len(configs), 'config')} on {group.shape}")
        return 0
    ray_started = False
    if opts.backend == "ray" and left:
        from . import ray_train
        ray_started = ray_train.connect(opts.address)
    ok = failed = 0
    try:
        for i, (group, configs) in enumerate(work, 1):
            tag = f"[{i}/{len(work)}] {group.name}"
            if not configs:
                say(f"{tag}: skipped, nothing left ({counted(len(group.configs), 'config')} already in {opts.out})")
                continue
            say(f"{tag}: start, {counted(len(configs), 'config')} on {group.shape} "
                f"| done {ok}, failed {failed}, left {left}")
            t0 = time.perf_counter()
            trouble = _run_group(group, configs, opts)
            if trouble:
                record_missing(configs, results_file(opts, group), *trouble, launcher=opts.backend)
            statuses = _statuses(results_file(opts, group), configs)
            ok += statuses.count("ok")
            failed += len(statuses) - statuses.count("ok")
            left -= len(configs)
            say(f"{tag}: end in {time.perf_counter() - t0:.0f} s, {statuses.count('ok')} ok, "
                f"{len(statuses) - statuses.count('ok')} failed | done {ok}, failed {failed}, left {left}")
    finally:
        if ray_started:
            import ray
            ray.shutdown()
    return 1 if failed else 0


def _run_group(group: Group, configs: list[dict], opts: Options) -> tuple[str, str] | None:
    if opts.backend == "ray":
        from . import ray_train
        return ray_train.run_group(group, configs, results_file(opts, group), opts)
    code = run_local(group, configs, opts)     # 1 also when a config failed: its row says so
    return None if code == 0 else ("error", f"torchrun exited with code {code} before this config's row")


def run_local(group: Group, configs: list[dict], opts: Options) -> int:
    """torchrun on this machine: `python -m benchmarks sweep` of the group's configs on its world."""
    conf = Path(opts.out) / "configs" / f"{group.name}.jsonl"
    conf.parent.mkdir(parents=True, exist_ok=True)
    conf.write_text("".join(results.dumps(c) for c in configs))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(group.world),
           "--master-port", str(_free_port()), "-m", "benchmarks", "sweep", str(conf),
           "--out", str(results_file(opts, group)), "--device", opts.device]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}      # the ranks share this machine's cores
    return subprocess.run(cmd + (["--retry-errors"] if opts.retry_errors else []), env=env).returncode


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _slurm(work: list, opts: Options) -> int:
    from . import slurm
    slurm.check(opts)
    for i, (group, configs) in enumerate(work, 1):
        tag = f"[{i}/{len(work)}] {group.name}"
        if not configs:
            say(f"{tag}: skipped, nothing left ({counted(len(group.configs), 'config')} already in {opts.out})")
            continue
        text = slurm.script(group, configs, opts)
        if opts.dry_run:
            print(text, end="", flush=True)
            say(f"{tag}: script printed, {counted(len(configs), 'config')} on {group.shape}")
        else:
            job = slurm.submit(group, text, opts)
            say(f"{tag}: submitted as job {job}, {counted(len(configs), 'config')} on {group.shape}; "
                f"its rows land in {results_file(opts, group)}")
    return 0


def record_missing(configs: list[dict], path: Path, status: str, message: str, launcher: str) -> None:
    """A row for each config of a failed launch that has none yet, with the failure's status."""
    have = {r.get("key") for r in results.load(path).rows} if path.exists() else set()
    for config in configs:
        if key(config) not in have:
            suite, fields = split(config)
            row = results.make_row(suite, run_fields(fields), status, host={"launcher": launcher}, error=message)
            row["key"] = key(config)
            results.append(path, row)


def _statuses(path: Path, configs: list[dict]) -> list[str]:
    """The status of each config's last row in `path` (a config without one counts as failed)."""
    last = {r.get("key"): r["status"] for r in results.load(path).rows} if path.exists() else {}
    return [last.get(key(c), "error") for c in configs]
