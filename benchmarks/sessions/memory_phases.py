"""Where a one-GPU training step's memory goes: allocated GiB after each phase of two steps of a
harness layout, and the allocator's snapshot of the second step (for torch.cuda.memory's viewer).
    python benchmarks/sessions/memory_phases.py OUTDIR nanotron-1.34b 4096 1 none"""
import json
import pickle
import sys

import torch

from benchmarks import host
from benchmarks.config import RunSpec
from benchmarks.model import loss_fn
from benchmarks.train import Trainer, global_batch

out, model, seq, mbs, recompute = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
run = RunSpec(model=model, seq=seq, mbs=mbs, gbs=mbs, recompute=recompute)
g = host.Grid(0, 1, 0, 1)
device = torch.device("cuda", 0)
spec, par = run.spec(), run.parallel(1)
phases = []


def mark(name):
    torch.cuda.synchronize()
    phases.append((name, torch.cuda.memory_allocated() / 2**30, torch.cuda.max_memory_allocated() / 2**30))
    torch.cuda.reset_peak_memory_stats()


trainer = Trainer(spec, run, par, g, device)
mark("built")
model_ = trainer.parts[0]
for step in range(2):
    if step == 1:
        torch.cuda.memory._record_memory_history(max_entries=30000)
    x, y = (t.to(device) for t in global_batch(run, step, spec.vocab))
    with trainer._context(x, y):
        logits = model_(x)
        mark(f"step {step} forward (logits out)")
        loss = loss_fn(logits, y)
        mark(f"step {step} loss")
        del logits
        loss.backward()
    mark(f"step {step} backward")
    trainer.opt.step()
    mark(f"step {step} optimizer")
    trainer.opt.zero_grad(set_to_none=True)
    mark(f"step {step} zero_grad")
snap = torch.cuda.memory._snapshot()
torch.cuda.memory._record_memory_history(enabled=None)
with open(f"{out}/snapshot_{model}_{seq}_{mbs}_{recompute}.pickle", "wb") as f:
    pickle.dump(snap, f)
for name, now, peak in phases:
    print(f"phase {name:32s} allocated {now:7.2f} GiB, peak since last mark {peak:7.2f} GiB")
json.dump(phases, open(f"{out}/phases_{model}_{seq}_{mbs}_{recompute}.json", "w"))
