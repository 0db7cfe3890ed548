"""Numbers the prose quotes, computed by the calculators when a chapter is rendered, so the text
can never disagree with the widgets. A chapter writes `{{ memory model=llama3-70b tp=8 pp=4 }}`;
`render` calls the function of that name with the settings and puts its formatted answer there.
Settings are the widgets' scenario keys (model, gpu, nodes, dp, tp, pp, cp, zero, mbs, gbs, seq,
recompute, schedule, precision, framework); every function states its unit in its output.
"""
from __future__ import annotations

import functools
import statistics

from calculators.time.attention import SINK_BACKWARD, window_fraction
from calculators.time.comm import Group, collective_time, experts_hit
from calculators.specs.errors import ConfigError
from calculators.time.flops import model_flops_per_token
from calculators.specs.hardware import gpu_from_name
from calculators.memory.estimate import estimate_memory
from calculators.pipeline.simulate import simulate
from calculators.specs.presets import model_from_name
from calculators.time.profiles import default_profile
from calculators.scenario import parse_hardware
from calculators.time.step import estimate_step
from calculators.time.timeline import step_timeline
from playbook.values import scenario_from

_INTS = ("nodes", "gpn", "dp", "dp_replicate", "tp", "pp", "cp", "ep", "vpp", "zero", "mbs", "gbs", "seq", "p", "m",
         "v", "n", "k", "offload_layers", "dispatch_sms")


def _typed(kw: dict) -> dict:
    return {k: (int(v) if k in _INTS else v) for k, v in kw.items()}


def params(model: str, part: str = "total") -> str:
    """Parameter count, billions: total, or active (a token's, the embedding's row included)."""
    m = model_from_name(model)
    if part not in ("total", "active"):
        raise ValueError(f"params part {part!r}: total or active")
    return f"{(m.total_params if part == 'total' else m.active_params) / 1e9:,.1f}B"


def memory(part: str = "total", **kw) -> str:
    """GiB on the most loaded GPU: total, params, grads, optimizer, activations, resident, other
    (the framework's buffers), host (its offloaded optimizer and weights, in host memory)."""
    est = estimate_memory(*scenario_from(_typed(kw)))
    d = est.as_dict()
    key = {"total": "total_gib", "params": "params_gib", "grads": "grads_gib", "optimizer": "optimizer_gib",
           "activations": "activations_gib", "resident": "resident_gib", "other": "other_gib",
           "host": "host_gib"}[part]
    return f"{d[key]:.1f} GiB"


def fits(**kw) -> str:
    est = estimate_memory(*scenario_from(_typed(kw)))
    return "fits" if est.fits else "does not fit"


def step(field: str = "time", **kw) -> str:
    """time (s), tps (tokens/s/GPU), mfu, bubble, optimizer (its step's seconds, Muon's NS included)."""
    s = estimate_step(*scenario_from(_typed(kw)))
    return {"time": f"{s.time_s:.2f} s", "tps": f"{s.tokens_per_s_per_gpu:,.0f} tokens/s/GPU",
            "mfu": f"{s.mfu:.0%}", "bubble": f"{s.bubble_fraction:.1%}",
            "optimizer": f"{s.breakdown.get('optimizer', 0.0):.2f} s"}[field]


def hit(experts: str, top_k: str, parts: str, field: str = "parts", groups: str = "0", per_token: str = "0") -> str:
    """Where a token's top_k experts land among `parts` nodes (each an equal share of the experts),
    routing balanced, drawn from `per_token` of `groups` expert groups where given (DeepSeek's
    node-limited routing): parts (expected nodes hit), deepep (copies crossing the network: one per
    other node hit), alltoall (copies crossing it: one per expert on another node)."""
    n, k = int(parts), int(top_k)
    hits = experts_hit(int(experts), k, n, (int(groups), int(per_token)))
    return {"parts": f"{hits:.2f}", "deepep": f"{hits * (n - 1) / n:.1f}", "alltoall": f"{k * (n - 1) / n:g}"}[field]


def bubble(schedule: str = "1f1b", p: str = "4", m: str = "8", v: str = "1", of: str = "compute") -> str:
    """Simulated bubble with equal stages, backward = 2 x forward: the busiest rank's idle time over
    its compute (the bubble ratio, (p-1)/m for 1F1B), or `of`="step", over the step."""
    vv = int(v) if schedule == "interleaved" else 1
    t = simulate(schedule, int(p), int(m), vv, f=1.0 / vv, b=1.0 / vv, w=1.0 / vv)
    return f"{ {'compute': t.bubble_fraction, 'step': t.idle / t.makespan}[of]:.1%}"


def flops(model: str, seq: str = "4096") -> str:
    """Model FLOPs per token (forward + backward), GFLOP."""
    return f"{model_flops_per_token(model_from_name(model), int(seq)) / 1e9:.1f} GFLOP"


