"""Numbers the prose quotes, computed by the calculators when a chapter is rendered, so the text
can never disagree with the widgets. A chapter writes `{{ memory model=llama3-70b tp=8 pp=4 }}`;
`render` calls the function of that name with the settings and puts its formatted answer there.
Settings are the widgets' scenario keys (model, gpu, nodes, dp, tp, pp, cp, zero, mbs, gbs, seq,
recompute, schedule, precision, framework); every function states its unit in its output.
"""
from __future__ import annotations

from calculators.comm import Group, collective_time, experts_hit
from calculators.errors import ConfigError
from calculators.flops import model_flops_per_token
from calculators.hardware import gpu_from_name
from calculators.memory import estimate_memory
from calculators.pipeline import simulate
from calculators.presets import model_from_name
from calculators.profiles import default_profile
from calculators.scenario import parse_hardware
from calculators.step import estimate_step
from calculators.timeline import step_timeline
from playbook.values import scenario_from

_INTS = ("nodes", "gpn", "dp", "tp", "pp", "cp", "ep", "vpp", "zero", "mbs", "gbs", "seq", "p", "m", "v", "n", "k")


def _typed(kw: dict) -> dict:
    return {k: (int(v) if k in _INTS else v) for k, v in kw.items()}


def params(model: str) -> str:
    """Parameter count, billions."""
    return f"{model_from_name(model).total_params / 1e9:.1f}B"


def memory(part: str = "total", **kw) -> str:
    """GiB on the most loaded GPU: total, params, grads, optimizer, activations, resident."""
    est = estimate_memory(*scenario_from(_typed(kw)))
    d = est.as_dict()
    key = {"total": "total_gib", "params": "params_gib", "grads": "grads_gib", "optimizer": "optimizer_gib",
           "activations": "activations_gib", "resident": "resident_gib"}[part]
    return f"{d[key]:.1f} GiB"


def fits(**kw) -> str:
    est = estimate_memory(*scenario_from(_typed(kw)))
    return "fits" if est.fits else "does not fit"


def step(field: str = "time", **kw) -> str:
    """time (s), tps (tokens/s/GPU), mfu, bubble."""
    s = estimate_step(*scenario_from(_typed(kw)))
    return {"time": f"{s.time_s:.2f} s", "tps": f"{s.tokens_per_s_per_gpu:,.0f} tokens/s/GPU",
            "mfu": f"{s.mfu:.0%}", "bubble": f"{s.bubble_fraction:.1%}"}[field]


def hit(experts: str, top_k: str, parts: str, field: str = "parts") -> str:
    """Where a token's top_k experts land among `parts` nodes (each an equal share of the experts),
    routing balanced: parts (expected nodes hit), deepep (copies crossing the network: one per other
    node hit), alltoall (copies crossing it: one per expert on another node)."""
    n, k = int(parts), int(top_k)
    hits = experts_hit(int(experts), k, n)
    return {"parts": f"{hits:.2f}", "deepep": f"{hits * (n - 1) / n:.1f}", "alltoall": f"{k * (n - 1) / n:g}"}[field]


def bubble(schedule: str = "1f1b", p: str = "4", m: str = "8", v: str = "1") -> str:
    """Simulated bubble with equal stages, backward = 2 x forward."""
    vv = int(v) if schedule == "interleaved" else 1
    t = simulate(schedule, int(p), int(m), vv, f=1.0 / vv, b=1.0 / vv, w=1.0 / vv)
    return f"{t.bubble_fraction:.1%}"


def flops(model: str, seq: str = "4096") -> str:
    """Model FLOPs per token (forward + backward), GFLOP."""
    return f"{model_flops_per_token(model_from_name(model), int(seq)) / 1e9:.1f} GFLOP"


def gpu(name: str, field: str = "bf16") -> str:
    g = gpu_from_name(name)
    return {"bf16": f"{g.bf16_tflops:,.0f} TFLOP/s", "fp8": f"{g.fp8_tflops:,.0f} TFLOP/s",
            "hbm": f"{g.hbm_tbps} TB/s", "memory": f"{g.memory_gib:.0f} GiB",
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
    phases = step_timeline(estimate_memory(model, cluster, par), par.framework)
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


NUMBERS = {f.__name__: f for f in (params, memory, fits, step, hit, bubble, flops, gpu, collective, first_step_peak,
                                   plan)}


def render(name: str, kwargs: dict) -> str:
    if name not in NUMBERS:
        raise ConfigError(f"unknown number {name!r} in a chapter; known: {', '.join(NUMBERS)}")
    return NUMBERS[name](**kwargs)
