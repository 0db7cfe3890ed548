"""Step time: compute + exposed communication + pipeline bubble + optimizer, and where it goes.

    step = pipeline makespan (simulated: every micro-batch through every stage, with the
           exposed TP/CP/EP communication inside each op and p2p between ranks)
         + exposed data-parallel gradient sync (overlapped with the last micro-batch's backward)
         + optimizer step + ZeRO-1/2's parameter all-gather after it

Each layer's forward and backward take at least the host's time to issue them
(profile.host_ms_per_layer: eager frameworks' Python, autograd and launches; times
frameworks.host_scale where a framework's host is measured slower); the GPU's wait for the host is
its own entry in the breakdown ("host_bound"). An MoE layer whose experts run one by one in FP8 adds
host time per local expert on top, after a host sync has emptied the queue (host.py); it is
counted there too.

Communication kinds and what hides them (profile.overlap gives the hidden fraction):
- TP, CP, EP: per layer, layercomm.py (what each sends and what hides it).
- DP: gradients of the stage, all-reduce (ZeRO-0) or reduce-scatter (ZeRO-1/2), in the
  framework's buckets (each paying its latency) and overlapped with backward (the last
  micro-batch's; Megatron's interleaved schedule syncs each model chunk after its last backward,
  overlap.grad_sync_windows; ZeRO-2 reduces every micro-batch, dpsync.reduces_every_micro_batch);
  ZeRO-1/2 then
  gathers the updated weights in the framework's units (nanotron: tensor by tensor); ZeRO-3
  all-gathers weights before each layer's forward and backward and reduce-scatters gradients,
  every micro-batch, prefetched behind compute.
- PP: one p2p send of the (T, h) activation (or its gradient) per micro-batch per stage boundary;
  it holds its sender except in Megatron's interleaved schedule (overlap.p2p_overlapped).

MFU counts model FLOPs (flops.py, causal attention counted as half the square) against the
dense bf16 peak; HFU adds recompute. Both are stated with their convention in `as_dict`.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property, lru_cache

from . import flops as fl
from ..memory.activations import BF16, tokens
from .comm import collective_time, expert_group, group
from .muon import muon_step_time
from .compute import embedding_time, layer_time, memory_time, optimizer_time, output_layer_time
from .dpsync import dp_sync, gather_bytes, layer_tensors
from .host import expert_loop_host, host_bound
from .layercomm import layer_comm
from ..specs.frameworks import (gemm_scale, grad_accumulation_bytes, grad_reduce_bytes, host_scale,
                                optimizer_bytes, shard_copy_bytes)
from ..specs.overlap import grad_sync_windows, p2p_overlapped
from ..specs.fp8 import float8_all_gather
from ..specs.kernels import layout_attention
from ..specs.hardware import ClusterSpec
from ..memory.estimate import kind_params, pipeline_stages, stage_layers
from ..memory.host import host_step_time
from ..specs.models import ModelSpec
from ..specs.parallel import ParallelConfig, zero_shards
from ..pipeline.simulate import Timeline, simulate_long
from ..pipeline.schedules import n_stages, stage_owner, stages_of_rank
from .attention import kernel_note
from .profiles import HardwareProfile, default_profile
from ..specs.recompute import reissue

@dataclass(frozen=True)
class StepEstimate:
    time_s: float
    tokens_per_s_per_gpu: float
    mfu: float
    hfu: float
    tflops_per_gpu: float
    bubble_fraction: float
    breakdown: dict = field(default_factory=dict)   # seconds per step on the slowest rank
    pipeline: str = "simulated"  # how the pipeline was timed: simulated, extrapolated or closed form
    attention: str = ""          # the attention kernel costed (attention.kernel_note)
    def as_dict(self) -> dict:
        return {"time_s": self.time_s, "tokens_per_s_per_gpu": self.tokens_per_s_per_gpu, "mfu": self.mfu,
                "hfu": self.hfu, "tflops_per_gpu": self.tflops_per_gpu, "bubble_fraction": self.bubble_fraction,
                "breakdown_s": dict(self.breakdown), "pipeline": self.pipeline, "attention": self.attention,
                "convention": "MFU/HFU: model (with recompute for HFU) FLOPs per token, causal attention "
                              "counted as half the square, over the dense bf16 peak; seconds per step"}


@dataclass(frozen=True)
class StageCosts:
    """Per-micro-batch cost of every pipeline stage, with exposed TP/CP/EP communication inside."""
    f: tuple                     # forward, per stage
    b: tuple                     # backward-input (B = b + w), per stage
    w: tuple                     # backward-weight, per stage
    p2p: float                   # one activation send between two pipeline ranks
    layer: dict                  # per (moe?, recompute mode): (forward, backward-input, backward-weight)
    parts: dict                  # per (moe?, recompute mode): (LayerTime, {comm kind: (fwd, bwd, hidden)},
                                 #   seconds the GPU waits for the host)
    layers: tuple                # layer indices per pipeline rank
    stages: tuple                # stage indices per pipeline rank (stages_of_rank)

    @cached_property
    def rank_sums(self) -> tuple:
        """Per pipeline rank: (all its work, its backwards, its forwards) per micro-batch, and
        whether it holds the first and the last stage (pipeline_tail asks for every layout; the
        planner shares one StageCosts between a layout's ZeRO stages)."""
        f, b, w, last = self.f, self.b, self.w, len(self.f) - 1
        out = []
        for mine in self.stages:
            fwd = bwd = 0.0
            for st in mine:
                fwd += f[st]
                bwd += b[st] + w[st]
            out.append((fwd + bwd, bwd, fwd, 0 in mine, last in mine))
        return tuple(out)


def zero_terms(par: ParallelConfig) -> tuple[float, tuple[float, float], bool]:
    """All that stage_costs reads of the ZeRO stage and the HSDP degree: HBM bytes per parameter of
    summing each micro-batch's weight gradients, and of the copies around sharded data parallelism's
    gathers and reduce-scatters; and whether FSDP gathers torchao's float8 weights (only where a
    replica shards them: fp8.float8_all_gather, which moves the weights' casts out of the layer).
    Layouts alike but for ZeRO and HSDP, with equal terms, have equal stage costs (the planner
    shares them)."""
    acc_bytes = grad_accumulation_bytes(par.framework, par.zero, par.microbatches)
    copies = shard_copy_bytes(par.framework, par.zero, grad_reduce_bytes(par)) if par.dp * par.cp > 1 else (0.0, 0.0)
    return acc_bytes, copies, float8_all_gather(par)


def stage_costs(model: ModelSpec, cluster: ClusterSpec, par: ParallelConfig,
                profile: HardwareProfile) -> StageCosts:
    profile = framework_profile(profile, par.framework)
    gpu, p = cluster.gpu, par.pp
    v = par.vpp if par.schedule == "interleaved" else 1
    T = tokens(par)
    kinds, parts = {}, {}                  # per (moe?, recompute mode)
    # summing each micro-batch's weight gradients: a memory-bound pass, with the weight backward
    acc_bytes, copies, _ = zero_terms(par)            # the float8 gather: layer_time asks fp8 itself
    tp_g = group("tp", par, cluster)
    scale = host_scale(par.framework, tp_g.per_node, tp_g.nodes, p > 1 and group("pp", par, cluster).crosses_nodes)
    for mode, mp in par.by_recompute().items():
        for moe in model.layer_kinds:
            lt = layer_time(model, mp, moe, gpu, profile)
            comm = layer_comm(model, mp, cluster, profile, moe, lt)
            exp_f = sum(f * (1 - hf) for f, _, hf, _ in comm.values())
            exp_b = sum(b * (1 - hb) for _, b, _, hb in comm.values())
            params, tensors = sum(kind_params(model, par, moe)), sum(layer_tensors(model, par, moe))
            acc = acc_bytes and memory_time(acc_bytes * params, tensors, gpu, profile)
            # sharded data parallelism's copies around its gathers and reduce-scatters
            copy_f, copy_b = (c and memory_time(c * params, tensors, gpu, profile) for c in copies)
            refwd = reissue(par.framework, mode)
            (f1, b1, w1), waits = host_bound(lt.forward + exp_f + copy_f, lt.backward_input + exp_b,
                                             lt.backward_weight + acc + copy_b, profile, refwd, scale)
            xf, xb = expert_loop_host(model, mp, moe)
            kinds[(moe, mode)], waits = (f1 + xf, b1 + xb, w1), waits + xf + xb
            parts[(moe, mode)] = (lt, comm, waits)
    S = n_stages(par.schedule, p, v)
    f, b, w = [0.0] * S, [0.0] * S, [0.0] * S
    per_stage = {}                         # (dense layers, MoE layers, mode) -> work per micro-batch
    owner = stage_owner(par.schedule, p, v)
    stages = pipeline_stages(model, par)
    for st, stage in enumerate(stages):
        n_moe = model.moe_layers_in(stage)
        mode = par.rank_recompute(owner[st])
        key = (len(stage) - n_moe, n_moe, mode)
        if key not in per_stage:
            per_stage[key] = [sum((n_moe if moe else key[0]) * kinds[(moe, mode)][i] for moe in model.layer_kinds)
                              for i in range(3)]
        f[st], b[st], w[st] = per_stage[key]
    ef, eb = embedding_time(model, par, gpu, profile)
    of, ob, ow = output_layer_time(model, par, gpu, profile)
    embedding_acc = acc_bytes and memory_time(acc_bytes * model.vocab * model.hidden / par.tp, 1, gpu, profile)
    f[0] += ef
    b[0] += eb
    w[0] += embedding_acc
    f[S - 1] += of
    b[S - 1] += ob
    w[S - 1] += ow + (embedding_acc if not model.tied_embeddings or p > 1 else 0.0)
    p2p_bytes = BF16 * T * model.hidden / (par.tp if par.sp else 1)
    p2p = collective_time("p2p", p2p_bytes, group("pp", par, cluster), cluster, profile) if p > 1 else 0.0
    # A blocking send holds its sender for the transfer (overlap["pp"] = 0: nanotron's and
    # Megatron's 1F1B wait on their sends; Megatron's interleaved schedule and async engines hide
    # it): forwards send activations on, backwards send gradients back.
    blocking = 0.0 if p2p_overlapped(par.framework, par.schedule) else p2p * (1 - profile.overlap["pp"])
    for st in range(S - 1):
        f[st] += blocking
        b[st + 1] += blocking
    return StageCosts(tuple(f), tuple(b), tuple(w), p2p, kinds, parts, stage_layers(model, par),
                      tuple(stages_of_rank(par.schedule, p, v, r) for r in range(p)))


_SCALED: dict = {}                 # id(profile), framework -> (profile, its framework's copy)


def framework_profile(profile: HardwareProfile, framework: str) -> HardwareProfile:
    """The profile with the GEMM rate the framework reaches inside a step (frameworks.gemm_scale);
    the same profile where that is the GPU's. Kept per profile: the planner asks thousands of times."""
    scale = gemm_scale(framework)
    if scale == 1.0:
        return profile
    key = (id(profile), framework)
    hit = _SCALED.get(key)
    if hit is None or hit[0] is not profile:
        if len(_SCALED) > 64:
            _SCALED.clear()
        hit = _SCALED[key] = (profile, replace(profile, gemm_fraction=profile.gemm_fraction * scale))
    return hit[1]


def rank_busy(schedule: str, p: int, v: int, costs: StageCosts) -> list[float]:
    """Each rank's work per micro-batch (all its stages' F + B + W)."""
    per_stage = [x + y + z for x, y, z in zip(costs.f, costs.b, costs.w)]
    if len(per_stage) == p:
        return per_stage
    return [sum(per_stage[st] for st in stages_of_rank(schedule, p, v, r)) for r in range(p)]


def pipeline_time(schedule: str, p: int, m: int, v: int, costs: StageCosts) -> float:
    """The pipeline's makespan in closed form, for a planner that scores thousands of layouts
    (the simulator times the finalists). With B_r a rank's work per micro-batch:
    m max(B_r) + fill and drain, where fill and drain is the other ranks' work once ((p-1)B
    when balanced: the (p-1)/m bubble), divided by v interleaved; ZB-H1's W's fill the drain,
    leaving F + I - W per rank (a third of 1F1B's when F = I = W); each rank boundary pays one
    p2p latency going down and one coming back."""
    S = len(costs.f)
    busy = rank_busy(schedule, p, v, costs)
    top = max(range(p), key=busy.__getitem__)
    if schedule == "zb":
        fill = sum(max(0.0, costs.f[r] + costs.b[r] - costs.w[r]) for r in range(p) if r != top)
    elif schedule == "dualpipe":   # two micro-batches' F and B overlap: about half of 1F1B's fill
        fill = (sum(busy) - busy[top]) / 2
    else:
        fill = (sum(busy) - busy[top]) / v
    return m * busy[top] + fill + 2 * (p - 1) * costs.p2p * (S > 1)


def estimate_step(model: ModelSpec, cluster: ClusterSpec, par: ParallelConfig,
                  profile: HardwareProfile | None = None, pipeline: str = "simulate") -> StepEstimate:
    """pipeline="simulate" times every op (the answer); "closed" uses `pipeline_time` (fast)."""
    if pipeline not in ("simulate", "closed"):
        raise ValueError(f"pipeline must be 'simulate' or 'closed' (got {pipeline!r})")
    profile = profile or default_profile(cluster.gpu.name)
    gpu, p, m = cluster.gpu, par.pp, par.microbatches
    v = par.vpp if par.schedule == "interleaved" else 1
    costs = stage_costs(model, cluster, par, profile)
    f, b, w, p2p, parts, layers = costs.f, costs.b, costs.w, costs.p2p, costs.parts, costs.layers
    timeline, how = (None, "closed form")
    if pipeline == "simulate":
        timeline, how = _simulated(par.schedule, p, m, v, f, b, w, p2p)
    if timeline is None:
        busy = tuple(m * x for x in rank_busy(par.schedule, p, v, costs))
        timeline = Timeline(makespan=pipeline_time(par.schedule, p, m, v, costs), busy=busy)

    tail, tail_parts = pipeline_tail(model, cluster, par, profile, costs)
    time_s = timeline.makespan + tail

    tokens_per_gpu = par.gbs * par.seq / time_s / cluster.world
    peak = gpu.bf16_tflops * 1e12
    mflops = fl.model_flops_per_token(model, par.seq)
    # with recompute per rank, each rank's layers at its own mode
    layers_by_mode = {}
    for r, rank_layers in enumerate(layers):
        mode = par.rank_recompute(r)
        layers_by_mode[mode] = layers_by_mode.get(mode, 0) + len(rank_layers)
    hflops = sum(n * fl.hardware_flops_per_token(model, par.seq, mode, framework=par.framework, tiled_mlp=par.tiled_mlp)
                 for mode, n in layers_by_mode.items()) / model.layers
    busiest = max(range(p), key=lambda r: timeline.busy[r])
    breakdown = _breakdown({moe: parts[(moe, par.rank_recompute(busiest))] for moe in model.layer_kinds},
                           layers[busiest], model, m, timeline, tail_parts)
    return StepEstimate(time_s=time_s, tokens_per_s_per_gpu=tokens_per_gpu, mfu=tokens_per_gpu * mflops / peak,
                        hfu=tokens_per_gpu * hflops / peak, tflops_per_gpu=tokens_per_gpu * mflops / 1e12,
                        bubble_fraction=timeline.bubble_fraction, breakdown=breakdown, pipeline=how,
                        attention=kernel_note(layout_attention(par, gpu.name), gpu.name)
                        if par.flash else "unfused (the score matrix in memory)")


def pipeline_tail(model, cluster, par, profile, costs) -> tuple[float, dict]:
    """What follows the pipeline: exposed data-parallel sync, ZeRO traffic and the optimizer step,
    per pipeline rank (the slowest one counts), and its parts."""
    gpu, p, m = cluster.gpu, par.pp, par.microbatches
    v = par.vpp if par.schedule == "interleaved" else 1
    tail, tail_parts = 0.0, {}
    dense_g, expert_g = group(("cp", "ep", "dp"), par, cluster), expert_group("edp", par, cluster)
    grad_bytes = grad_reduce_bytes(par)
    per_kind = {moe: kind_params(model, par, moe) for moe in model.layer_kinds}
    per_tensors = {moe: layer_tensors(model, par, moe) for moe in model.layer_kinds}
    seen = set()                         # pipeline ranks alike (same layers, same ends) cost the same
    for rank_layers, (compute, last_bwd, first_fwd, first, last) in zip(costs.layers, costs.rank_sums):
        n_moe = model.moe_layers_in(rank_layers)
        signature = (len(rank_layers), n_moe, first, last, compute, last_bwd)
        if signature in seen:
            continue
        seen.add(signature)
        dense = expert = 0.0
        tensors = [0, 0]                 # parameter tensors (dense, expert): ZeRO gathers may go one by one
        for moe, (d, e) in per_kind.items():
            n = n_moe if moe else len(rank_layers) - n_moe
            dense, expert = dense + n * d, expert + n * e
            tensors[0] += n * per_tensors[moe][0]
            tensors[1] += n * per_tensors[moe][1]
        for end in (first, last and (not model.tied_embeddings or p > 1)):
            if end:
                dense += model.vocab * model.hidden / par.tp
                tensors[0] += 2                       # the embedding or output matrix, and a norm
        gather = gather_bytes(model, par, len(rank_layers) - n_moe, n_moe, dense, expert)
        sync, exposed_extra, hidden_extra = dp_sync(dense, expert, compute, m, par, cluster, profile, dense_g,
                                                    expert_g, grad_bytes, tensors, len(rank_layers), first_fwd,
                                                    gather)
        windows = grad_sync_windows(par.framework, par.schedule, p, v)     # in chunk backwards
        dp_exposed = sum(max(0.0, sync / len(windows) - profile.overlap["dp"] * last_bwd / v * k) for k in windows)
        shards = zero_shards(par) if par.zero >= 1 else (1, 1)
        shard = dense / shards[0] + expert / shards[1]
        opt = optimizer_time(shard * (1 - par.optimizer_offload), gpu, profile, optimizer_bytes(par))
        ns, ns_comm = muon_step_time(model, par, cluster, profile, {True: n_moe, False: len(rank_layers) - n_moe})
        opt += ns + ns_comm
        host = host_step_time(shard, par, cluster, compute * m)
        if dp_exposed + exposed_extra + opt + sum(host.values()) >= tail:
            tail = dp_exposed + exposed_extra + opt + sum(host.values())
            tail_parts = {"dp_exposed": dp_exposed + exposed_extra, "dp_hidden": sync - dp_exposed + hidden_extra,
                          "optimizer": opt, **host}
    return tail, tail_parts


def closed_step_time(model: ModelSpec, cluster: ClusterSpec, par: ParallelConfig, profile: HardwareProfile,
                     costs: StageCosts | None = None) -> float:
    """estimate_step(..., pipeline="closed").time_s without the rest of the estimate: the
    planner's score. Layouts that differ only in ZeRO stage and HSDP degree with equal zero_terms
    may share `costs` (stage_costs of any of them)."""
    costs = costs or stage_costs(model, cluster, par, profile)
    v = par.vpp if par.schedule == "interleaved" else 1
    return pipeline_time(par.schedule, par.pp, par.microbatches, v, costs) + \
        pipeline_tail(model, cluster, par, profile, costs)[0]


@lru_cache(maxsize=128)
def _simulated(schedule, p, m, v, f, b, w, p2p):
    """Layouts that differ only after the pipeline (ZeRO stage, say) share its simulation."""
    return simulate_long(schedule, p, m, v, f, b, w, p2p)


def _breakdown(parts, rank_layers, model, m, timeline, tail_parts) -> dict:
    n_moe = model.moe_layers_in(rank_layers)
    out, hidden_s = {"compute": 0.0, "recompute": 0.0, "host_bound": 0.0}, {}
    for moe, (lt, comm, waits) in parts.items():
        n = m * (n_moe if moe else len(rank_layers) - n_moe)
        out["compute"] += n * (lt.total - lt.recompute)
        out["recompute"] += n * lt.recompute
        out["host_bound"] += n * waits
        for kind, (fw, bw, hf, hb) in comm.items():
            out[f"{kind}_exposed"] = out.get(f"{kind}_exposed", 0.0) + n * (fw * (1 - hf) + bw * (1 - hb))
            hidden_s[kind] = hidden_s.get(kind, 0.0) + n * (fw * hf + bw * hb)
    # the rest of the busiest rank's op time: embedding, output layer and loss, summing the
    # micro-batches' gradients (frameworks.grad_accumulation_bytes), blocking p2p sends
    out["other"] = max(timeline.busy) - sum(out.values())
    out["bubble"] = timeline.idle
    out.update(tail_parts)
    out.update({f"{kind}_hidden": v for kind, v in hidden_s.items()})
    return out