def window(w: str = "128", gpu: str = "H100-80GB", kernel: str = "cudnn") -> str:
    """A layer attending within `w` keys: its rate over the pairs it attends as a fraction of the
    kernel's causal plateau (attention.window_fraction), forward and backward."""
    from calculators.specs.parallel import ATTENTION_KERNELS
    if kernel not in ATTENTION_KERNELS[1:]:
        raise ValueError(f"kernel {kernel!r} must be one of {', '.join(ATTENTION_KERNELS[1:])}")
    if int(w) < 1:
        raise ValueError(f"w must be a window of 1 key or more (got {w})")
    fwd, bwd = window_fraction(int(w), gpu_from_name(gpu).name, kernel)
    return f"{fwd:.2f} forward and {bwd:.2f} backward"


def sink() -> str:
    """cuDNN's backward time for attention sinks, per query token and head (attention.SINK_BACKWARD)."""
    return f"{SINK_BACKWARD * 1e9:.2f} ns"


def gpu(name: str, field: str = "bf16") -> str:
    g = gpu_from_name(name)
    return {"bf16": f"{g.bf16_tflops:,.0f} TFLOP/s", "fp8": f"{g.fp8_tflops:,.0f} TFLOP/s",
            "hbm": f"{g.hbm_tbps} TB/s", "memory": f"{g.memory_gib:.2f} GiB",
            "nvlink": f"{g.intra_node_gbps:.0f} GB/s", "nic": f"{g.inter_node_gbps:.0f} GB/s"}[field]


