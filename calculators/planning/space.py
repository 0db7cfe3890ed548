"""The planner's search space: the values each knob may take for a model, a cluster and a
sequence length (defaults, narrowed by the user's constraints), and the valid (tp, cp, pp, dp,
ep, etp) structures on the cluster."""
from __future__ import annotations

from dataclasses import replace

from ..memory.estimate import ddp_buckets, late_grads
from ..specs import limits
from ..specs.errors import ConfigError
from ..specs.frameworks import DEFAULT_LIMITS, LIMITS
from ..specs.hardware import ClusterSpec
from ..specs.models import ModelSpec
from ..specs.optimizers import OPTIMIZERS
from ..specs.limits import PARALLEL, PLAN
from ..specs.parallel import (DISPATCHERS, ELEMENTWISE_KERNELS, EXPERT_KERNELS, FP8_RECIPES, FP8_WEIGHTS, FRAMEWORKS,
                              GRAD_DTYPES, LOSS_KERNELS, MASTER_DTYPES, MOMENT_DTYPES, PRECISIONS, RECOMPUTE, SCHEDULES,
                              derive, zero_shards)
from ..specs.recompute import (MODULES_TEXT, levels as recompute_levels, modules, offload_modules,
                               order as recompute_order)
from ..specs.validate import choice, flag, integer, keys, number, show

KNOBS = ("tp", "cp", "ep", "etp", "pp", "vpp", "zero", "mbs", "recompute", "schedule", "precision", "tp_overlap",
         "ep_overlap", "dispatcher", "experts", "grad_dtype", "moment_dtype", "master_dtype", "fp8_recipe",
         "fp8_weights", "offload_layers", "offload_modules", "optimizer_offload", "param_offload", "optimizer",
         "tiled_mlp", "loss", "elementwise")
# the knobs a plan takes one value of, the user's (or their default), on every layout
ONE_VALUE = ("optimizer_offload", "param_offload", "optimizer", "tiled_mlp", "loss", "elementwise")
DEFAULT_SCHEDULES = ("1f1b", "zb", "interleaved", "dualpipe")
MIN_CP_CHUNK = 2048              # default space: no CP below this many tokens per rank


def offloaded_checkpoints(model: ModelSpec, framework: str, space: dict, base, memory) -> tuple:
    """(layout, its memory): `base` and memory(base), or with DeepSpeed's cpu_checkpointing (every
    layer's checkpoint in host memory, under full recompute, without a pipeline) where the
    constraints allow offload_layers of all the model's layers and base does not fit without it
    (the planner tries Megatron's counts itself)."""
    mem = memory(base)
    allowed = framework == "deepspeed" and space["recompute"][-1] == "full" and model.layers in space["offload_layers"]
    if not allowed or base.pp > 1 or isinstance(mem, ConfigError) or mem.fits:
        return base, mem
    moved = replace(base, offload_layers=model.layers)
    moved_mem = memory(moved)
    return (base, mem) if isinstance(moved_mem, ConfigError) else (moved, moved_mem)


def _divisors(n: int) -> list[int]:
    return [k for k in range(1, n + 1) if n % k == 0]


