"""Command line: `python -m calculators {estimate,plan,budget,optimal,memory,models,gpus} ...`.

    python -m calculators estimate < scenarios.jsonl > answers.jsonl
    echo '{"model": {"preset": "llama3-70b"}, "hardware": {"nodes": 8}, "seq": 8192, "gbs": 512}' \\
        | python -m calculators plan --text --export megatron
    echo '{"model": {"preset": "llama3-405b"}, "tokens": 15.6e12, "seq": 8192, "gbs": 2048,
           "gpus": [4096, 8192, 16384]}' | python -m calculators budget --text
    echo '{"gpu_hours": 1e6, "hardware": {"gpu": "H100-80GB"}}' | python -m calculators optimal --text
    python -m calculators memory --model llama3-70b --nodes 4 --tp 8 --pp 4 --sp --gbs 64 --seq 8192
    python -m calculators memory --config config.json --tp 2 --zero 1 --dp 4
"""
from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import signal
import sys
import threading

from .specs import limits
from .specs.errors import ConfigError
from .specs.fp8 import FP8_TEXT, fp8_weights
from .specs.frameworks import MASTER_TEXT, grad_dtype, master_dtype
from .specs.hardware import GPU_PRESETS
from .specs.parallel import (FP8_RECIPES, FP8_WEIGHTS, FRAMEWORKS, GRAD_DTYPES, MASTER_DTYPES, MOMENT_DTYPES,
                            RECOMPUTE, SCHEDULES)
from .specs.optimizers import OPTIMIZERS
from .specs.recompute import EXPLICIT, MODULES_TEXT
from .specs.presets import MODEL_PRESETS, model_from_name
from .scenario import answer, parse_hardware, parse_model, parse_parallel
from .specs.validate import bounded_lines, loads, show


class _OverBudget(BaseException):
    """The wall-clock alarm: a BaseException, so no `except Exception` on the way swallows it."""


def _ring(_signum, _frame):
    raise _OverBudget()


def _can_ring() -> bool:
    return hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()


@contextlib.contextmanager
def _ringing():
    """_alarm's SIGALRM handler in place for the block (POSIX, main thread), the previous one back
    after it: once for a stream of scenarios, where installing it per line cost a twentieth of a
    scenario's time."""
    usable = _can_ring()
    previous = signal.signal(signal.SIGALRM, _ring) if usable else None
    try:
        yield
    finally:
        if usable:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, signal.SIG_DFL if previous is None else previous)


@contextlib.contextmanager
def _alarm(seconds: float):
    """A wall-clock budget for the block (POSIX, main thread): _OverBudget when it is spent, on top
    of the calculators' cooperative budget (limits.time_budget), which the block also runs under.
    Inside _ringing only the timer is set."""
    usable = seconds > 0 and _can_ring()
    installed = usable and signal.getsignal(signal.SIGALRM) is _ring
    with _ringing() if usable and not installed else contextlib.nullcontext():
        if usable:
            signal.setitimer(signal.ITIMER_REAL, seconds)
        try:
            with limits.time_budget(seconds if seconds > 0 else float("inf"), "this request"):
                yield
        finally:
            if usable:
                signal.setitimer(signal.ITIMER_REAL, 0)


def _strict_json(obj, **kw) -> str:
    """JSON that any parser reads: no NaN or Infinity (a bug's value becomes an error, not bad JSON)."""
    try:
        return json.dumps(obj, allow_nan=False, **kw)
    except ValueError:
        return json.dumps({"error": "internal error: the answer holds a value that is not a finite number; "
                                    "please report the scenario"})


def cmd_estimate(args) -> int:
    """JSON Lines in, one JSON line out per scenario, in order (shared/DESIGN.md contract). Every
    line gets an answer: a line that is not JSON, not UTF-8, too long, too slow or that trips a
    bug gets an `error`, and the lines after it are still read."""
    with _ringing():
        return _estimate_lines(args)


def _estimate_lines(args) -> int:
    bad_json = False
    out = sys.stdout
    for number, raw in bounded_lines(sys.stdin.buffer, limits.MAX_JSON_BYTES):
        if raw is not None and not raw.strip():
            continue
        try:
            if raw is None:
                raise ConfigError(f"line {number} is over {limits.MAX_JSON_BYTES:,} bytes; one scenario is a few "
                                  "hundred")
            scenario = loads(raw, f"line {number}")
        except ConfigError as exc:
            bad_json = True
            result = {"error": str(exc)}
        else:
            try:
                with _alarm(args.budget_s):
                    result = answer(scenario)
            except _OverBudget:
                result = {"error": f"line {number} took longer than its {args.budget_s:g} s budget; it was stopped "
                                   "(raise --budget-s to allow more)"}
        out.write(_strict_json(result, separators=(",", ":")) + "\n")
        out.flush()
    return 1 if bad_json else 0


