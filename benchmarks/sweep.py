"""Sweeps: run every config of a file on the launched process grid, appending each result as it
finishes, and skip the configs whose result is already in the output file, so an interrupted
sweep (a crash, a node lost, Ctrl-C) resumes where it stopped when launched again.

A config file is JSON Lines (or one JSON list) of objects; "suite" picks train (the default),
collectives or gemm, and the rest are that suite's fields:

    {"model": "nanotron-1.34b", "tp": 2, "zero": 1, "gbs": 32, "seq": 4096, "mbs": 2}
    {"suite": "collectives", "op": "all_reduce", "bytes": 268435456, "placement": "world"}
    {"suite": "gemm", "m": 8192, "n": 8192, "k": 8192, "dtype": "bf16"}
"""
from __future__ import annotations

import torch.distributed as dist

from . import host, results
from .config import read_configs
from .groups import counted, stated_world
from .runner import Progress, run_case, summary


def pending(configs: list[dict], out: str, retry_errors: bool = False) -> list[tuple[str, dict]]:
    """(suite, config) of the configs not yet recorded in `out`."""
    done = results.finished_keys(out, retry_errors)
    todo = []
    for c in configs:
        c = dict(c)
        suite = c.pop("suite", "train")
        if results.run_key(suite, c) not in done:
            todo.append((suite, c))
    return todo


def sweep(path: str, out: str, device_name: str = "auto", retry_errors: bool = False) -> int:
    g = host.grid()
    device = host.pick_device(device_name, g)
    host.init_distributed(g, device)
    configs = read_configs(path)
    todo = [pending(configs, out, retry_errors)] if g.rank == 0 else [None]
    if dist.is_initialized():                 # rank 0 reads the output file; everyone runs the same list
        dist.broadcast_object_list(todo, src=0)
    todo = todo[0]
    if g.rank == 0 and len(todo) < len(configs):
        print(f"resuming: {len(configs) - len(todo)} of {len(configs)} configs already in {out}")
    elsewhere = [(s, c) for s, c in todo if stated_world(c) not in (None, g.world)]
    if elsewhere and g.rank == 0:             # recorded here they would be mislabelled: `launch` places them
        print(f"skipping {counted(len(elsewhere), 'config')} whose world is not this launch's {g.world} "
              "(`python -m benchmarks launch` gives each config its own)")
    todo = [t for t in todo if t not in elsewhere]
    bar = Progress(len(todo), g.rank)
    failed = 0
    for suite, config in todo:
        row = run_case(suite, config, out, g, device)
        failed += row["status"] != "ok"
        bar.update(summary(row))
    if dist.is_initialized():
        dist.destroy_process_group()
    return 1 if failed else 0