def space(model: ModelSpec, cluster: ClusterSpec, seq: int, constraints: dict) -> dict:
    """Allowed values per knob: the defaults, narrowed by `constraints` (a value or a list)."""
    unknown = sorted(map(str, set(constraints) - set(KNOBS) - {"framework", "tp_across_nodes", "uneven_split", "top"}))
    if unknown:
        raise ConfigError(f"plan constraints: unknown key(s) {keys(unknown)}; "
                          f"known: {', '.join(KNOBS)}, framework, tp_across_nodes, uneven_split, top")
    problems = []
    for key in ("tp_across_nodes", "uneven_split"):
        if key in constraints:
            flag(problems, f"plan constraints: {key}", constraints[key])
    if "framework" in constraints:
        choice(problems, "plan constraints: framework", constraints["framework"], FRAMEWORKS)
    if "top" in constraints:
        integer(problems, "plan constraints: top", constraints["top"], *PLAN["top"])
    if problems:
        raise ConfigError(problems)
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
        "recompute": list(recompute_levels(constraints.get("framework", "megatron"), model.moe is not None)),
        "schedule": list(DEFAULT_SCHEDULES),
        "precision": ["bf16"],
        # TP comm pipelined with its GEMMs: never slower and no memory in the model, so with TP it
        # is taken where allowed; by default where the framework has it built in (Megatron/TE)
        "tp_overlap": [constraints.get("framework", "megatron") == "megatron"],
        # MoE all-to-alls under another micro-batch's compute (Megatron's overlap_moe_expert_parallel_comm,
        # the Bridge recipes' moe_a2a_overlap): tried beside each layout where valid (planner.paired) only
        # where the user allows it (ep_overlap: [false, true]); not by default, since the step model is
        # optimistic on the Bridge H100 MoE runs that use it (validation.published) and it would favour it
        "ep_overlap": [False],
        # MoE dispatch: DeepEP and HybridEP are separate installs, tried only where the user allows
        # them (dispatcher: deepep, hybridep); of those allowed, each layout takes the fastest
        # (_Search.fastest_dispatch)
        "dispatcher": ["alltoall"],
        # the local experts' kernel: the framework's unless the user allows fused (never slower)
        "experts": [""],
        # the gradients' dtype: the framework's unless the user allows bf16 (a numerics choice; never
        # slower and 2 bytes a parameter less where the framework keeps them, frameworks.grad_dtype)
        "grad_dtype": [""],
        "moment_dtype": [""],          # likewise: bf16 Adam moments only where allowed
        "master_dtype": [""],          # and masters as remainders, or none, only where allowed (Megatron)
        # FP8 under Megatron: the recipe and the weights' kind the user names (one value), else the framework's
        "fp8_recipe": [""],
        "fp8_weights": [""],
        "offload_modules": [""],       # Megatron's fine-grained offloading: the modules the user names
        # Megatron's activation offloading (layers kept in host memory): only the counts allowed,
        # tried where no recompute is needed otherwise (planner._least_recompute)
        "offload_layers": [0],
        # the optimizer, and ZeRO-3's weights, in host memory: only as the user names them (one value each)
        "optimizer_offload": [0.0],
        "param_offload": [False],
        "optimizer": ["adamw"],        # Muon only as the user names it (one value)
        "tiled_mlp": [False],          # DeepSpeed's TiledMLP only as the user names it (one value)
        "loss": [""], "elementwise": [""],     # the framework's kernels, or the ones the user names (one value)
    }
    for knob in KNOBS:
        if knob in constraints:
            v = constraints[knob]
            sp[knob] = list(v) if isinstance(v, (list, tuple)) else [v]
            if not sp[knob]:
                raise ConfigError(f"plan constraints: {knob} allows no value")
            if len(sp[knob]) > 64:
                raise ConfigError(f"plan constraints: {knob} lists {len(sp[knob]):,} values; the limit is 64")
    for knob in ("tp", "cp", "ep", "etp", "pp", "vpp", "mbs", "zero", "offload_layers"):
        for v in sp[knob]:
            integer(problems, f"plan constraints: {knob}", v, *PARALLEL[knob])
    for knob, options in (("precision", PRECISIONS), ("schedule", SCHEDULES), ("dispatcher", DISPATCHERS),
                          ("experts", EXPERT_KERNELS), ("grad_dtype", GRAD_DTYPES),
                          ("moment_dtype", MOMENT_DTYPES), ("master_dtype", MASTER_DTYPES),
                          ("fp8_recipe", FP8_RECIPES), ("fp8_weights", FP8_WEIGHTS), ("optimizer", OPTIMIZERS),
                          ("loss", LOSS_KERNELS), ("elementwise", ELEMENTWISE_KERNELS)):
        for v in sp[knob]:
            choice(problems, f"plan constraints: {knob}", v, options)
    for v in sp["recompute"]:
        if not (v in RECOMPUTE or modules(v)):
            problems.append(f"plan constraints: recompute must be one of {', '.join(map(repr, RECOMPUTE))} or "
                            f"Megatron's recompute modules joined by '+' (e.g. {MODULES_TEXT}) (got {show(v)})")
    for knob in ("tp_overlap", "ep_overlap", "param_offload", "tiled_mlp"):
        for v in sp[knob]:
            flag(problems, f"plan constraints: {knob}", v)
    for v in sp["optimizer_offload"]:
        number(problems, "plan constraints: optimizer_offload", v, *PARALLEL["optimizer_offload"])
    if problems:
        raise ConfigError(list(dict.fromkeys(problems)))
    framework = constraints.get("framework", "megatron")
    if framework == "deepspeed" and set(sp["offload_layers"]) - {0, model.layers}:
        raise ConfigError(f"plan constraints: deepspeed's cpu_checkpointing keeps every layer's checkpoint in host "
                          f"memory: offload_layers may be 0 or {model.layers} (got {sorted(sp['offload_layers'])})")
    for knob, runs in LIMITS.get(framework, {}).items():
        outside = [v for v in sp[knob] if v not in runs]
        if outside and knob in constraints:
            raise ConfigError(f"plan constraints: {framework} does not run {knob} {outside}; it runs "
                              f"{knob} {list(runs)}: allow those, or plan for another framework")
        sp[knob] = [v for v in sp[knob] if v in runs]
    for knob, runs in DEFAULT_LIMITS.get(framework, {}).items():
        if knob not in constraints:            # named, they are planned (check_layout warns)
            sp[knob] = [v for v in sp[knob] if v in runs]
    for v in sp["offload_modules"]:
        if v != "" and not offload_modules(v):
            problems.append(f"plan constraints: offload_modules must be Megatron's offload modules joined by '+' "
                            f"(got {show(v)})")
    if problems:
        raise ConfigError(list(dict.fromkeys(problems)))
    for knob in ("fp8_recipe", "fp8_weights", "offload_modules") + ONE_VALUE:
        if len(set(sp[knob])) > 1:
            raise ConfigError(f"plan constraints: {knob} takes one value (got {len(set(sp[knob]))}); plan once each")
    if framework == "megatron" and "fp8" in sp["precision"] and sp["fp8_weights"][0]:
        # FP8 parameters need ZeRO 1 or more; bf16 weights with their cached copy are modelled at 0 and 1
        allowed = [z for z in sp["zero"] if (z >= 1) == (sp["fp8_weights"][0] == "fp8") or z == 1]
        sp["zero"] = allowed or sp["zero"]
    if model.moe is None:                  # the MoE knobs change nothing there (check_layout warns)
        sp["ep"], sp["etp"], sp["dispatcher"], sp["experts"] = [1], [0], ["alltoall"], sp["experts"][:1]
    sp["recompute"] = sorted(dict.fromkeys(sp["recompute"]), key=recompute_order)   # least first
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


