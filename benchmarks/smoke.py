"""`python -m benchmarks smoke --device cpu`: every strategy once on a tiny model, on 2 processes
(and DP x TP on 4), in fp32 with SGD so that their losses can be compared with one process's.

It launches torchrun itself (one launch per process count, each running a sweep), so it is one
command on a laptop; on GPUs, `--device cuda` runs the same cases with NCCL.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

from . import results

BASE = {"model": "tiny", "precision": "fp32", "optimizer": "sgd", "lr": 1.0, "steps": 3, "warmup": 0,
        "gbs": 8, "seq": 64, "mbs": 1}
TRAIN = {   # name -> the layout on top of BASE
    "ddp": {"zero": 0},
    "fsdp2": {"zero": 3},
    "fsdp2-zero2": {"zero": 2},
    "tp-sp": {"tp": 2, "zero": 1},
    "pp-gpipe": {"pp": 2, "schedule": "gpipe"},
    "pp-1f1b": {"pp": 2, "schedule": "1f1b"},
    "pp-interleaved": {"pp": 2, "schedule": "interleaved", "vpp": 2},
    "pp-zb": {"pp": 2, "schedule": "zb"},
    "pp-dualpipe": {"pp": 2, "schedule": "dualpipe"},
    "pp-1f1b-uneven": {"pp": 2, "schedule": "1f1b", "split": [3, 1]},
    "pp-recompute-ranks": {"pp": 2, "schedule": "1f1b", "split": [1, 3], "recompute_ranks": ["full", "none"]},
    "fsdp2-full-recompute": {"zero": 3, "recompute": "full"},
    "ddp-selective-recompute": {"zero": 0, "recompute": "selective", "mbs": 2},
    "moe-fsdp2": {"zero": 3, "model": "tiny-moe"},
}
TRAIN_4 = {"dp-tp": {"tp": 2, "zero": 1}, "dp-pp": {"pp": 2, "zero": 0, "schedule": "1f1b"}}


def cases(nproc: int) -> list[dict]:
    out = [{**BASE, **layout, "name": name} for name, layout in (TRAIN if nproc == 2 else TRAIN_4).items()]
    if nproc == 2:
        out += [{"suite": "collectives", "op": op, "bytes": b, "placement": "world", "iters": 3}
                for op in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "p2p")
                for b in (65536, 1048576)]
        out += [{"suite": "gemm", "m": s, "n": s, "k": s, "dtype": "fp32", "iters": 3} for s in (256, 512)]
    return out


def _launch(nproc: int, device: str, out: str) -> int:
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as fh:
        fh.write("\n".join(json.dumps(c) for c in cases(nproc)) + "\n")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc), "--master-port",
           str(29500 + os.getpid() % 1000 + nproc), "-m", "benchmarks", "sweep", fh.name, "--out", out,
           "--device", device]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    try:
        return subprocess.run(cmd, env=env).returncode
    finally:
        os.unlink(fh.name)


def smoke(device: str, out: str, nproc: int = 2) -> int:
    t0 = time.perf_counter()
    codes = [_launch(nproc, device, out)]
    if nproc == 2:
        codes.append(_launch(4, device, out))
    loaded = results.load(out)
    rows = loaded.rows
    bad = [r for r in rows if r["status"] != "ok"]
    unpredicted = [r for r in rows if r["suite"] == "train" and ("step" not in r["prediction"])]
    print(f"smoke: {len(rows)} results in {out} ({time.perf_counter() - t0:.0f} s): "
          f"{len(rows) - len(bad)} ok, {len(bad)} failed, {len(unpredicted)} train rows without a prediction")
    for r in bad:
        print(f"  failed: {r['suite']} {r['config'].get('name', r['config'])}: {r.get('error')}")
    for p in loaded.problems:
        print(f"  skipped: {p}")
    return 0 if not bad and not unpredicted and all(c == 0 for c in codes) else 1
