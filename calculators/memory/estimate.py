"""Memory per GPU, for every pipeline stage; the answer is the most loaded one.

    total = weights + grads + fp32 master + optimizer moments     (frameworks.py, by ZeRO shard)
          + in-flight micro-batches x saved activations of the stage's layers (activations.py,
            pipeline.py) + first/last-stage extras (logits and loss on the last stage)
          + one layer's working set (gradients of the layer in backward; with full recompute
            also the layer being recomputed) + framework buffers (ZeRO-3 gathers, buckets)

Gradients are resident through the step where the framework keeps them in a buffer (Megatron's
main-grad buffer, DeepSpeed's partitions, nanotron). FSDP2 (torchtitan) zeroes them to None at the
start of each step (optimizer.zero_grad(), set_to_none) and creates each layer's sharded gradient
when its reduce-scatter lands in backward, so without gradient accumulation or a pipeline (one
micro-batch per step) they do not coexist with the activations: the backward trades one for the
other, and the peak holds max(activations, gradients), not their sum (`late_grads`,
`_grads_at_peak`). So under FSDP2 a larger micro-batch that makes the step one micro-batch can
need less memory than a smaller one (the planner tries it, planning.space.one_microbatch).
PyTorch's DDP (fsdp2 at ZeRO 0/1 over more than one replica, as torchtitan ran it before its
FSDP-based replicate of 2026-03) keeps both: the reducer's flat gradient buckets, allocated when
the model is wrapped and kept from step to step, and, with its default gradient_as_bucket_view=
False, each parameter's own .grad, which zero_grad frees and the backward creates again
(`ddp_buckets`; tests/calculators/test_memory.py shows both on PyTorch's own DDP).

Convention: GiB (2^30 bytes); memory as PyTorch's allocator counts it (peak allocated). `fits`
compares it with the framework's usable fraction of the GPU's memory (`usable_fraction`); the
remainder is CUDA context, NCCL buffers, library workspaces and caching-allocator fragmentation.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from functools import lru_cache

from . import activations as act
from .grads import ddp_buckets, late_grads
from .host import gpu_layout
from .offload import kept_on_gpu, offload_bytes
from .working import layer_working
from ..specs.fp8 import fp8_layer_params, fp8_weight_extra
from ..specs.frameworks import (bytes_per_param, grad_dtype, host_bytes_per_param, master_dtype, pipeline_grad_bytes,
                                retained_buffers)
from ..specs.hardware import BLACKWELL, ClusterSpec
from ..specs.models import ModelSpec
from ..specs.optimizers import ADAM_STATE, momentum_bytes, muon
from ..specs.parallel import ParallelConfig, check_layout, zero_shards
from ..specs.stages import virtual_split
from ..pipeline.simulate import inflight_microbatches
from ..pipeline.schedules import n_stages, stages_of_rank

GIB = 2**30
USABLE_FRACTION = 0.77  # fits when peak allocated <= 77% of capacity (validation/memory.py)
# Megatron (NVIDIA's recipes): the GPU's memory less a 5% allowance for what PyTorch's allocator does
# not count (CUDA context, NCCL's buffers, cuBLAS/cuDNN workspaces: a few GiB) and the little
# fragmentation left under expandable segments, which NVIDIA's Megatron-Bridge and NeMo performance
# recipes set (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True). Not fitted: nanotron's 0.77, fitted
# on its runs under the default allocator, calls 141 of the 293 Megatron runs in
# validation/data/published_more.csv out of memory though each ran; this calls 26 (validation.stacks
# lists them). No published Megatron run out of memory bounds it from above.
USABLE = {"megatron": 0.95}


def usable_fraction(framework: str) -> float:
    """The share of a GPU's memory a layout's peak allocated may take and fit: nanotron's 0.77,
    fitted on its 3,678 runs (validation/memory.py) and held by our own one-H100 harness (fsdp2
    under the default allocator: every run predicted at 77% or less ran, every one at 86% or more
    ran out of memory, validation/harness.py); Megatron's recipes 0.95 (USABLE)."""
    return USABLE.get(framework, USABLE_FRACTION)


