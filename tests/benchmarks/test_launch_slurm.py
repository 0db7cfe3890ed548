"""The Slurm backend: `--dry-run` prints the same scripts every time (checked against a golden
file and by `bash -n`), a group already done is skipped, and submission goes through sbatch."""
import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from benchmarks import groups, results
from benchmarks.__main__ import main

GOLDEN = Path(__file__).parent / "golden" / "slurm_dry_run.sh"
CONFIGS = [
    {"suite": "gemm", "m": 8192, "n": 8192, "k": 8192, "dtype": "bf16"},
    {"model": "llama3-8b", "tp": 8, "zero": 1, "gbs": 64, "seq": 8192},
    {"model": "llama3-8b", "tp": 8, "pp": 2, "schedule": "interleaved", "vpp": 2, "gbs": 64, "seq": 8192},
    {"nodes": 4, "gpus_per_node": 8, "model": "llama3-70b", "tp": 8, "pp": 4, "zero": 1, "gbs": 128, "seq": 8192},
    {"world": 16, "model": "llama3-8b", "tp": 4, "zero": 3, "gbs": 64, "seq": 4096},
    {"world": 2, "model": "llama3-8b", "zero": 3, "gbs": 16, "seq": 4096},        # already done: skipped
]
FLAGS = ["--backend", "slurm", "--partition", "gpu", "--account", "llm", "--time", "02:00:00", "--out", "results/sweep"]


@pytest.fixture
def sweep(tmp_path, monkeypatch):
    """A configs file in a fresh directory, whose results already hold the last config."""
    monkeypatch.chdir(tmp_path)
    Path("configs.jsonl").write_text("".join(json.dumps(c) + "\n" for c in CONFIGS))
    done = results.make_row("train", {}, "ok") | {"key": groups.key(CONFIGS[-1])}
    results.append("results/sweep/world2-nodes1.jsonl", done)
    return tmp_path


def _scripts(text: str) -> list[str]:
    return ["#!/bin/bash" + part for part in text.split("#!/bin/bash")[1:]]


def test_dry_run_prints_the_golden_scripts_which_bash_parses(sweep, capsys):
    assert main(["launch", "configs.jsonl", "--dry-run", *FLAGS]) == 0
    out, err = capsys.readouterr()
    assert out == GOLDEN.read_text()
    scripts = _scripts(out)
    assert [re.search(r"^#SBATCH --nodes=(\d+)$", s, re.M).group(1) for s in scripts] == ["1", "1", "2", "4"]
    for n, text in enumerate(scripts):
        path = sweep / f"job{n}.sh"
        path.write_text(text)
        check = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
        assert check.returncode == 0, check.stderr
    assert "[2/5] world2-nodes1: skipped, nothing left (1 config already in results/sweep)" in err
    assert not Path("results/sweep/slurm").exists()                        # a dry run writes nothing


def test_without_sbatch_the_error_says_what_to_do(sweep, monkeypatch, capsys):
    monkeypatch.setenv("PATH", str(sweep / "empty"))
    assert main(["launch", "configs.jsonl", *FLAGS]) == 2
    assert "error: sbatch is not on PATH: run launch on a Slurm login node, or add --dry-run" in capsys.readouterr().err


def test_each_group_is_submitted_to_sbatch_and_kept(sweep, monkeypatch, capsys):
    bin_dir = sweep / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "sbatch"                       # prints a job id as `sbatch --parsable` does
    fake.write_text('#!/bin/sh\necho "$@" >> submitted.txt\necho "$(wc -l < submitted.txt);cluster"\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    assert main(["launch", "configs.jsonl", *FLAGS]) == 0
    kept = sorted(p.name for p in Path("results/sweep/slurm").iterdir())
    assert kept == ["world1-nodes1.sbatch", "world16-nodes2.sbatch", "world32-nodes4.sbatch", "world8-nodes1.sbatch"]
    assert Path("submitted.txt").read_text().splitlines()[0] == "--parsable results/sweep/slurm/world1-nodes1.sbatch"
    err = capsys.readouterr().err
    assert "[5/5] world32-nodes4: submitted as job 4, 1 config on 4 nodes x 8 processes" in err
    assert "".join(_scripts(GOLDEN.read_text())[:1]) == Path("results/sweep/slurm/world1-nodes1.sbatch").read_text()


def test_values_that_would_break_an_sbatch_line_are_refused(sweep, capsys):
    assert main(["launch", "configs.jsonl", "--dry-run", *FLAGS, "--partition", "gpu\n#SBATCH --x"]) == 2
    assert "--partition 'gpu\\n#SBATCH --x': use letters, digits" in capsys.readouterr().err