def one_microbatch(par, mbs_allowed) -> int | None:
    """The micro-batch that makes `par`'s step one micro-batch, where FSDP2 or DDP then holds fewer
    gradients at its peak than a smaller micro-batch does (estimate.late_grads: the gradients come
    as the activations go; estimate.ddp_buckets: the parameters' .grad do, beside the buckets) and
    the space allows it; None otherwise. Memory grows with mbs everywhere else."""
    mbs = par.gbs // par.dp if par.dp and par.gbs % par.dp == 0 else 0
    if mbs <= par.mbs or mbs not in mbs_allowed:
        return None
    one = derive(par, mbs=mbs)          # a value of the checked space: no need to check it again
    return mbs if late_grads(one) or (ddp_buckets(one) and one.pp == 1) else None


def node_counts(start: int, gpus_per_node: int) -> list[int]:
    """Cluster sizes to try, smallest first: every count up to 16 more nodes, then 25% steps, up
    to the limits on nodes and GPUs (limits.py)."""
    top = min(limits.CLUSTER["nodes"][1], limits.MAX_GPUS // gpus_per_node)
    counts = list(range(start + 1, start + 17))
    while counts[-1] < top:
        counts.append(int(counts[-1] * 1.25) + 1)
    counts = [n for n in counts if n <= top]
    return counts + [top] if top > start and (not counts or counts[-1] < top) else counts


def hsdp_replicas(framework: str, model, cluster, par) -> list:
    """HSDP variants (parallel.dp_replicate) of an FSDP2 ZeRO 2/3 layout: shard groups of 1, 4 and
    16 nodes' data-parallel ranks, fewer per gather for more state (they pay at thousands of GPUs)."""
    if framework != "fsdp2" or par.zero < 2 or cluster.gpus_per_node % par.tp:
        return []
    ranks, per_node = par.dp * par.cp, cluster.gpus_per_node // par.tp
    experts = zero_shards(par)[1]
    out = []
    for nodes in (1, 4, 16):
        shard = per_node * nodes
        replicas = ranks // shard
        if ranks % shard or replicas <= 1 or par.dp % replicas or (model.moe and experts % replicas):
            continue
        out.append(replicas)
    return out