def _read_request(path: str | None) -> bytes:
    """The plan request's bytes, from a regular file or stdin, at most MAX_JSON_BYTES."""
    if path is None:
        data = sys.stdin.buffer.read(limits.MAX_JSON_BYTES + 1)
    else:
        if not os.path.isfile(path):
            raise ConfigError(f"--file {show(path)}: " + ("not a regular file" if os.path.exists(path) else "no such file"))
        with open(path, "rb") as fh:
            data = fh.read(limits.MAX_JSON_BYTES + 1)
    if len(data) > limits.MAX_JSON_BYTES:
        raise ConfigError(f"the plan request is over {limits.MAX_JSON_BYTES:,} bytes; one request is a few hundred")
    return data


def _answer(args, compute, what: str, over_budget: str):
    """compute(the JSON request of stdin or --file) under --budget-s; None after printing one
    `error:` line for bad input, the time budget or a bug (never a traceback)."""
    try:
        with _alarm(args.budget_s):
            return compute(loads(_read_request(args.file), f"the {what} request"))
    except (ConfigError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
    except _OverBudget:
        print(f"error: {over_budget}", file=sys.stderr)
    except Exception as exc:                       # a bug: one clear line, not a traceback
        print(f"error: internal error ({type(exc).__name__}: {show(str(exc), 200)}); please report the request",
              file=sys.stderr)
    return None


def cmd_plan(args) -> int:
    """One JSON request (stdin or --file) -> the ranked plans as JSON, or as text with --text."""
    from .scenario import plan_answer
    ans = _answer(args, plan_answer, "plan", f"planning took longer than its {args.budget_s:g} s budget; narrow the "
                  "request (constraints on tp, pp or mbs, fewer nodes) or raise --budget-s")
    if ans is None:
        return 2
    if not args.text:
        print(_strict_json(ans, indent=1))
        return 0
    if ans["impossible"]:
        print(ans["impossible"])
        return 1
    print(f"{'#':>2} {'step s':>8} {'tok/s/GPU':>10} {'MFU':>6} {'GiB':>6}  layout")
    for p in ans["plans"]:
        s = p["step"]
        print(f"{p['rank']:>2} {s['time_s']:>8.3f} {s['tokens_per_s_per_gpu']:>10.0f} {s['mfu']:>6.1%} "
              f"{p['memory']['total_gib']:>6.1f}  {p['label']}")
    print(f"\nwhy: {ans['why']}\n\nrejected:")
    for r in ans["rejected"]:
        print(f"  {r['label']}: {r['reason']}")
    layout = ans["plans"][0]["parallel"]["framework"]
    print(f"\n{ans['searched']} layouts scored in {ans['seconds']:.2f} s; MFU counts model FLOPs over "
          f"the dense bf16 peak; memory in GiB on the most loaded GPU, in {layout}'s layout")
    if args.export:
        p = ans["plans"][0]["exports"][args.export]
        print(f"\n# plan 1 as {args.export}\n{p['text']}")
        for note in p["notes"]:
            print(f"# note: {note}")
    return 0


def cmd_request(args) -> int:
    """`budget` or `optimal`: one JSON request (stdin or --file) -> its answer as JSON, or a table
    with --text; bad input, the time budget or a bug give one `error:` line, exit 2."""
    if args.cmd == "budget":
        from .planning.budget import budget_answer, text
        compute = lambda request: budget_answer(request, workers=os.cpu_count() or 1)   # noqa: E731
    else:
        from .planning.chinchilla import optimal_answer as compute, text
    ans = _answer(args, compute, args.cmd, f"the {args.cmd} request took longer than its {args.budget_s:g} s "
                  "budget; ask for fewer cluster sizes or raise --budget-s")
    if ans is None:
        return 2
    print(text(ans) if args.text else _strict_json(ans, indent=1))
    return 0


def cmd_memory(args) -> int:
    from .memory.estimate import estimate_memory
    try:
        if args.config:
            from .specs.hf_config import from_hf_config
            if not os.path.isfile(args.config):
                raise ConfigError(f"--config {show(args.config)}: " + ("not a regular file" if os.path.exists(args.config)
                                                                        else "no such file"))
            with open(args.config, "rb") as fh:
                model = from_hf_config(fh.read(limits.MAX_JSON_BYTES + 1))
        else:
            model = parse_model({"preset": args.model})
        cluster = parse_hardware({"gpu": args.gpu, "nodes": args.nodes, "gpus_per_node": args.gpus_per_node})
        par = parse_parallel({k: getattr(args, k) for k in (
            "dp", "tp", "pp", "cp", "ep", "vpp", "zero", "sp", "mbs", "gbs", "seq", "recompute", "precision",
            "schedule", "framework", "grad_dtype", "moment_dtype", "master_dtype", "fp8_recipe", "fp8_weights",
            "offload_layers", "offload_modules", "optimizer_offload", "param_offload", "optimizer", "tiled_mlp")})
        est = estimate_memory(model, cluster, par)
    except (ConfigError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(model.describe())
    print(f"{cluster.nodes} x {cluster.gpus_per_node} {cluster.gpu.name}; dp={par.dp} tp={par.tp} pp={par.pp} "
          f"cp={par.cp} ep={par.ep} zero={par.zero} sp={par.sp} mbs={par.mbs} gbs={par.gbs} seq={par.seq} "
          f"recompute={par.recompute}{' offload=' + par.offload_modules if par.offload_modules else ''} "
          f"schedule={par.schedule}; {par.framework} memory layout, "
          f"{grad_dtype(par)} gradients, " + ("Muon (AdamW on embeddings and norms), " if par.optimizer == "muon" else
                                              f"{par.moment_dtype or 'fp32'} Adam moments, ") +
          f"{MASTER_TEXT[master_dtype(par)]}{FP8_TEXT.get(fp8_weights(par), '')}\n")
    cols = ("weights", "grads", "master", "optimizer", "activations", "other")
    print(f"{'stage':>5} {'layers':>6} " + " ".join(f"{c:>11}" for c in cols) + f" {'total GiB':>10}")
    for s in est.stages:
        vals = [getattr(s, f"{c}_gib") for c in cols]
        print(f"{s.stage:>5} {s.layers:>6} " + " ".join(f"{v:>11.2f}" for v in vals) + f" {s.total_gib:>10.2f}")
    verdict = "fits" if est.fits else "does NOT fit"
    print(f"\nmost loaded GPU: stage {est.worst.stage}, {est.total_gib:.2f} GiB of {est.capacity_gib:.2f} GiB: "
          f"{verdict} (rule: peak <= {est.usable_fraction:.0%} of capacity, {par.framework}'s)")
    if est.worst.host_gib:
        print(f"host memory: {est.worst.host_gib:.2f} GiB a GPU for its offloaded optimizer or weights, "
              f"{est.worst.host_gib * cluster.gpus_per_node:.1f} GiB a node")
    for w in est.warnings:
        print(f"warning: {w}")
    return 0


MAX_BUDGET_S = 1e6               # about 11 days: past it (1e10, inf) the alarm timer overflows


def _budget(text: str) -> float:
    """--budget-s: seconds, 0 for no limit (argparse names the option in its message)."""
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not 0 <= seconds <= MAX_BUDGET_S:              # NaN too
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a number of seconds from 0 (no limit) to "
                                         f"{MAX_BUDGET_S:,.0f}")
    return seconds


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m calculators", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    est = sub.add_parser("estimate", help="JSON Lines scenarios on stdin -> JSON Lines answers on stdout")
    est.add_argument("--budget-s", type=_budget, default=10.0,
                     help="wall-clock seconds one line may take before it is answered with an error (0: no limit)")
    pl = sub.add_parser("plan", help="the fastest layouts that fit (JSON request on stdin or --file)")
    pl.add_argument("--budget-s", type=_budget, default=60.0,
                    help="wall-clock seconds the search may take before it stops with an error (0: no limit)")
    pl.add_argument("--file", help="the request as a JSON file instead of stdin")
    pl.add_argument("--text", action="store_true", help="a table instead of JSON")
    pl.add_argument("--export", choices=("harness", "megatron", "torchtitan", "deepspeed"),
                    help="with --text: print plan 1 in this format")
    for name, what, seconds in (("budget", "days, GPU-hours, cost and goodput per cluster size", 120.0),
                                ("optimal", "Chinchilla compute-optimal model size and tokens", 10.0)):
        b = sub.add_parser(name, help=f"{what} (JSON request on stdin or --file)")
        b.add_argument("--budget-s", type=_budget, default=seconds,
                       help="wall-clock seconds the request may take before it stops with an error (0: no limit)")
        b.add_argument("--file", help="the request as a JSON file instead of stdin")
        b.add_argument("--text", action="store_true", help="a table instead of JSON")
    sub.add_parser("models", help="list model presets")
    sub.add_parser("gpus", help="list GPU presets")
    m = sub.add_parser("memory", help="memory per GPU for one layout, as a table")
    m.add_argument("--model", default="llama3-8b", choices=MODEL_PRESETS)
    m.add_argument("--config", help="a transformers config.json instead of --model")
    m.add_argument("--gpu", default="H100-80GB", choices=list(GPU_PRESETS))
    m.add_argument("--nodes", type=int, default=1)
    m.add_argument("--gpus-per-node", type=int, default=8)
    m.add_argument("--dp", type=int, default=None, help="data-parallel replicas (default: what the cluster leaves, "
                                                          "GPUs / (tp*pp*cp))")
    for k in ("tp", "pp", "cp", "ep", "vpp", "zero", "mbs"):
        m.add_argument(f"--{k}", type=int, default=0 if k == "zero" else 1)
    m.add_argument("--offload-modules", default="",
                   help="modules whose saved activations wait in host memory, joined by '+' (Megatron's "
                        "--fine-grained-activation-offloading --offload-modules), e.g. expert_fc1+moe_act")
    m.add_argument("--offload-layers", type=int, default=0,
                   help="layers whose activations wait in host memory (Megatron's --cpu-offloading-num-layers)")
    m.add_argument("--optimizer-offload", type=float, default=0.0, metavar="SHARE",
                   help="share of the optimizer kept and stepped in host memory, 0 to 1 (DeepSpeed's "
                        "offload_optimizer, Megatron's --optimizer-cpu-offload, FSDP2's CPUOffloadPolicy)")
    m.add_argument("--optimizer", default="adamw", choices=OPTIMIZERS,
                   help="adamw, or muon (one momentum per weight matrix, Newton-Schulz on it; AdamW on embeddings, "
                        "output and norms), as the framework runs it")
    m.add_argument("--param-offload", action="store_true",
                   help="ZeRO-3 weight shards in host memory (DeepSpeed's offload_param, FSDP2's CPUOffloadPolicy)")
    m.add_argument("--tiled-mlp", action="store_true",
                   help="the MLP in tiles of hidden tokens, its forward again in backward (DeepSpeed's TiledMLP, ALST)")
    m.add_argument("--gbs", type=int, default=0, help="global batch in sequences (default: dp*mbs)")
    m.add_argument("--seq", type=int, default=4096)
    m.add_argument("--sp", action="store_true", help="sequence parallelism with TP")
    m.add_argument("--recompute", default="none", metavar="POLICY",
                   help=f"{', '.join(RECOMPUTE + EXPLICIT)}, layer:N, or Megatron's recompute modules "
                        f"joined by '+' ({MODULES_TEXT}); checked with the layout")
    m.add_argument("--precision", default="bf16", choices=("bf16", "fp8"))
    m.add_argument("--schedule", default="1f1b", choices=SCHEDULES)
    m.add_argument("--framework", default="megatron", choices=FRAMEWORKS)
    m.add_argument("--grad-dtype", default="", choices=GRAD_DTYPES,
                   help="gradients kept and reduced in (default: the framework's; Megatron's fp32)")
    m.add_argument("--moment-dtype", default="", choices=MOMENT_DTYPES,
                   help="Adam's moments (bf16: Megatron's precision-aware optimizer; default fp32)")
    m.add_argument("--master-dtype", default="", choices=MASTER_DTYPES,
                   help="the optimizer's master weights: fp32, remainder (16 bits beside each bf16 weight: "
                        "Megatron's precision-aware optimizer, NeMo 1.x's Apex DistributedFusedAdam) or none "
                        "(default: the framework's)")
    m.add_argument("--fp8-recipe", default="", choices=FP8_RECIPES,
                   help="Transformer Engine's FP8 scaling under Megatron (default delayed; mxfp8 on Blackwell)")
    m.add_argument("--fp8-weights", default="", choices=FP8_WEIGHTS,
                   help="Megatron's FP8 layers' weights: fp8 (FP8 parameters, --fp8-param-gather) or bf16 (TE caches "
                        "an FP8 copy of each); default: fp8 from ZeRO 1 on, bf16 at ZeRO 0")
    args = ap.parse_args(argv)
    if args.cmd == "estimate":
        return cmd_estimate(args)
    if args.cmd == "plan":
        return cmd_plan(args)
    if args.cmd in ("budget", "optimal"):
        return cmd_request(args)
    if args.cmd == "models":
        for name in MODEL_PRESETS:
            print(model_from_name(name).describe())
        return 0
    if args.cmd == "gpus":
        for g in GPU_PRESETS.values():
            print(f"{g.name:<11} {g.memory_gib:7.2f} GiB  bf16 {g.bf16_tflops:7.1f}  fp8 {g.fp8_tflops:7.1f} TFLOP/s  "
                  f"HBM {g.hbm_tbps} TB/s  ({g.source})")
        return 0
    if args.dp is None:
        gpus, split = args.nodes * args.gpus_per_node, args.tp * args.pp * args.cp
        if split < 1 or gpus % split:
            print(f"error: tp*pp*cp = {args.tp}*{args.pp}*{args.cp} = {split} does not divide the {args.nodes} x "
                  f"{args.gpus_per_node} = {gpus} GPUs; change a size or give --dp", file=sys.stderr)
            return 2
        args.dp = gpus // split
    if not args.gbs:
        args.gbs = args.dp * args.mbs
    return cmd_memory(args)


if __name__ == "__main__":
    sys.exit(main())
