"""python -m benchmarks <suite> ... (launch multi-rank suites with torchrun).

    torchrun --nproc-per-node 8 -m benchmarks train --model nanotron-1.34b --tp 2 --zero 1 --gbs 64 --seq 4096 --out results/mine.jsonl
    torchrun --nproc-per-node 8 -m benchmarks collectives --out results/mine.jsonl
    python -m benchmarks gemm --out results/mine.jsonl
    python -m benchmarks gemm --models llama3-8b,llama3-70b --tps 1,2,4,8 --dtypes bf16,fp8 --out results/mine.jsonl
    python -m benchmarks attention --seqs 1024,4096,16384 --gqa 1,8 --out results/mine.jsonl
    python -m benchmarks moe --models qwen3-30b-a3b,deepseek-v3 --eps 8,32 --out results/mine.jsonl
    python -m benchmarks memory --world 64 --tp 8 --zero 3 --model llama3-8b --out results/mine.jsonl
    torchrun --nproc-per-node 8 -m benchmarks sweep configs.jsonl --out results/mine.jsonl   # resumes
    python -m benchmarks launch configs.jsonl --backend slurm --partition gpu --out results/mine  # any worlds
    python -m benchmarks smoke --device cpu --out /tmp/smoke.jsonl
    python -m benchmarks calibrate results/mine.jsonl --gpu H100-80GB --out my_cluster.json

Exit codes: 0 every run ok, 1 some run failed or ran out of memory, 2 bad arguments.
"""
from __future__ import annotations

import argparse
import json
import sys

from calculators.specs.errors import ConfigError

from . import config as cfg


def _device_and_grid(name: str):
    from . import host
    g = host.grid()
    device = host.pick_device(name, g)
    host.init_distributed(g, device)
    return g, device


def _finish(rows) -> int:
    import torch.distributed as dist
    if dist.is_initialized():
        dist.destroy_process_group()
    return 0 if all(r["status"] == "ok" for r in rows) else 1


def cmd_train(ns) -> int:
    from .runner import run_case, summary
    run = cfg.from_args(ns)
    g, device = _device_and_grid(run.device)
    row = run_case("train", run.as_dict(), ns.out, g, device)
    if g.rank == 0:
        print(summary(row))
        if ns.json:
            print(json.dumps(row))
    return _finish([row])


def cmd_sweep(ns) -> int:
    from .sweep import sweep
    return sweep(ns.file, ns.out, ns.device, ns.retry_errors)


def cmd_launch(ns) -> int:
    from .launch import Options, launch
    opts = Options(**{k: getattr(ns, k) for k in Options.__dataclass_fields__})
    try:
        return launch(ns.file, opts)
    except ConfigError as exc:                # every misplaced config on its own line
        for problem in exc.problems:
            print(f"error: {problem}", file=sys.stderr)
        return 2


def cmd_collectives(ns) -> int:
    from .runner import run_case, summary
    g, device = _device_and_grid(ns.device)
    rows = []
    from .collectives import cases
    for case in cases(ns.ops.split(","), _sizes(ns.sizes), g, ns.iters):
        rows.append(run_case("collectives", case, ns.out, g, device))
        if g.rank == 0:
            print(summary(rows[-1]))
    return _finish(rows)


def _sizes(text: str) -> list[int]:
    """--sizes: message sizes in bytes, 1 to 2**40 each (1e6 and 16000000 alike)."""
    out = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        try:
            n = float(part)
        except ValueError:
            n = 0.0
        if not 1 <= n <= 2**40:
            raise ConfigError(f"--sizes must list message sizes in bytes from 1 to 2**40, e.g. 1e6,2.56e8 "
                              f"(got {part[:40]!r})")
        out.append(int(n))
    if not out:
        raise ConfigError("--sizes must list at least one message size in bytes, e.g. 1e6,2.56e8")
    return out


def cmd_gemm(ns) -> int:
    from .runner import run_case, summary
    g, device = _device_and_grid(ns.device)
    from .gemm import cases
    rows = []
    for c in cases(ns.shapes, ns.dtypes.split(","), ns.iters, ns.models, ns.tps, ns.tokens):
        rows.append(run_case("gemm", c, ns.out, g, device))
        print(summary(rows[-1]), flush=True)
    return _finish(rows)


