"""When no layout fits: how close the closest came, and the smallest cluster that fits (the
planner's answer in place of plans). Larger clusters are tried in turn with the same search,
skipping those whose model state alone, sharded over every GPU, cannot fit."""
from __future__ import annotations

from dataclasses import replace

from ..memory.estimate import peak_memory, usable_fraction
from ..specs.errors import ConfigError
from ..specs import limits
from ..specs.hardware import ClusterSpec
from ..specs.models import ModelSpec
from .explain import oom_reason, short
from .space import node_counts

# Bytes a parameter needs at the least, fully sharded: an FP8 weight (1), a bf16 gradient (2) and
# Adam's two moments in bf16 (4), no master (the most frugal layout any framework here runs).
MIN_STATE_BYTES = 7


def _state_floor_gib(model: ModelSpec, cluster: ClusterSpec, space: dict) -> float:
    """GiB a GPU holds at the least: the model's state sharded over every GPU, no activations; what
    the optimizer offload the constraints name (a share, weights too) takes to the host, less."""
    f, weights = space["optimizer_offload"][0], space["param_offload"][0]
    floor = (0.0 if weights else 1.0) + (MIN_STATE_BYTES - 1) * (1 - f)
    return floor * model.total_params / cluster.world / 2**30


def _offloaded(model: ModelSpec, cluster: ClusterSpec, par) -> str:
    """What the closest layout would need with its optimizer (and, where the framework moves them
    together, its weights) in host memory, where the constraints did not already say, if that fits."""
    if par.optimizer_offload or par.param_offload or par.framework == "nanotron":
        return ""
    both = par.framework == "fsdp2"             # FSDP2's CPUOffloadPolicy moves the weights with it
    # Megatron's offload keeps fp32 moments and masters (knob_checks); each framework offloads from
    # its own ZeRO stages: the lowest that fits
    fp32 = {"moment_dtype": "", "master_dtype": ""} if par.framework == "megatron" else {}
    for zero in (1, 2, 3):
        try:
            mem = peak_memory(model, cluster, replace(par, optimizer_offload=1.0, param_offload=both, zero=zero,
                                                      **fp32))
        except ConfigError:                      # the framework does not offload at this ZeRO stage
            continue
        if mem.fits:
            break
    else:
        return ""
    knobs = "optimizer_offload 1" + (", param_offload true" if both else "") + f", zero {zero}" + \
        (", moment_dtype and master_dtype fp32" if fp32 and (par.moment_dtype or par.master_dtype) else "")
    return (f". With its optimizer in host memory ({knobs}) it would need {mem.total_gib:.1f} GiB and fit, "
            "its step slowed by the host's optimizer step: plan with those constraints to see it")


def _tiled(model: ModelSpec, cluster: ClusterSpec, par) -> str:
    """What the closest layout would need with its MLP tiled (DeepSpeed's TiledMLP), where the
    constraints did not say it and it runs (deepspeed, a dense gated MLP), alone or beside the
    optimizer in host memory, if that fits."""
    if par.framework != "deepspeed" or par.tiled_mlp or model.moe is not None or model.mlp != "swiglu":
        return ""
    for offload in ((False, True) if not par.optimizer_offload else (False,)):
        tiled = replace(par, tiled_mlp=True, **({"optimizer_offload": 1.0, "zero": 3} if offload else {}))
        try:
            mem = peak_memory(model, cluster, tiled)
        except ConfigError:
            continue
        if mem.fits:
            knobs = "tiled_mlp true" + (", optimizer_offload 1, zero 3" if offload else "")
            return (f". With its MLP tiled ({knobs}: DeepSpeed's TiledMLP, one more MLP forward a layer) it would "
                    f"need {mem.total_gib:.1f} GiB and fit: plan with those constraints to see it")
    return ""


def impossible(search) -> tuple[str, int]:
    """Nothing fits: how close the closest layout came, and the smallest cluster that fits."""
    model, cluster = search.model, search.cluster
    frugal = [r for r in search.rejected if r.kind == "frugal_oom"]
    if not frugal:
        reasons = list(dict.fromkeys(r.reason for r in search.rejected))
        return (f"no layout in the allowed space is valid for {model.name} on {cluster.world} GPUs: "
                + "; ".join(reasons[:3]) + ("" if len(reasons) <= 3 else f"; and {len(reasons) - 3} more")
                + ". Widen the constraints.", 0)
    text = (f"{model.name} does not fit on {cluster.nodes} x {cluster.gpus_per_node} {cluster.gpu.name} with any "
            f"layout in the allowed space, even the most frugal (ZeRO-{max(search.space['zero'])}, recompute "
            f"{search.space['recompute'][-1]}, mbs {min(search.space['mbs'])})")
    closest = min(frugal, key=lambda r: peak_memory(model, cluster, r.par).total_gib)
    text += f"; the closest, {short(closest.par)}, is {oom_reason(peak_memory(model, cluster, closest.par))}"
    text += _offloaded(model, cluster, closest.par) + _tiled(model, cluster, closest.par)
    counts = node_counts(cluster.nodes, cluster.gpus_per_node)
    if not counts:
        return f"{text}. No larger cluster is within the limit of {limits.MAX_GPUS:,} GPUs either.", 0
    for nodes in counts:
        limits.check_time()
        bigger = replace(cluster, nodes=nodes)
        if _state_floor_gib(model, bigger, search.space) > usable_fraction(search.framework) * cluster.gpu.memory_gib:
            continue                  # its weights, gradients and optimizer state alone do not fit: no search
        fit = type(search)(model, bigger, search.profile, search.seq, search.gbs, search.constraints).first_fit()
        if fit is not None:
            return (f"{text}. The smallest cluster that fits has {nodes} nodes ({bigger.world} GPUs), "
                    f"for example {short(fit)}.", bigger.world)
    return f"{text}. Nothing up to {counts[-1]} nodes fits either: shorten seq or lower gbs.", 0