@dataclass(frozen=True)
class StageMemory:
    stage: int
    layers: int
    params: float                # parameters held by this GPU (dense + expert)
    weights_gib: float
    grads_gib: float              # held at the peak (FSDP2 with one micro-batch: see _grads_at_peak)
    master_gib: float            # fp32 master weights (optimizer state in ZeRO's accounting)
    optimizer_gib: float         # Adam moments
    activations_gib: float
    other_gib: float             # framework buffers
    resident_gib: float          # what stays allocated between steps: weights .. optimizer + buffers
    grads_full_gib: float = 0.0  # every gradient the GPU holds once backward ends
    host_gib: float = 0.0        # host memory of this GPU's offloaded optimizer and weights (memory/host.py)

    @property
    def total_gib(self) -> float:
        return (self.weights_gib + self.grads_gib + self.master_gib + self.optimizer_gib
                + self.activations_gib + self.other_gib)


@dataclass(frozen=True)
class MemoryEstimate:
    stages: tuple[StageMemory, ...]
    capacity_gib: float
    warnings: tuple[str, ...] = ()
    usable_fraction: float = USABLE_FRACTION

    @property
    def worst(self) -> StageMemory:
        return max(self.stages, key=lambda s: s.total_gib)

    @property
    def total_gib(self) -> float:
        return self.worst.total_gib

    @property
    def fits(self) -> bool:
        return self.total_gib <= self.usable_gib

    @property
    def usable_gib(self) -> float:
        return self.usable_fraction * self.capacity_gib

    def as_dict(self) -> dict:
        w = self.worst
        return {"params_gib": w.weights_gib, "grads_gib": w.grads_gib, "grads_full_gib": w.grads_full_gib,
                "optimizer_gib": w.master_gib + w.optimizer_gib, "activations_gib": w.activations_gib,
                "other_gib": w.other_gib, "total_gib": w.total_gib, "capacity_gib": self.capacity_gib,
                "fits": self.fits, "usable_gib": self.usable_gib, "usable_fraction": self.usable_fraction,
                "master_gib": w.master_gib, "moments_gib": w.optimizer_gib, "resident_gib": w.resident_gib,
                "stage": w.stage, "stage_total_gib": [s.total_gib for s in self.stages], "host_gib": w.host_gib,
                "warnings": list(self.warnings)}


def stage_layers(model: ModelSpec, par: ParallelConfig) -> tuple:
    """Layer indices held by each pipeline rank: its pipeline stages' layers (pipeline_stages),
    in layer order. p=2, v=2, L=8 gives rank 0 layers (0, 1, 4, 5) and rank 1 (2, 3, 6, 7);
    DualPipeV folds 2p chunks into a V: p=2, L=8 gives rank 0 (0, 1, 6, 7) and rank 1 (2, 3, 4, 5).
    """
    return _rank_layers(model, par.framework, par.schedule, par.pp, par.vpp, par.split)


def pipeline_stages(model: ModelSpec, par: ParallelConfig) -> tuple:
    """Contiguous layer indices of each pipeline stage, first to last (p*v stages interleaved,
    2p with DualPipeV; stage i runs on schedules.stages_of_rank's rank).

    Even split, earlier stages taking the remainder (np.array_split); interleaved virtual stages
    that the layers do not divide take Megatron's embedding-and-loss split where Megatron runs them
    and it divides (stages.virtual_split: Llama 3 405B's 126 layers over 64 stages, 1, 2, ..., 2,
    1). `par.split` (the planner's choice, or the caller's) gives each stage its count. nanotron
    splits by cost instead: each layer costs 4h^2 + 3fh, the output layer Vh, and a rank is closed
    once the running cost reaches its share (L=16, h=2048, f=8192, V=131072, p=4: the output layer
    costs 4 layers, so the ranks hold 5, 5, 5 and 1 layers).
    Cached (tuples, shared): the planner asks for the same few splits thousands of times.
    """
    return _stages(model, par.framework, par.schedule, par.pp, par.vpp, par.split)