def cmd_attention(ns) -> int:
    from .attention import cases
    from .runner import run_case, summary
    g, device = _device_and_grid(ns.device)
    rows = []
    for c in cases(ns.seqs, ns.head_dims, ns.gqa, ns.backends, ns.causal, ns.iters):
        rows.append(run_case("attention", c, ns.out, g, device))
        print(summary(rows[-1]), flush=True)
    return _finish(rows)


def cmd_moe(ns) -> int:
    from .moe import cases
    from .runner import run_case, summary
    g, device = _device_and_grid(ns.device)
    todo, skipped = cases(ns.models, ns.eps, ns.tokens, ns.dtypes.split(","), ns.iters)
    for note in skipped:
        print(f"skipped: {note}", file=sys.stderr)
    rows = []
    for c in todo:
        rows.append(run_case("moe", c, ns.out, g, device))
        print(summary(rows[-1]), flush=True)
    return _finish(rows)


def cmd_memory(ns) -> int:
    from .memory import run_memory
    if not 1 <= ns.world <= 1 << 20:
        raise ConfigError(f"--world must be the layout's total ranks, 1 to {1 << 20:,} (got {ns.world})")
    row = run_memory(cfg.from_args(ns), ns.world, ns.rank, ns.out)
    print(json.dumps({"status": row["status"], "error": row.get("error", ""), "metrics": row["metrics"],
                      "prediction": row["prediction"].get("memory", row["prediction"])}, indent=1))
    return 0 if row["status"] == "ok" else 1


def cmd_smoke(ns) -> int:
    from .smoke import smoke
    if not 1 <= ns.nproc <= 64:
        raise ConfigError(f"--nproc must be a number of processes from 1 to 64 (got {ns.nproc})")
    return smoke(ns.device, ns.out, ns.nproc)


def cmd_calibrate(ns) -> int:
    from .calibrate import calibrate
    return calibrate(ns.results, ns.gpu, ns.out)


def _iters(text: str) -> int:
    """--iters: a whole number of timed repeats, 1 to 10,000."""
    try:
        n = int(text)
    except ValueError:
        n = 0
    if not 1 <= n <= 10_000:
        raise argparse.ArgumentTypeError(f"must be a whole number from 1 to 10,000 (got {text[:40]!r})")
    return n