def collective(op: str = "all_reduce", size: str = "268435456", n: str = "8", k: str = "8",
               gpu: str = "H100-80GB") -> str:
    """Time of one collective (ms) over n GPUs, k per node."""
    n_, k_ = int(n), int(k)
    cluster = parse_hardware({"gpu": gpu, "nodes": max(1, n_ // k_)})
    t = collective_time(op, float(size), Group(n_, k_, max(1, n_ // k_)), cluster, default_profile(cluster.gpu.name))
    return f"{t * 1e3:.2f} ms"


def first_step_peak(**kw) -> str:
    """Peak of the first training step (no Adam moments yet), GiB."""
    model, cluster, par = scenario_from(_typed(kw))
    phases = step_timeline(estimate_memory(model, cluster, par), par)
    return f"{max(sum(r.values()) for name, r in phases if name.startswith('step 1')):.1f} GiB"


def plan(model: str, nodes: str, seq: str, gbs: str, gpu: str = "H100-80GB") -> str:
    """The planner's best layout and its step time."""
    from calculators.scenario import plan_answer
    ans = plan_answer({"model": {"preset": model}, "hardware": {"gpu": gpu, "nodes": int(nodes)},
                       "seq": int(seq), "gbs": int(gbs)})
    if not ans["plans"]:
        return f"nothing fits (smallest cluster: {ans['min_gpus']} GPUs)"
    best = ans["plans"][0]
    return f"{best['label']} ({best['step']['time_s']:.1f} s per step, MFU {best['step']['mfu']:.0%})"


def budget(model: str, tokens: str, gpus: str, seq: str = "8192", gbs: str = "1024", field: str = "days",
           at: str = "", gpu: str = "H100-80GB") -> str:
    """A training run over the cluster sizes `gpus` (comma list; calculators/planning/budget.py), at size `at`
    (default: the first): days, gpu_hours, cost, tps, goodput, efficiency, plan; or knee (GPUs)."""
    from calculators.planning.budget import budget_answer
    sizes = [int(n) for n in gpus.split(",")]
    ans = budget_answer({"model": {"preset": model}, "hardware": {"gpu": gpu}, "tokens": float(tokens),
                         "seq": int(seq), "gbs": int(gbs), "gpus": sizes})
    if field == "knee":
        return f"{ans['knee_gpus']:,} GPUs"
    o = ans["options"][sizes.index(int(at)) if at else 0]
    if o["error"]:
        return f"nothing fits on {o['gpus']:,} GPUs"
    return {"days": f"{o['days']:,.0f} days", "gpu_hours": f"{o['gpu_hours'] / 1e6:,.2f}M GPU-hours",
            "cost": f"{o['cost'] / 1e6:,.1f} million dollars", "tps": f"{o['tokens_per_s_per_gpu']:,.0f} tokens/s/GPU",
            "goodput": f"{o['goodput']:.1%}", "efficiency": f"{o['efficiency']:.0%}", "plan": f"`{o['plan']}`"}[field]


def goodput(model: str, gpus: str, field: str = "goodput") -> str:
    """Goodput of a run on `gpus` GPUs with the defaults (calculators/planning/goodput.py, Megatron's layout):
    goodput, mtbf (hours), checkpoint (TB), write (s), interval (minutes); gpu_years: one GPU's mean time
    between failures at the default rate."""
    from calculators.planning.goodput import FAILURES_PER_GPU_DAY, goodput as expected
    g = expected(model_from_name(model), int(gpus))
    return {"goodput": f"{g.goodput:.1%}", "mtbf": f"{g.mtbf_s / 3600:.1f} hours",
            "interval": f"{g.interval_s / 60:.1f} minutes", "checkpoint": f"{g.checkpoint_gb / 1e3:.1f} TB",
            "write": f"{g.write_s:.1f} s", "gpu_years": f"{1 / (FAILURES_PER_GPU_DAY * 365.25):.1f} years"}[field]


def optimal(gpu_hours: str, gpu: str = "H100-80GB", field: str = "params", smaller: str = "0.5") -> str:
    """Chinchilla's compute-optimal model for a budget of H100-hours at 40% MFU (calculators/planning/chinchilla.py):
    params, tokens, ratio (tokens per parameter), flops; for a model `smaller` x the size: small_tokens,
    extra (training compute), break_even (tokens served until it pays)."""
    from calculators.planning.chinchilla import optimal_answer
    ans = optimal_answer({"gpu_hours": float(gpu_hours), "hardware": {"gpu": gpu}, "smaller": [float(smaller)]})
    s = ans["smaller"][0]
    return {"params": f"{ans['params'] / 1e9:,.0f}B parameters", "tokens": f"{ans['tokens'] / 1e12:,.1f}T tokens",
            "ratio": f"{ans['tokens_per_param']:,.0f}", "flops": f"{ans['flops']:.2g} FLOPs",
            "small_tokens": f"{(s['tokens'] or 0) / 1e12:,.1f}T tokens",
            "extra": f"{(s['extra_compute'] or 0):.0%}",
            "break_even": f"{(s['break_even_tokens'] or 0) / 1e12:,.1f}T tokens"}[field]


def measured(nodes: str = "1-64", field: str = "median") -> str:
    """The bundled measured runs (benchmarks/results/) against the predictions stored with them, as
    chapter 13's explorer joins them, on `nodes` (a range "a-b"): median (of |predicted/measured -
    1|), signed (median of predicted/measured - 1, + = predicted too fast) or runs."""
    from playbook.measured import match, sources
    lo, _, hi = nodes.partition("-")
    pts, _, _ = match(sources(), (), "tokens/s/GPU", "", "all")
    errors = [p["predicted"] / p["measured"] - 1 for p in pts
              if not p["series"] and int(lo) <= p["nodes"] <= int(hi or lo)]
    if field == "runs":
        return f"{len(errors):,}"
    if field == "median":
        return f"{statistics.median(map(abs, errors)):.0%}"
    return f"{statistics.median(errors):+.0%}"


def memory_check(field: str = "accuracy") -> str:
    """nanotron's runs (validation.memory): accuracy (fit vs out-of-memory called right), median
    and p90 (|predicted - measured| / measured, allocated between steps), runs (with a clear
    outcome), usable (the fit rule's share of the GPU's memory, estimate.usable_fraction)."""
    from calculators.memory.estimate import USABLE, USABLE_FRACTION
    if field == "usable":
        return f"{USABLE_FRACTION:.0%} ({USABLE['megatron']:.0%} under Megatron's recipes)"
    c = _memory_check()
    return {"accuracy": f"{c.accuracy:.0%}", "median": f"{c.alloc_median_error:.1%}",
            "p90": f"{c.alloc_p90_error:.1%}", "runs": f"{c.clear_outcome:,}"}[field]


@functools.lru_cache(maxsize=1)
def _memory_check():
    from validation.memory import check
    return check()


def published(group: str = "dense", field: str = "median") -> str:
    """The published runs of validation.published, scored: `group` dense, moe or moe:SOURCE;
    median, worst (absolute errors), signed (median, + = predicted too fast) or runs."""
    name = {"dense": "dense", "moe": "mixture of experts"}.get(group) or f"mixture of experts, {group[4:]}"
    n, median, worst, signed = _published_summary()[name]
    return {"median": f"{median:.0%}", "worst": f"{worst:.0%}", "signed": f"{signed:+.0%}", "runs": f"{n}"}[field]


@functools.lru_cache(maxsize=1)
def _published_summary() -> dict:
    from validation.published import check, summary
    return summary(check())


def stacks(field: str = "median") -> str:
    """The published runs of other stacks (validation.stacks), scored: median or p90 (absolute
    errors), runs, sources."""
    n, median, p90, sources = _stacks_summary()
    return {"median": f"{median:.0%}", "p90": f"{p90:.0%}", "runs": f"{n}", "sources": f"{sources}"}[field]


@functools.lru_cache(maxsize=1)
def _stacks_summary() -> tuple:
    from validation.stacks import load, score, summary
    runs = load()[0]
    n, median, p90 = summary([score(r) for r in runs])["all"][:3]
    return n, median, p90, len({r.source for r in runs})


NUMBERS = {f.__name__: f for f in (params, memory, fits, step, hit, bubble, flops, window, sink, gpu, collective,
                                   first_step_peak, plan, budget, goodput, optimal, measured, memory_check, published,
                                   stacks)}


def render(name: str, kwargs: dict) -> str:
    if name not in NUMBERS:
        raise ConfigError(f"unknown number {name!r} in a chapter; known: {', '.join(NUMBERS)}")
    return NUMBERS[name](**kwargs)
