"""Time, cost and goodput to train: for a model, a token count, a GPU and one or more cluster
sizes, the planner's best layout at each size, its throughput, the days, GPU-hours and cost of
the whole run with failures and checkpoints paid, and where adding GPUs stops paying.

    answer = budget_answer({"model": {"preset": "llama3-405b"}, "hardware": {"gpu": "H100-80GB"},
                            "tokens": 15.6e12, "seq": 8192, "gbs": 2048, "gpus": [4096, 16384]})
    answer["options"][1]["days"]

Per cluster size N (one option each, in the order asked):
    plan        the planner's best layout (planner.plan, its whole space, as `plan` answers it)
    ideal_days  tokens / (tokens/s/GPU x N) / 86,400
    days        ideal_days / goodput            (goodput.py: failures, checkpoints, restarts at N)
    gpu_hours   N x days x 24;   cost = gpu_hours x price_per_gpu_hour

The global batch is `gbs` sequences at every size. With `max_batch_tokens` it grows with the
cluster, as large runs raise it: `gbs` at the smallest size asked, doubled each time the cluster
doubles, while gbs x seq stays within max_batch_tokens (beyond, larger clusters split the same
batch finer).

Efficiency is each size's goodput-weighted tokens/s per GPU over the smallest fitting size's (1:
linear scaling). A step's marginal efficiency is the throughput it adds per added GPU, on the same
scale; the knee is the last size before the first step whose marginal efficiency is under
KNEE_MARGINAL: past it, each added GPU-hour buys less than half the tokens the first ones did.

Speed: each (model, hardware, N, seq, gbs, constraints) is planned once and kept in a bounded
cache; with `workers` > 1 (the CLI: one per core) the sizes not cached are planned in parallel
forked processes, where the calling process has a single thread. The planner's space is not
narrowed. Llama 3 405B on 8 sizes from 1,024 to 32,768 H100s takes about 7 s on one core, 4 s on two.
"""
from __future__ import annotations

import json
import math
import multiprocessing
import threading
from collections import OrderedDict
from concurrent.futures import ProcessPoolExecutor

from ..specs import limits
from ..specs.errors import ConfigError
from ..specs.frameworks import master_dtype
from .explain import label
from .goodput import CHECKPOINT_GBPS, FAILURES_PER_GPU_DAY, RESTART_S, goodput
from ..scenario import parse_hardware, parse_model, parse_profile
from ..specs.validate import check_fields, keys, show, whole_list

PRICE = 2.0                      # $ per GPU-hour: DeepSeek-V3's report prices its H800 hours at $2 (section 1)
KNEE_MARGINAL = 0.5              # a step adding under half a GPU's worth per added GPU is past the knee
CACHE = 256                      # plans kept (each a few kB)
KEYS = {"model", "hardware", "tokens", "seq", "gbs", "gpus", "price_per_gpu_hour", "max_batch_tokens",
        "failures_per_gpu_day", "checkpoint_gbps", "restart_s", "checkpoint_interval_s", "constraints"}
HARDWARE_KEYS = {"gpu", "gpus_per_node", "intra_node_gbps", "inter_node_gbps", "host_optimizer_gbps", "profile"}
_plans: OrderedDict = OrderedDict()      # key -> ("ok", Plan) | ("impossible", message, min_gpus)