def _timing_args(p, iters: int) -> None:
    """The options every timing suite takes."""
    p.add_argument("--iters", type=_iters, default=iters)
    p.add_argument("--device", default="auto")
    p.add_argument("--out")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="suite", required=True)
    p = sub.add_parser("train", help="time training steps of one layout")
    cfg.add_arguments(p)
    p.add_argument("--out", help="append the result row to this JSON Lines file")
    p.add_argument("--json", action="store_true", help="also print the row")
    p.set_defaults(fn=cmd_train)
    p = sub.add_parser("sweep", help="run every config of a file, skipping those already in --out")
    p.add_argument("file")
    p.add_argument("--out", required=True)
    p.add_argument("--device", default="auto")
    p.add_argument("--retry-errors", action="store_true", help="re-run configs recorded as errors")
    p.set_defaults(fn=cmd_sweep)
    p = sub.add_parser("launch", help="a sweep of any world sizes, one launch per size, on torchrun, Slurm or Ray")
    p.add_argument("file")
    p.add_argument("--backend", choices=("local", "slurm", "ray"), default="local")
    p.add_argument("--out", required=True, help="results directory: one JSON Lines file per group")
    p.add_argument("--device", default="auto")
    p.add_argument("--retry-errors", action="store_true", help="re-run configs recorded as errors")
    p.add_argument("--dry-run", action="store_true", help="print the plan (slurm: the sbatch scripts); run nothing")
    p.add_argument("--gpus-per-node", type=int, default=8, help="slurm, ray: a larger world spans several nodes")
    p.add_argument("--partition", default="", help="slurm")
    p.add_argument("--account", default="", help="slurm")
    p.add_argument("--time", default="", help="slurm: the job's time limit, as sbatch --time takes it")
    p.add_argument("--address", default="", help="ray: the cluster (default: RAY_ADDRESS, or a local one)")
    p.add_argument("--cpus-per-worker", type=float, default=1, help="ray: CPUs each worker reserves")
    p.set_defaults(fn=cmd_launch)
    p = sub.add_parser("collectives", help="bus bandwidth vs message size per group placement")
    p.add_argument("--ops", default="all_reduce,all_gather,reduce_scatter,all_to_all,broadcast,p2p")
    p.add_argument("--sizes", default="1e6,1.6e7,2.56e8", help="message sizes in bytes")
    _timing_args(p, 10)
    p.set_defaults(fn=cmd_collectives)
    p = sub.add_parser("gemm", help="matmul TFLOP/s vs shape and dtype")
    p.add_argument("--shapes", default="8192x8192x8192,4096x4096x4096,16384x4096x4096,4096x1024x4096",
                   help="MxNxK,...")
    p.add_argument("--dtypes", default="bf16", help="bf16, fp16, fp32, fp8 (comma-separated)")
    p.add_argument("--models", default="", help="also each fused projection of these presets, e.g. llama3-8b,llama3-70b")
    p.add_argument("--tps", default="1", help="with --models: TP sizes whose shards to time")
    p.add_argument("--tokens", type=int, default=8192, help="with --models: tokens (M) per GEMM")
    _timing_args(p, 20)
    p.set_defaults(fn=cmd_gemm)
    p = sub.add_parser("attention", help="scaled_dot_product_attention forward/backward time per kernel (GPU)")
    p.add_argument("--seqs", default="512,1024,2048,4096,8192,16384")
    p.add_argument("--head-dims", default="64,128")
    p.add_argument("--gqa", default="1", help="query heads per kv head, e.g. 1,4,8")
    p.add_argument("--backends", default="flash,cudnn", help=f"of {', '.join(('flash', 'cudnn', 'efficient', 'math'))}")
    p.add_argument("--causal", default="true", help="true, false or true,false")
    _timing_args(p, 10)
    p.set_defaults(fn=cmd_attention)
    p = sub.add_parser("moe", help="one GPU's share of an MoE layer (router, permutation, experts)")
    for flag, default, text in (("--models", "qwen3-30b-a3b,qwen3-235b-a22b,deepseek-v3,mixtral-8x7b",
                                 "mixture-of-experts presets"),
                                ("--eps", "8,32", "expert-parallel sizes (E/ep experts on this GPU)"),
                                ("--tokens", "4096,16384", "tokens on this GPU per micro-batch"),
                                ("--dtypes", "bf16", "bf16 (fp32 on a CPU)")):
        p.add_argument(flag, default=default, help=text)
    _timing_args(p, 10)
    p.set_defaults(fn=cmd_moe)
    p = sub.add_parser("memory", help="one rank of a large layout on one device (fake process group)")
    cfg.add_arguments(p)
    p.add_argument("--world", type=int, required=True, help="the layout's total ranks")
    p.add_argument("--rank", type=int, default=0, help="which rank to be")
    p.add_argument("--out")
    p.set_defaults(fn=cmd_memory)
    p = sub.add_parser("smoke", help="every strategy on a tiny model, 2 processes")
    p.add_argument("--device", default="cpu")
    p.add_argument("--out", default="smoke.jsonl")
    p.add_argument("--nproc", type=int, default=2)
    p.set_defaults(fn=cmd_smoke)
    p = sub.add_parser("calibrate", help="fit a hardware profile to results")
    p.add_argument("results", nargs="+")
    p.add_argument("--gpu", default="H100-80GB", help="the GPU preset the results were measured on")
    p.add_argument("--out", required=True, help="profile JSON to write (load it with hardware.profile)")
    p.set_defaults(fn=cmd_calibrate)
    ns = ap.parse_args(argv)
    try:
        return ns.fn(ns)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
