"""One training step of recorded harness runs under torch.profiler, on one GPU: the GPU time of
its kernels by kind (GEMM, attention, the rest) and the rest's kernels by name, beside the step's
wall time, to set against the calculators' parts of the same prediction.

    PYTHONPATH=. python benchmarks/sessions/step_profile.py OUT.jsonl

The runs are rows of benchmarks/results/h100_harness.jsonl (one GPU, bf16 under autocast over
fp32 weights), eager and compiled, rebuilt from their recorded configs.
"""
import json
import sys
import time

import torch

from benchmarks import host
from benchmarks.config import RunSpec
from benchmarks.train import Trainer, validate
from eager_blocks import by_kind

PICK = ({"model": "nanotron-1.34b", "seq": 4096, "mbs": 1, "recompute": "none", "compile": False},
        {"model": "nanotron-1.34b", "seq": 4096, "mbs": 1, "recompute": "none", "compile": True},
        {"model": "nanotron-1.34b", "seq": 2048, "mbs": 1, "recompute": "none", "compile": False},
        {"model": "nanotron-1.34b", "seq": 8192, "mbs": 1, "recompute": "full", "compile": True})


def recorded():
    rows = [json.loads(line) for line in open("benchmarks/results/h100_harness.jsonl")]
    for want in PICK:
        for r in rows:
            c = r["config"]
            if r["suite"] == "train" and r["status"] == "ok" and all(c.get(k) == v for k, v in want.items()) \
                    and c.get("optimizer", "adamw") == "adamw" and r["host"]["gpus"] == 1:
                kept = {k: v for k, v in c.items() if k not in ("scenario", "world", "rank")}
                yield kept, r["metrics"]["step_time_s"]
                break


def profile_run(cfg, device, g, gpu):
    run = RunSpec.from_dict(cfg)
    spec, par = run.spec(), run.parallel(1)
    validate(spec, run, par, g, host.hardware(device, g), device)
    trainer = Trainer(spec, run, par, g, device)
    for step in range(3):
        trainer.step(step, spec.vocab)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for step in range(3, 6):
        trainer.step(step, spec.vocab)
    torch.cuda.synchronize()
    wall = (time.perf_counter() - t0) / 3
    return {"config": cfg, "gpu": gpu, "torch": torch.__version__, "wall_s": wall,
            **by_kind(lambda: trainer.step(6, spec.vocab), runs=2)}


def main(path):
    device = torch.device("cuda")
    gpu = torch.cuda.get_device_name(0)
    g = host.Grid(0, 1, 0, 1)
    with open(path, "a") as f:
        for cfg, recorded_s in recorded():
            row = profile_run(cfg, device, g, gpu)
            row["recorded_h100_s"] = recorded_s
            print(json.dumps({k: v for k, v in row.items() if k != "rest_by_kernel_us"}))
            f.write(json.dumps(row) + "\n")
            f.flush()
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main(sys.argv[1])