# ----------------------------------------------------------------------------- the request
def parse(request) -> dict:
    """The request checked field by field (strict types, limits.BUDGET), with defaults filled in."""
    if not isinstance(request, dict):
        raise ConfigError(f"a budget request must be a JSON object with model, hardware, tokens, seq, gbs and gpus "
                          f"(got {show(request)})")
    unknown = sorted(map(str, set(request) - KEYS))
    if unknown:
        raise ConfigError(f"budget request has unknown key(s) {keys(unknown)}; "
                          f"use {', '.join(sorted(KEYS))}")
    missing = [k for k in ("model", "tokens", "seq", "gbs", "gpus") if k not in request]
    if missing:
        raise ConfigError(f"budget request lacks {', '.join(missing)}")
    req = {"price_per_gpu_hour": PRICE, "failures_per_gpu_day": FAILURES_PER_GPU_DAY,
           "checkpoint_gbps": CHECKPOINT_GBPS, "restart_s": RESTART_S, **request}
    problems = check_fields(req, "budget", {k: v for k, v in limits.BUDGET.items() if k in req})
    gpus = req["gpus"] if isinstance(req["gpus"], list) else [req["gpus"]]
    whole_list(problems, "budget.gpus", gpus, 1, limits.MAX_GPUS, limits.MAX_SIZES)
    if not problems and not gpus:
        problems.append("budget.gpus must hold at least one cluster size")
    if not problems and req["tokens"] < req["gbs"] * req["seq"]:
        problems.append(f"budget.tokens ({req['tokens']:,.0f}) is less than one step's gbs x seq = "
                        f"{req['gbs']:,} x {req['seq']:,}: train on more tokens or lower gbs")
    if not problems and "max_batch_tokens" in req and req["gbs"] * req["seq"] > req["max_batch_tokens"]:
        problems.append(f"budget.max_batch_tokens ({req['max_batch_tokens']:,}) is below gbs x seq = "
                        f"{req['gbs']:,} x {req['seq']:,}: raise it or lower gbs")
    hardware = req.get("hardware", {})
    if not isinstance(hardware, dict):
        problems.append(f"budget.hardware must be an object like {{'gpu': 'H100-80GB'}} (got {show(hardware)})")
    elif set(hardware) - HARDWARE_KEYS:
        problems.append(f"budget.hardware takes {', '.join(sorted(HARDWARE_KEYS))}; the cluster sizes are "
                        f"budget.gpus (got {keys(sorted(set(hardware) - HARDWARE_KEYS, key=str))})")
    if not isinstance(req.get("constraints", {}), dict):
        problems.append(f"budget.constraints must be an object, as plan's (got {show(req['constraints'])})")
    if problems:
        raise ConfigError(problems)
    base = parse_hardware(hardware)                 # checks the GPU and links; its gpus_per_node
    for i, n in enumerate(gpus):
        if n > base.gpus_per_node and n % base.gpus_per_node or n < base.gpus_per_node and base.gpus_per_node % n:
            problems.append(f"budget.gpus[{i}] = {n:,} is not a whole number of {base.gpus_per_node}-GPU nodes "
                            "(nor a part of one that divides it)")
    if problems:
        raise ConfigError(problems)
    return {**req, "gpus": gpus, "hardware": hardware, "model": parse_model(req["model"]), "gpn": base.gpus_per_node,
            "hardware_key": json.dumps(hardware, sort_keys=True),
            "constraints_key": json.dumps(req.get("constraints", {}), sort_keys=True)}


def batch_at(req: dict, gpus: int) -> int:
    """Global batch (sequences) at `gpus`: gbs, or with max_batch_tokens gbs doubled per doubling
    of the cluster over the smallest size asked, within max_batch_tokens."""
    if "max_batch_tokens" not in req:
        return req["gbs"]
    doublings = int(math.log2(gpus / min(req["gpus"])) + 1e-9)
    cap = int(math.log2(req["max_batch_tokens"] / (req["gbs"] * req["seq"])) + 1e-9)
    return req["gbs"] * 2 ** max(0, min(doublings, cap))


# ------------------------------------------------------------------------------ planning
def _search(key: tuple, seconds: float | None = None) -> tuple:
    """The planner's best layout for one size: ("ok", Plan) or ("impossible", message, min_gpus).
    Top level (and its arguments plain data) so that a worker process can run it."""
    from .planner import plan
    model, hardware_key, gpus, seq, gbs, constraints_key = key
    hardware = json.loads(hardware_key)
    with limits.time_budget(seconds if seconds is not None else math.inf, "this budget"):
        cluster = _cluster(hardware, gpus)
        result = plan(model, cluster, seq, gbs, json.loads(constraints_key), parse_profile(hardware, cluster),
                      only_best=True)
    if result.plans:
        return ("ok", result.plans[0])
    return ("impossible", result.impossible, result.min_gpus)


