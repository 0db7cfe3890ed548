"""Memory per GPU, for every pipeline stage; the answer is the most loaded one.

    total = weights + grads + fp32 master + optimizer moments     (frameworks.py, by ZeRO shard)
          + in-flight micro-batches x saved activations of the stage's layers (activations.py,
            pipeline.py) + first/last-stage extras (logits and loss on the last stage)
          + one layer's working set (gradients of the layer in backward; with full recompute
            also the layer being recomputed) + framework buffers (ZeRO-3 gathers, buckets)

Convention: GiB (2^30 bytes); memory as PyTorch's allocator counts it (peak allocated). `fits`
compares it with USABLE_FRACTION of the GPU's memory; the remainder is CUDA context, NCCL buffers
and caching-allocator fragmentation (validation/memory.py shows the rule on measured runs).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

from . import activations as act
from .frameworks import bytes_per_param, retained_buffers
from .hardware import ClusterSpec
from .models import ModelSpec
from .parallel import ParallelConfig, check_layout
from .pipeline import inflight_microbatches

GIB = 2**30
USABLE_FRACTION = 0.77  # fits when peak allocated <= 77% of capacity (validation/memory.py)


@dataclass(frozen=True)
class StageMemory:
    stage: int
    layers: int
    params: float                # parameters held by this GPU (dense + expert)
    weights_gib: float
    grads_gib: float
    master_gib: float            # fp32 master weights (optimizer state in ZeRO's accounting)
    optimizer_gib: float         # Adam moments
    activations_gib: float
    other_gib: float             # framework buffers
    resident_gib: float          # what stays allocated between steps: weights .. optimizer + buffers

    @property
    def total_gib(self) -> float:
        return (self.weights_gib + self.grads_gib + self.master_gib + self.optimizer_gib
                + self.activations_gib + self.other_gib)


@dataclass(frozen=True)
class MemoryEstimate:
    stages: tuple[StageMemory, ...]
    capacity_gib: float
    warnings: tuple[str, ...] = ()

    @property
    def worst(self) -> StageMemory:
        return max(self.stages, key=lambda s: s.total_gib)

    @property
    def total_gib(self) -> float:
        return self.worst.total_gib

    @property
    def fits(self) -> bool:
        return self.total_gib <= USABLE_FRACTION * self.capacity_gib

    def as_dict(self) -> dict:
        w = self.worst
        return {"params_gib": w.weights_gib, "grads_gib": w.grads_gib,
                "optimizer_gib": w.master_gib + w.optimizer_gib, "activations_gib": w.activations_gib,
                "other_gib": w.other_gib, "total_gib": w.total_gib, "capacity_gib": self.capacity_gib,
                "fits": self.fits, "usable_gib": USABLE_FRACTION * self.capacity_gib,
                "master_gib": w.master_gib, "moments_gib": w.optimizer_gib, "resident_gib": w.resident_gib,
                "stage": w.stage, "stage_total_gib": [s.total_gib for s in self.stages],
                "warnings": list(self.warnings)}


def stage_layers(model: ModelSpec, par: ParallelConfig) -> list[list[int]]:
    """Layer indices held by each pipeline rank.

    Even split, earlier ranks taking the remainder (np.array_split), with virtual stages dealt
    round-robin: p=2, v=2, L=8 gives rank 0 layers [0, 1, 4, 5] and rank 1 [2, 3, 6, 7].
    `par.split` (the planner's choice) gives each rank its count of contiguous layers.
    nanotron splits by cost instead: each layer costs 4h^2 + 3fh, the output layer Vh, and a rank
    is closed once the running cost reaches its share (L=16, h=2048, f=8192, V=131072, p=4: the
    output layer costs 4 layers, so the ranks hold 5, 5, 5 and 1 layers).
    """
    L, p, v = model.layers, par.pp, par.vpp
    if par.split:
        starts = [sum(par.split[:r]) for r in range(p)]
        return [list(range(s, s + n)) for s, n in zip(starts, par.split)]
    if par.framework == "nanotron" and v == 1 and p > 1:
        return _cost_split(model, p)
    chunks = p * v
    sizes = [L // chunks + (1 if i < L % chunks else 0) for i in range(chunks)]
    starts = [sum(sizes[:i]) for i in range(chunks)]
    return [[layer for c in range(r, chunks, p) for layer in range(starts[c], starts[c] + sizes[c])]
            for r in range(p)]


def _cost_split(model: ModelSpec, p: int) -> list[list[int]]:
    per_layer = 4 * model.hidden ** 2 + 3 * model.ffn * model.hidden
    total = per_layer * model.layers + model.vocab * model.hidden
    ranks: list[list[int]] = [[] for _ in range(p)]
    r, cost = 0, 0
    for layer in range(model.layers):
        ranks[r].append(layer)
        cost += per_layer
        if r < p - 1 and cost >= total * (r + 1) / p:
            r += 1
    return ranks


def rank_layer_params(model: ModelSpec, par: ParallelConfig, layer: int) -> tuple[float, float]:
    """(dense, expert) parameters of one layer held by one GPU."""
    dense, expert = float(model.layer_norm_params()), 0.0
    for m in model.layer_matmuls(model.is_moe_layer(layer)):
        w, b = m.fan_in * m.fan_out, (m.fan_out if m.bias else 0)
        if m.expert:
            expert += m.stored / par.ep * (w + b) / par.etp
        elif m.tp == "col":
            dense += m.stored * (w + b) / par.tp
        elif m.tp == "row":
            dense += m.stored * (w / par.tp + b)
        else:
            dense += m.stored * (w + b)
    return dense, expert


def kind_params(model: ModelSpec, par: ParallelConfig, moe: bool) -> tuple[float, float]:
    """(dense, expert) parameters one GPU holds of one layer of a kind (MoE or dense MLP)."""
    return rank_layer_params(model, par, next(i for i in range(model.layers) if model.is_moe_layer(i) == moe))


class _Context:
    """What every stage of one layout shares: the framework's bytes per parameter, and each layer
    kind (dense MLP, MoE) evaluated once."""

    def __init__(self, model: ModelSpec, par: ParallelConfig):
        self.model, self.par = model, par
        self.layout = bytes_per_param(par.framework, par.zero)
        self.dense_shard = par.dp * par.cp
        self.expert_shard = max(1, par.dp * par.cp * par.tp // (par.ep * par.etp))
        self.T = act.tokens(par)
        self.kinds = {moe: (sum(kind_params(model, par, moe)), kind_params(model, par, moe)[1],
                            act.layer_activations(model, par, moe), act.saved_per_layer(model, par, moe))
                      for moe in {model.is_moe_layer(i) for i in range(model.layers)}}

    def stage(self, rank: int, layers) -> StageMemory:
        model, par, kinds = self.model, self.par, self.kinds
        # DualPipeV's V puts the first and the last stage on rank 0
        first, last = rank == 0, rank == (0 if par.schedule == "dualpipe" else par.pp - 1)
        n_moe = model.moe_layers_in(layers)
        counts = {moe: (n_moe if moe else len(layers) - n_moe) for moe in kinds}
        expert = sum(n * kinds[moe][1] for moe, n in counts.items())
        dense = sum(n * kinds[moe][0] for moe, n in counts.items()) - expert
        if first:
            dense += model.vocab * model.hidden / par.tp + model.positions * model.hidden
        if last:
            dense += model.norm_params
            if not model.tied_embeddings or par.pp > 1:   # tied: the last stage keeps its own copy
                dense += model.vocab * model.hidden / par.tp
        role = {r: dense * (rep + sh / self.dense_shard) + expert * (rep + sh / self.expert_shard)
                for r, (rep, sh) in self.layout.items()}
        m = par.microbatches
        inflight = inflight_microbatches(par.schedule, par.pp, par.vpp, m, rank)
        present = [moe for moe, n in counts.items() if n]
        saved = sum(n * kinds[moe][3] for moe, n in counts.items())
        # One layer's gradients in backward (as large as its saved set); with full recompute also the
        # layer being recomputed, whose input is already among the kept checkpoints.
        working = max((a.total + (a.total - a.layer_input if par.recompute == "full" else 0.0)
                       for a in (kinds[moe][2] for moe in present)), default=0.0)
        activations = inflight * saved + working
        if last:
            kept, transient = act.output_layer_activations(model, par)
            # The logits live from F to the loss's backward (I); ZB-H1's waiting W's do not keep them.
            out_inflight = inflight if par.schedule != "zb" else inflight_microbatches("1f1b", par.pp, 1, m, rank)
            activations += min(out_inflight, m) * kept + transient
        biggest_layer = max((kinds[moe][0] for moe in present), default=0.0)
        other = retained_buffers(par.framework, par.zero, self.T * model.hidden, 2 * biggest_layer)
        resident = sum(role.values()) + other
        return StageMemory(
            stage=rank, layers=len(layers), params=dense + expert, weights_gib=role["weights"] / GIB,
            grads_gib=role["grads"] / GIB, master_gib=role["master"] / GIB, optimizer_gib=role["optimizer"] / GIB,
            activations_gib=activations / GIB, other_gib=other / GIB, resident_gib=resident / GIB)


def estimate_memory(model: ModelSpec, cluster: ClusterSpec, par: ParallelConfig) -> MemoryEstimate:
    warnings = check_layout(model, cluster, par)
    ctx = _Context(model, par)
    stages = tuple(ctx.stage(rank, layers) for rank, layers in enumerate(stage_layers(model, par)))
    return MemoryEstimate(stages=stages, capacity_gib=cluster.gpu.memory_gib, warnings=tuple(warnings))


def stage_memory_fn(model: ModelSpec, par: ParallelConfig):
    """`fn(rank, layer_indices) -> StageMemory` for any layers on any rank of this layout (the
    planner's layer-to-stage split asks what a rank would hold with other layers)."""
    return _Context(model, par).stage


def memory_dict(model: ModelSpec, cluster: ClusterSpec, par: ParallelConfig) -> dict:
    """Plain-data form, for widgets and JSON (every stage, every role)."""
    est = estimate_memory(model, cluster, par)
    out = est.as_dict()
    out["per_stage"] = [{**asdict(s), "total_gib": s.total_gib} for s in est.stages]
    return out