@lru_cache(maxsize=1024)
def _stages(model: ModelSpec, framework: str, schedule: str, p: int, v: int, split: tuple) -> tuple:
    L = model.layers
    chunks = n_stages(schedule, p, v)
    if framework == "nanotron" and chunks == p > 1 and not split:   # one stage per rank: its cost split
        return _cost_split(model, p)
    if not split and schedule == "interleaved":     # uneven virtual stages: Megatron's split where it runs
        split = virtual_split(L, p, v, framework)
    sizes = list(split) if split else [L // chunks + (1 if i < L % chunks else 0) for i in range(chunks)]
    starts = [sum(sizes[:i]) for i in range(chunks)]
    return tuple(tuple(range(st, st + n)) for st, n in zip(starts, sizes))


@lru_cache(maxsize=1024)
def _rank_layers(model: ModelSpec, framework: str, schedule: str, p: int, v: int, split: tuple) -> tuple:
    stages = _stages(model, framework, schedule, p, v, split)
    return tuple(tuple(layer for st in sorted(stages_of_rank(schedule, p, v, r)) for layer in stages[st])
                 for r in range(p))


def _cost_split(model: ModelSpec, p: int) -> tuple:
    per_layer = 4 * model.hidden ** 2 + 3 * model.ffn * model.hidden
    total = per_layer * model.layers + model.vocab * model.hidden
    ranks: list[list[int]] = [[] for _ in range(p)]
    r, cost = 0, 0
    for layer in range(model.layers):
        ranks[r].append(layer)
        cost += per_layer
        if r < p - 1 and cost >= total * (r + 1) / p:
            r += 1
    return tuple(map(tuple, ranks))


def kind_params(model: ModelSpec, par: ParallelConfig, moe: bool) -> tuple[float, float]:
    """(dense, expert) parameters one GPU holds of one layer of a kind (MoE or dense MLP)."""
    return _kind_params(model, moe, par.tp, par.ep, par.etp)


@lru_cache(maxsize=1024)
def _kind_params(model: ModelSpec, moe: bool, tp: int, ep: int, etp: int) -> tuple[float, float]:
    dense, expert = float(model.layer_norm_params()), 0.0
    for m in model.layer_matmuls(moe):
        w, b = m.fan_in * m.fan_out, (m.fan_out if m.bias else 0)
        if m.expert:
            expert += m.stored / ep * (w + b) / etp
        elif m.tp == "col":
            dense += m.stored * (w + b) / tp
        elif m.tp == "row":
            dense += m.stored * (w / tp + b)
        else:
            dense += m.stored * (w + b)
    return dense, expert


class _Context:
    """What every stage of one layout shares, computed once: the framework's bytes per parameter
    and each layer kind (dense MLP, MoE): its parameters, saved activations and working set."""

    def __init__(self, model: ModelSpec, par: ParallelConfig, blackwell: bool = False):
        self.model, self.par = model, par
        layout = gpu_layout(bytes_per_param(par.framework, par.zero, par.dp, grad_dtype(par), par.moment_dtype,
                                            master_dtype(par), par.optimizer), par)
        dense_shard, expert_shard = zero_shards(par)
        self.host = (host_bytes_per_param(par) / dense_shard, host_bytes_per_param(par) / expert_shard)
        # gradient bytes per parameter (dense, expert) between steps, once the last reduction is done
        rep, sh = layout["grads"]
        self.grads_between = (rep + sh / dense_shard, rep + sh / expert_shard)
        if pipeline_grad_bytes(par):     # FSDP2 under a pipeline: unsharded until the last micro-batch
            layout = {**layout, "grads": (pipeline_grad_bytes(par), 0.0)}
        # bytes per parameter by role, for dense and for expert parameters
        self.roles = {r: (rep + sh / dense_shard, rep + sh / expert_shard) for r, (rep, sh) in layout.items()}
        # Muon leaves the embedding, the output layer and the norms to AdamW: their two moments in its
        # one momentum's place, sharded alike (specs/optimizers.py)
        momentum = momentum_bytes(par.framework, grad_dtype(par))
        self.adam_extra = self.roles["optimizer"][0] * (ADAM_STATE / momentum - 1) if muon(par) else 0.0
        # per layer kind, the FP8 layers' weight bytes beyond bf16's 2 (fp8_weight_extra), sharded as weights
        extra = fp8_weight_extra(par, blackwell)
        shards = (dense_shard, expert_shard) if par.zero == 3 else (1, 1)
        self.fp8_extra = {moe: sum(n * extra / k for n, k in zip(fp8_layer_params(model, moe, par.tp, par.ep, par.etp),
                                                                 shards)) for moe in model.layer_kinds}
        T = act.tokens(par)
        params = {moe: kind_params(model, par, moe) for moe in model.layer_kinds}   # (dense, expert)
        self.kinds = {}                  # (moe?, recompute mode) -> (dense, expert, saved, working)
        for mode, mp in par.by_recompute().items():
            for moe, (dense, expert) in params.items():
                # one layer's backward (working.py); offloaded, what it brought back from host memory
                working = layer_working(model, mp, moe) + offload_bytes(model, mp, moe)[1]
                self.kinds[(moe, mode)] = (dense, expert, kept_on_gpu(model, mp, moe), working)
        self.buffers = {present: retained_buffers(par.framework, par.zero, T * model.hidden,
                                                  2 * max((sum(params[k]) for k in present), default=0.0))
                        for present in ((), (False,), (True,), (False, True)) if set(present) <= set(params)}
        self.output = act.output_layer_activations(model, par)
        self.head = model.vocab * model.hidden / par.tp
        self.last_rank = 0 if par.schedule == "dualpipe" else par.pp - 1   # DualPipeV: the V ends on rank 0
        self.statics: dict[tuple, tuple] = {}
        # micro-batches in flight per rank, in units of the rank's whole layers (uneven virtual
        # stages on one rank count at their mean); the logits live from F to the loss's backward
        # (I), and ZB-H1's waiting W's do not keep them
        m = par.microbatches
        self.late_grads = late_grads(par)
        self.ddp = ddp_buckets(par)
        self.one_microbatch = par.pp == 1 and m == 1
        self.inflight = _inflight(par.schedule, par.pp, par.vpp, m)
        self.out_inflight = _inflight("1f1b", par.pp, 1, m) if par.schedule == "zb" else self.inflight

    def _static(self, first: bool, last: bool, n_layers: int, n_moe: int, mode: str) -> tuple:
        """(bytes by role, params, saved activations per micro-batch, working set, buffers) of a
        rank holding these layers with this recompute; ranks alike share it, only their in-flight
        counts differ."""
        model, par = self.model, self.par
        dense = expert = saved = working = fp8 = 0.0
        present = []
        for moe in model.layer_kinds:
            d, e, s, w = self.kinds[(moe, mode)]
            n = n_moe if moe else n_layers - n_moe
            if n:
                dense, expert, saved = dense + n * d, expert + n * e, saved + n * s
                fp8 += n * self.fp8_extra[moe]
                working = max(working, w)
                present.append(moe)
        if par.offload_layers and n_layers:
            # Transformer Engine's CPU offload copies the saved tensors of the first offload_layers
            # layers to host memory after their forward and brings each back one layer ahead of its
            # backward (double-buffered): the GPU keeps the other layers and one layer in flight
            saved *= (n_layers - min(par.offload_layers, n_layers) + 1) / n_layers
        if first:
            dense += self.head + model.positions * model.hidden
        if last:
            dense += model.norm_params
            if not model.tied_embeddings or par.pp > 1:   # tied: the last stage keeps its own copy
                dense += self.head
        role = {r: dense * fd + expert * fe for r, (fd, fe) in self.roles.items()}
        role["weights"] += fp8
        adam = n_layers * model.layer_norm_params() + (self.head + model.positions * model.hidden if first else 0) + \
            ((self.head if not model.tied_embeddings or par.pp > 1 else 0) + model.norm_params if last else 0)
        role["optimizer"] += adam * self.adam_extra
        between = dense * self.grads_between[0] + expert * self.grads_between[1]
        host = dense * self.host[0] + expert * self.host[1]
        return role, dense + expert, saved, working, self.buffers[tuple(sorted(present))], between, host

    def _static_of(self, rank: int, layers) -> tuple:
        """_static of this rank, plus the sum of its bytes by role; computed once per kind of rank."""
        key = (rank == 0, rank == self.last_rank, len(layers), self.model.moe_layers_in(layers),
               self.par.rank_recompute(rank))
        if key not in self.statics:
            role, params, saved, working, other, between, host = self._static(*key)
            self.statics[key] = role, params, saved, working, other, sum(role.values()), between, host
        return self.statics[key]

    def _activations(self, rank: int, saved: float, working: float) -> float:
        activations = self.inflight[rank] * saved + working
        if rank == self.last_rank:
            kept, transient = self.output
            activations += min(self.out_inflight[rank], self.par.microbatches) * kept + transient
        return activations

    def _grads_at_peak(self, grads: float, activations: float) -> float:
        """The gradient bytes beside the activations at the peak: all of them, or, for FSDP2 with
        one micro-batch per step (late_grads), what the finished backward holds beyond the
        activations it freed (module docstring). DDP holds its buckets and the parameters' .grad:
        with one micro-batch per step the .grad come as the activations go, with more the first
        micro-batch's stay through the later ones' backward."""
        if self.ddp:
            return grads + (max(0.0, grads - activations) if self.one_microbatch else grads)
        return max(0.0, grads - activations) if self.late_grads else grads

    def _grads_full(self, grads: float) -> float:
        """Every gradient byte the GPU holds once backward ends (DDP: its buckets and the .grad)."""
        return 2 * grads if self.ddp else grads

    def stage(self, rank: int, layers) -> StageMemory:
        role, params, saved, working, other, fixed, between, host = self._static_of(rank, layers)
        activations = self._activations(rank, saved, working)
        # between steps: the gradients as the last reduction leaves them (sharded again under a pipeline)
        resident = fixed - role["grads"] + between
        return StageMemory(
            stage=rank, layers=len(layers), params=params, weights_gib=role["weights"] / GIB,
            grads_gib=self._grads_at_peak(role["grads"], activations) / GIB, master_gib=role["master"] / GIB,
            optimizer_gib=role["optimizer"] / GIB, activations_gib=activations / GIB, other_gib=other / GIB,
            resident_gib=(resident + other) / GIB, grads_full_gib=self._grads_full(between) / GIB, host_gib=host / GIB)

    def totals_gib(self, ranks) -> list[float]:
        """Every rank's total GiB without building its StageMemory (the planner's fit test runs
        thousands of times per plan)."""
        out = []
        for rank, layers in enumerate(ranks):
            role, _, saved, working, other, fixed, _, _ = self._static_of(rank, layers)
            activations = self._activations(rank, saved, working)
            fixed += self._grads_at_peak(role["grads"], activations) - role["grads"]
            out.append((fixed + activations + other) / GIB)
        return out


@lru_cache(maxsize=4096)
def _inflight(schedule: str, p: int, v: int, m: int) -> tuple:
    return tuple(inflight_microbatches(schedule, p, v, m, r) for r in range(p))


@dataclass(frozen=True)
class PeakMemory:
    """The planner's fit test: the most loaded GPU without every stage's breakdown."""
    total_gib: float
    stage: int
    sum_gib: float               # over all pipeline ranks
    capacity_gib: float
    totals: tuple = ()           # each pipeline rank's GiB
    usable_fraction: float = USABLE_FRACTION

    @property
    def usable_gib(self) -> float:
        return self.usable_fraction * self.capacity_gib

    @property
    def fits(self) -> bool:
        return self.total_gib <= self.usable_gib


def peak_memory(model: ModelSpec, cluster: ClusterSpec, par: ParallelConfig) -> PeakMemory:
    """estimate_memory's most loaded GPU, computed the same way; raises ConfigError alike."""
    check_layout(model, cluster, par)
    ctx = _Context(model, par, cluster.gpu.name in BLACKWELL)
    totals = ctx.totals_gib(stage_layers(model, par))
    worst = max(range(len(totals)), key=totals.__getitem__)
    return PeakMemory(totals[worst], worst, sum(totals), cluster.gpu.memory_gib, tuple(totals),
                      usable_fraction(par.framework))


def estimate_memory(model: ModelSpec, cluster: ClusterSpec, par: ParallelConfig) -> MemoryEstimate:
    warnings = check_layout(model, cluster, par)
    ctx = _Context(model, par, cluster.gpu.name in BLACKWELL)
    stages = tuple(ctx.stage(rank, layers) for rank, layers in enumerate(stage_layers(model, par)))
    return MemoryEstimate(stages=stages, capacity_gib=cluster.gpu.memory_gib, warnings=tuple(warnings),
                          usable_fraction=usable_fraction(par.framework))


def stage_memory_fn(model: ModelSpec, cluster: ClusterSpec, par: ParallelConfig):
    """`fn(rank, layer_indices) -> StageMemory` for any layers on any rank (the planner's split)."""
    return _Context(model, par, cluster.gpu.name in BLACKWELL).stage


def memory_dict(model: ModelSpec, cluster: ClusterSpec, par: ParallelConfig) -> dict:
    """Plain-data form, for widgets and JSON (every stage, every role)."""
    est = estimate_memory(model, cluster, par)
    out = est.as_dict()
    out["per_stage"] = [{**asdict(s), "total_gib": s.total_gib} for s in est.stages]
    return out
