"""The planner's search space: the values each knob may take for a model, a cluster and a
sequence length (defaults, narrowed by the user's constraints), and the valid (tp, cp, pp, dp,
ep, etp) structures on the cluster."""
from __future__ import annotations

from .errors import ConfigError
from .frameworks import LIMITS
from .hardware import ClusterSpec
from .models import ModelSpec
from .parallel import DISPATCHERS, PRECISIONS, RECOMPUTE, SCHEDULES, ZERO_STAGES

KNOBS = ("tp", "cp", "ep", "etp", "pp", "vpp", "zero", "mbs", "recompute", "schedule", "precision", "tp_overlap",
         "dispatcher")
DEFAULT_SCHEDULES = ("1f1b", "zb", "interleaved", "dualpipe")
MIN_CP_CHUNK = 2048              # default space: no CP below this many tokens per rank


def _divisors(n: int) -> list[int]:
    return [k for k in range(1, n + 1) if n % k == 0]


def space(model: ModelSpec, cluster: ClusterSpec, seq: int, constraints: dict) -> dict:
    """Allowed values per knob: the defaults, narrowed by `constraints` (a value or a list)."""
    unknown = sorted(set(constraints) - set(KNOBS) - {"framework", "tp_across_nodes", "uneven_split", "top"})
    if unknown:
        raise ConfigError(f"plan constraints: unknown key(s) {', '.join(map(repr, unknown))}; "
                          f"known: {', '.join(KNOBS)}, framework, tp_across_nodes, uneven_split, top")
    world, gpn = cluster.world, cluster.gpus_per_node
    tp_cap = world if constraints.get("tp_across_nodes") else gpn
    sp = {
        "tp": [t for t in _divisors(world) if t <= min(tp_cap, model.heads)],
        # CP pays off for long sequences; below 2k tokens per rank its ring steps are too short
        "cp": [c for c in (1, 2, 4, 8, 16, 32) if world % c == 0 and (c == 1 or seq // c >= MIN_CP_CHUNK)],
        "ep": _divisors(model.moe.experts) if model.moe else [1],
        "etp": [0, 1],           # 0: expert TP = tp (Megatron's default); 1: experts not TP-sharded
        "pp": [p for p in _divisors(world) if p <= model.layers],
        "vpp": [2, 3, 4, 6, 8],
        "zero": [0, 1, 2, 3],
        "mbs": [1, 2, 4, 8],
        "recompute": list(RECOMPUTE),
        "schedule": list(DEFAULT_SCHEDULES),
        "precision": ["bf16"],
        # TP comm pipelined with its GEMMs: never slower and no memory in the model, so with TP it
        # is taken where allowed; by default where the framework has it built in (Megatron/TE)
        "tp_overlap": [constraints.get("framework", "megatron") == "megatron"],
        # MoE dispatch: DeepEP is never slower in the model, but it is a separate install; taken
        # only where the user allows it (dispatcher: deepep)
        "dispatcher": ["alltoall"],
    }
    for knob in KNOBS:
        if knob in constraints:
            v = constraints[knob]
            sp[knob] = list(v) if isinstance(v, (list, tuple)) else [v]
            if not sp[knob]:
                raise ConfigError(f"plan constraints: {knob} allows no value")
    for knob, low in (("tp", 1), ("cp", 1), ("ep", 1), ("etp", 0), ("pp", 1), ("vpp", 1), ("mbs", 1)):
        wrong = [v for v in sp[knob] if not (isinstance(v, int) and not isinstance(v, bool) and v >= low)]
        if wrong:
            raise ConfigError(f"plan constraints: {knob} must be whole numbers >= {low} (got {wrong})")
    wrong = [z for z in sp["zero"] if z not in ZERO_STAGES or isinstance(z, bool)] + \
        [x for x in sp["precision"] if x not in PRECISIONS]
    if wrong:
        raise ConfigError(f"plan constraints: unknown zero/precision {wrong}; zero {list(ZERO_STAGES)}, "
                          f"precision {list(PRECISIONS)}")
    bad = [s for s in sp["schedule"] if s not in SCHEDULES] + \
        [r for r in sp["recompute"] if r not in RECOMPUTE] + \
        [v for v in sp["tp_overlap"] if not isinstance(v, bool)] + \
        [d for d in sp["dispatcher"] if d not in DISPATCHERS]
    if bad:
        raise ConfigError(f"plan constraints: unknown schedule/recompute/tp_overlap/dispatcher {bad}; schedules "
                          f"{SCHEDULES}, recompute {RECOMPUTE}, tp_overlap true or false, dispatcher {DISPATCHERS}")
    framework = constraints.get("framework", "megatron")
    for knob, runs in LIMITS.get(framework, {}).items():
        outside = [v for v in sp[knob] if v not in runs]
        if outside and knob in constraints:
            raise ConfigError(f"plan constraints: {framework} does not run {knob} {outside}; it runs "
                              f"{knob} {list(runs)}: allow those, or plan for another framework")
        sp[knob] = [v for v in sp[knob] if v in runs]
    if model.moe is None:
        sp["ep"], sp["etp"] = [1], [0]
    sp["recompute"] = [r for r in RECOMPUTE if r in sp["recompute"]]   # least first
    return sp


def structures(model, cluster, space, gbs):
    """(tp, cp, pp, dp, ep, etp) on the cluster; yields (sizes, None) or (sizes, why invalid)."""
    world = cluster.world
    for tp in space["tp"]:
        for cp in space["cp"]:
            for pp in space["pp"]:
                if world % (tp * cp * pp):
                    yield dict(tp=tp, cp=cp, pp=pp, dp=1, ep=1, etp=0), \
                        f"tp*cp*pp = {tp}*{cp}*{pp} does not divide the {world} GPUs"
                    continue
                dp = world // (tp * cp * pp)
                for ep in space["ep"]:
                    for etp in space["etp"]:
                        sizes = dict(tp=tp, cp=cp, pp=pp, dp=dp, ep=ep, etp=etp)
                        if etp == 1 and tp == 1 and 0 in space["etp"]:
                            continue     # the same as etp=tp
                        if gbs % dp:
                            yield sizes, f"gbs={gbs} is not a multiple of dp={dp}"
                        elif model.moe and (dp * cp * tp) % (ep * (etp or tp)):
                            yield sizes, f"ep*etp={ep * (etp or tp)} does not divide dp*cp*tp={dp * cp * tp}"
                        else:
                            yield sizes, None
