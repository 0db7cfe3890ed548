"""The Slurm backend: one sbatch script per group of a sweep, torchrun under srun.

Each script asks for the group's nodes with one task per node (srun starts one torchrun on each
node, and torchrun its ranks), writes the group's configs beside the results (a heredoc: the
script carries everything it runs, so it can be read, kept, or submitted by hand), and runs
`python -m benchmarks sweep` on them. The ranks meet at the job's first node (c10d rendezvous,
as the README's Slurm example), on a port taken from the job id so that two small jobs placed on
one node do not collide. The scripts are plain text made from the options alone (no dates, no
absolute paths), so the same sweep always prints the same scripts.

Paths stay as given, relative to the directory `launch` runs in: sbatch starts a batch job in
the directory it was submitted from, with the submitting shell's environment (--export=ALL is
the default), so the Python environment that ran `launch` runs the sweep. The results directory
must be on a filesystem that every node sees, as any multi-node torchrun run needs.

Sources: sbatch (#SBATCH directives, --parsable, --export, --chdir)
https://slurm.schedmd.com/sbatch.html; srun https://slurm.schedmd.com/srun.html; torchrun's c10d
rendezvous https://docs.pytorch.org/docs/stable/elastic/run.html.
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

from calculators.specs.errors import ConfigError

from .groups import Group, counted

PORT = 29500                  # torchrun's default rendezvous port; each job adds its id mod 1000
PLAIN = re.compile(r"[A-Za-z0-9_./:,+-]+")    # what may go into an #SBATCH line without quoting


def check(opts) -> None:
    """The values that go into #SBATCH lines are plain words (no quoting rules to get wrong)."""
    for flag, value in (("out", opts.out), ("partition", opts.partition), ("account", opts.account),
                        ("time", opts.time)):
        if value and not PLAIN.fullmatch(str(value)):
            raise ConfigError(f"--{flag} {value!r}: use letters, digits and . _ / : , + - only "
                              "(it goes into #SBATCH lines)")


def script(group: Group, configs: list[dict], opts) -> str:
    """The sbatch script that runs `configs` on the group's nodes."""
    out, name = Path(opts.out), group.name
    conf, rows = out / "configs" / f"{name}.jsonl", out / f"{name}.jsonl"
    lines = ["#!/bin/bash",
             f"# Benchmark sweep group {name}: {counted(len(configs), 'config')} on {group.shape}.",
             "# From `python -m benchmarks launch --backend slurm`; submit it from the repository root.",
             f"#SBATCH --job-name=bench-{name}",
             f"#SBATCH --nodes={group.nodes}",
             "#SBATCH --ntasks-per-node=1"]
    if opts.device != "cpu":
        lines.append(f"#SBATCH --gpus-per-node={group.per_node}")
    lines += [f"#SBATCH --{flag}={value}" for flag, value in
              (("partition", opts.partition), ("account", opts.account), ("time", opts.time)) if value]
    lines += [f"#SBATCH --output={out}/{name}-%j.log",
              "set -euo pipefail",
              f"mkdir -p {conf.parent}",
              f"cat > {conf} <<'CONFIGS'",
              *(json.dumps(c) for c in configs),
              "CONFIGS",
              'HEAD_NODE=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
              f'srun torchrun --nnodes "$SLURM_NNODES" --nproc-per-node {group.per_node} --rdzv-backend c10d \\',
              f'    --rdzv-id "$SLURM_JOB_ID" --rdzv-endpoint "$HEAD_NODE:$(({PORT} + SLURM_JOB_ID % 1000))" \\',
              f"    -m benchmarks sweep {conf} --out {rows} --device {opts.device}"
              + (" --retry-errors" if opts.retry_errors else "")]
    return "\n".join(lines) + "\n"


def submit(group: Group, text: str, opts) -> str:
    """Keep the script as DIR/slurm/<group>.sbatch, hand it to sbatch, return the job id."""
    if shutil.which("sbatch") is None:
        raise ConfigError("sbatch is not on PATH: run launch on a Slurm login node, or add --dry-run "
                          "to print the scripts")
    path = Path(opts.out) / "slurm" / f"{group.name}.sbatch"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    done = subprocess.run(["sbatch", "--parsable", str(path)], capture_output=True, text=True)
    if done.returncode:
        raise ConfigError(f"sbatch refused {path}: {done.stderr.strip() or done.stdout.strip()}")
    return done.stdout.strip().split(";")[0]          # --parsable: "jobid" or "jobid;cluster"