def _cluster(hardware: dict, gpus: int):
    gpn = parse_hardware(hardware).gpus_per_node
    nodes, per_node = (gpus // gpn, gpn) if gpus >= gpn else (1, gpus)
    return parse_hardware({k: v for k, v in hardware.items() if k != "profile"} | {"nodes": nodes,
                                                                                 "gpus_per_node": per_node})


def _remember(key, value) -> None:
    _plans[key] = value
    _plans.move_to_end(key)
    while len(_plans) > CACHE:
        _plans.popitem(last=False)


def plans_for(keys: list, workers: int = 1) -> dict:
    """key -> _search's answer, from the cache where it can; the rest in `workers` processes."""
    todo = [k for k in dict.fromkeys(keys) if k not in _plans]
    # forked workers start at once and import nothing; fork is safe only in a process with one
    # thread (a server's other threads may hold locks a child would inherit), else plan in turn
    if workers > 1 and len(todo) > 1 and "fork" in multiprocessing.get_all_start_methods() \
            and threading.active_count() == 1:
        pool = ProcessPoolExecutor(min(workers, len(todo)), mp_context=multiprocessing.get_context("fork"))
        try:
            futures = [(k, pool.submit(_search, k, limits.remaining())) for k in todo]
            for k, future in futures:
                _remember(k, future.result())
        finally:
            pool.shutdown(wait=False, cancel_futures=True)
    for k in todo:
        if k not in _plans:
            limits.check_time()
            _remember(k, _search(k))
    for k in keys:
        _plans.move_to_end(k)
    return {k: _plans[k] for k in keys}


# -------------------------------------------------------------------------------- answer
def _option(req: dict, gpus: int, gbs: int, found: tuple) -> dict:
    empty = dict.fromkeys(("plan", "parallel", "tokens_per_s_per_gpu", "mfu", "step_s", "ideal_days", "days",
                           "gpu_hours", "cost", "goodput", "checkpoint", "efficiency", "marginal_efficiency"))
    base = {"gpus": gpus, "gbs": gbs, "batch_tokens": gbs * req["seq"], **empty, "error": None, "min_gpus": None}
    if found[0] != "ok":
        return {**base, "error": found[1], "min_gpus": found[2] or None}
    best = found[1]
    try:
        gp = goodput(req["model"], gpus, best.par.framework, best.par.zero, req["failures_per_gpu_day"],
                     req["checkpoint_gbps"], req["restart_s"], req.get("checkpoint_interval_s"),
                     master=master_dtype(best.par))
    except ConfigError as exc:
        return {**base, "plan": best.label(), "error": str(exc)}
    tps = best.step.tokens_per_s_per_gpu
    ideal_s = req["tokens"] / (tps * gpus)
    wall_s = ideal_s / gp.goodput
    gpu_hours = gpus * wall_s / 3600
    parallel = {k: getattr(best.par, k) for k in ("dp", "tp", "pp", "cp", "ep", "vpp", "zero", "mbs", "recompute",
                                                    "schedule", "precision", "framework", "grad_dtype",
                                                    "moment_dtype", "master_dtype", "fp8_recipe", "fp8_weights",
                                                    "offload_layers", "offload_modules", "optimizer_offload",
                                                    "param_offload", "optimizer", "tiled_mlp", "loss",
                                                    "elementwise")}
    return {**base, "plan": label(best.par), "parallel": parallel, "tokens_per_s_per_gpu": tps,
            "mfu": best.step.mfu, "step_s": best.step.time_s, "ideal_days": ideal_s / 86_400,
            "days": wall_s / 86_400, "gpu_hours": gpu_hours, "cost": gpu_hours * req["price_per_gpu_hour"],
            "goodput": gp.goodput, "checkpoint": gp.as_dict()}


def _scaling(options: list) -> tuple:
    """Fill each fitting option's efficiency and marginal efficiency; (knee GPUs, sentence, whether
    a step past the knee was asked: else the knee GPUs are the largest size, where scaling still pays)."""
    fit = sorted((o for o in options if o["error"] is None), key=lambda o: o["gpus"])
    if not fit:
        return None, "", False
    rate = lambda o: o["tokens_per_s_per_gpu"] * o["goodput"]        # noqa: E731 - useful tokens/s per GPU
    unit = rate(fit[0])
    knee, past = fit[-1], None
    for prev, o in zip([None] + fit, fit):
        o["efficiency"] = rate(o) / unit
        if prev is not None:
            o["marginal_efficiency"] = (rate(o) * o["gpus"] - rate(prev) * prev["gpus"]) / \
                (o["gpus"] - prev["gpus"]) / unit if o["gpus"] > prev["gpus"] else o["efficiency"]
            if past is None and o["marginal_efficiency"] < KNEE_MARGINAL:
                knee, past = prev, o
    if len(fit) == 1:
        return knee["gpus"], f"one cluster size: {knee['gpus']:,} GPUs.", False
    if past is None:
        return knee["gpus"], (f"Scaling still pays at {knee['gpus']:,} GPUs, the largest size asked: every step "
                              f"adds at least {KNEE_MARGINAL:.0%} of a GPU's throughput per added GPU."), False
    sooner = 1 - past["days"] / knee["days"]
    return knee["gpus"], (f"The knee is at {knee['gpus']:,} GPUs: going to {past['gpus']:,} adds "
                          f"{past['marginal_efficiency']:.0%} of a GPU's throughput per added GPU (efficiency vs "
                          f"linear {past['efficiency']:.0%}): the run takes "
                          f"{past['gpu_hours'] / knee['gpu_hours'] - 1:.0%} more GPU-hours "
                          + (f"to finish {sooner:.0%} sooner." if sooner > 0 else "and finishes later.")), True


def budget_answer(request, workers: int = 1) -> dict:
    """The budget contract: {"options": [...]} one per size in the order asked, each with gpus,
    plan, tokens_per_s_per_gpu, days, gpu_hours, cost and goodput (None where the model does not
    fit, with `error` and `min_gpus`), plus the knee. ConfigError when nothing fits anywhere."""
    req = parse(request)
    model = req["model"]
    batches = [batch_at(req, n) for n in req["gpus"]]
    keys = [(model, req["hardware_key"], n, req["seq"], b, req["constraints_key"])
            for n, b in zip(req["gpus"], batches)]
    found = plans_for(keys, workers)
    options = [_option(req, n, b, found[k]) for n, b, k in zip(req["gpus"], batches, keys)]
    if all(o["error"] for o in options):
        largest = max(options, key=lambda o: o["gpus"])
        raise ConfigError(f"{model.name} trains on none of the cluster sizes asked "
                          f"({', '.join(f'{n:,}' for n in req['gpus'])} GPUs): at {largest['gpus']:,}, "
                          + largest["error"])
    knee, sentence, past_knee = _scaling(options)
    fitting = [o for o in options if o["error"] is None]
    ramp = "gbs at the smallest size, doubled with the cluster up to max_batch_tokens"
    notes = [f"global batch: {ramp if 'max_batch_tokens' in req else 'gbs at every size'}",
             f"goodput: {req['failures_per_gpu_day']:.3g} failures per GPU-day, checkpoints at "
             f"{req['checkpoint_gbps']:,.0f} GB/s, {req['restart_s']:,.0f} s to restart (calculators/planning/goodput.py)",
             "not in the time: batch or sequence ramp-up, evaluation, ablations, long-context or annealing stages",
             f"cost: GPU-hours x {req['price_per_gpu_hour']:g} per GPU-hour"]
    return {"model": model.name, "params": model.total_params, "tokens": req["tokens"], "seq": req["seq"],
            "gpu": parse_hardware(req["hardware"]).gpu.name, "price_per_gpu_hour": req["price_per_gpu_hour"],
            "options": options, "knee_gpus": knee, "knee": sentence, "past_knee": past_knee,
            "fastest_gpus": min(fitting, key=lambda o: o["days"])["gpus"],
            "cheapest_gpus": min(fitting, key=lambda o: o["gpu_hours"])["gpus"], "notes": notes}


def text(answer: dict) -> str:
    """The answer as a table for people (`python -m calculators budget --text`)."""
    head = (f"{answer['model']} on {answer['tokens']:.3g} tokens (seq {answer['seq']:,}), {answer['gpu']}, "
            f"{answer['price_per_gpu_hour']:g} per GPU-hour\n\n"
            f"{'GPUs':>9} {'batch':>10} {'tok/s/GPU':>9} {'MFU':>5} {'goodput':>7} {'days':>7} {'GPU-hours':>10} "
            f"{'cost':>11} {'eff.':>5}  layout")
    rows = []
    for o in answer["options"]:
        if o["error"]:
            rows.append(f"{o['gpus']:>9,} {o['gbs']:>10,}  {o['error']}")
            continue
        rows.append(f"{o['gpus']:>9,} {o['gbs']:>10,} {o['tokens_per_s_per_gpu']:>9,.0f} {o['mfu']:>5.1%} "
                    f"{o['goodput']:>7.1%} {o['days']:>7,.1f} {o['gpu_hours']:>10.4g} {o['cost']:>11,.0f} "
                    f"{o['efficiency']:>5.0%}  {o['plan']}")
    return "\n".join([head, *rows, "", answer["knee"], *(f"note: {n}" for n in answer["notes"])])
