"""The collectives one layer runs per micro-batch, beside its compute, and how much of each hides
(step.py puts them inside each pipeline op; profile.overlap gives the hidden fraction where no
mechanism below decides it):
- TP (with SP: all-gather + reduce-scatter of the (T, h) activations, twice per layer forward
  and twice backward, the all-gathers in FP8 where the framework quantizes first,
  fp8.tp_gather_bytes; without SP: all-reduce) sits on the critical path unless parallel.tp_overlap
  pipelines it with its GEMMs (Megatron/TE userbuffers: all but one ring step in tp hides, as far
  as the GEMMs last; torchtitan's async TP the forward's only, DeepSpeed and nanotron
  nothing: overlap.tp_pipelining). Without it, Megatron's and nanotron's column-parallel linears
  all-gather their saved input shard again in backward beside the input-gradient GEMM and
  reduce-scatter that gradient beside the weight-gradient GEMM (overlap.tp_backward_overlapped):
  two more all-gathers per layer, each collective hidden as far as its GEMM lasts.
- CP (ring attention): each rank sends its K and V around the ring while attention computes.
- offload (parallel.offload_layers): a layer's saved activations go to host memory during the next
  layer's forward and come back during the previous one's backward (Transformer Engine's CPU
  offload, one layer ahead), at the GPU's host link (GPUSpec.host_link_gbps); spread over the
  rank's layers, the share offloaded. parallel.offload_modules (Megatron's fine-grained
  offloading) copies what its modules save (offload.offload_parts) alike, in every layer; the
  copies out hide behind the layer's forward, the reloads as offload.reload_split says: a group
  that follows another with no compute between (moe_act's expert_fc1, core_attn's attn_proj) is
  waited for, the first of each run hides behind at most the layer's backward.
- EP: token dispatch and combine, twice forward and twice backward per MoE layer: an all-to-all
  (a copy per expert), or with parallel.dispatcher "deepep" or "hybridep" a copy per node over the
  network (comm.dispatch_time; DeepEP's own kernels on Blackwell at their measured rate on
  parallel.dispatch_sms SMs, dispatch.py); DualPipe and parallel.ep_overlap hide each all-to-all behind the piece
  of the paired micro-batch's compute that Megatron's schedule runs beside it (paired_hidden), on
  the micro-batches that schedule pairs (paired_share).
"""
from __future__ import annotations

from ..memory.activations import BF16, saved_per_layer, tokens
from ..memory.offload import offload_parts, reload_split
from ..specs.fp8 import tp_gather_bytes
from ..specs.overlap import async_tp_gathers, tp_backward_overlapped, tp_pipelining
from ..specs.recompute import modules, policy as recompute_policy
from .comm import collective_time, dispatch_time, expert_group, group
from .dispatch import default_sms
from .profiles import DEEPEP_SMS


def layer_comm(model, par, cluster, profile, moe_layer, lt):
    """Per micro-batch, per layer: {kind: (forward seconds, backward seconds, hidden fraction of
    the forward's, hidden fraction of the backward's)}."""
    T = tokens(par)
    act = BF16 * T * model.hidden
    attn_time, gemm_time = lt.attention, lt.gemm
    kind, every = recompute_policy(par.framework, par.recompute)
    # a full recompute runs the layer's forward collectives again before its backward (1/N of the
    # layers with layer:N); Megatron's moe module its dispatch and combine; op_sac keeps their outputs
    again = 1.0 / every if kind == "full" else 0.0
    again_ep = 1.0 if "moe" in modules(par.recompute) else again
    out = {}
    if par.tp > 1:
        g = group("tp", par, cluster)
        if par.sp:
            ag = collective_time("all_gather", act * tp_gather_bytes(par) / BF16, g, cluster, profile)
            rs = collective_time("reduce_scatter", act, g, cluster, profile)
        one = ag + rs if par.sp else collective_time("all_reduce", act, g, cluster, profile)
        hidden = tp_hidden(par, 2 * one, gemm_time, profile)
        out["tp"] = (2 * one, 2 * one * (1 + again), hidden, hidden)
        if par.tp_overlap and tp_pipelining(par.framework) == "forward":
            # only the forward's collectives, and a recomputed forward's, pipeline with their GEMMs;
            # under torchao's rowwise and MX recipes only their reduce-scatters (async_tp_gathers)
            if par.sp and not async_tp_gathers(par):
                fused = tp_hidden(par, 2 * rs, gemm_time, profile)
                hidden = (2 * rs * fused + 2 * ag * profile.overlap["tp"]) / (2 * one)
            hid = again * hidden + profile.overlap["tp"]
            out["tp"] = (2 * one, 2 * one * (1 + again), hidden, hid / (1 + again))
        if par.sp and kind == "op_sac" and par.framework == "fsdp2":
            # torchtitan's op-level SAC saves the reduce-scatters' outputs but not the all-gathers'
            # (its save list): the backward gathers each column-parallel group's input again. Async
            # TP could fuse it with the recomputed matmuls that take it as left operand, but as with
            # the backward's other gathers its measured pairs show no gain (tp_pipelining)
            f, b, hf, hb = out["tp"]
            out["tp"] = (f, b + 2 * ag, hf, (b * hb + 2 * ag * profile.overlap["tp"]) / (b + 2 * ag))
        if par.sp and not par.tp_overlap and tp_backward_overlapped(par.framework):
            # backward: the row-parallel linears' gradient all-gathers stay exposed; each column-
            # parallel group all-gathers its saved input shard again beside its input-gradient GEMM,
            # then reduce-scatters that gradient beside its weight-gradient GEMM (each as long as
            # the group's forward GEMM)
            bwd = 4 * ag + 2 * rs
            hid = sum(min(ag, c) + min(rs, c) for c in lt.column_gemms) + again * hidden * 2 * one
            bwd += again * 2 * one
            out["tp"] = (2 * one, bwd, hidden, max(hidden, hid / bwd))
    if par.cp > 1:
        kv = BF16 * T * 2 * model.kv_dim / par.tp
        g = group("cp", par, cluster)
        # Megatron/Transformer Engine pass each rank's K and V around the ring, cp - 1 sends per
        # layer, each under the attention of the chunk already there (cp_comm_type p2p); torch's
        # context parallelism (torchtitan) all-gathers them (its default rotate method)
        fwd = (par.cp - 1) * collective_time("p2p", kv, g, cluster, profile) if par.framework == "megatron" else \
            collective_time("all_gather", kv * par.cp, g, cluster, profile)
        hidden = min(1.0, profile.overlap["cp"] * attn_time / fwd) if fwd else 0.0
        out["cp"] = (fwd, (2 + again) * fwd, hidden, hidden)
    if moe_layer and par.ep > 1:
        a2a = ep_exchange(model, par, cluster, profile)
        sms = par.dispatch_sms or default_sms(par.dispatcher, expert_group("ep", par, cluster).nodes)
        hidden = paired_hidden(lt, a2a) * (1.0 if par.schedule == "dualpipe" else paired_share(par)) \
            if par.schedule == "dualpipe" or par.ep_overlap else profile.overlap["ep"]
        if par.dispatcher != "alltoall":  # the compute beside DeepEP's kernels runs on the SMs they leave
            # (profile.dispatch_sm_share is DeepEP's 20 SMs' share of the GPU)
            hidden *= 1 - min(0.95, profile.dispatch_sm_share * sms / DEEPEP_SMS)
        out["ep"] = (a2a, a2a * (1 + again_ep), hidden, hidden)
    back = lt.backward_input + lt.backward_weight
    if par.offload_layers:
        copy = saved_per_layer(model, par, moe_layer) / (cluster.gpu.host_link_gbps * 1e9)
        share = min(1.0, par.offload_layers / model.layers)    # pp is 1 (check_layout)
        out["offload"] = (share * copy, share * copy, min(1.0, lt.forward / copy) if copy else 1.0,
                          min(1.0, back / copy) if copy else 1.0)
    elif par.offload_modules:
        hides, waits = reload_split(offload_parts(model, par, moe_layer))
        rate = cluster.gpu.host_link_gbps * 1e9
        copy = (hides + waits) / rate
        out["offload"] = (copy, copy, min(1.0, lt.forward / copy) if copy else 1.0,
                          min(hides / rate, back) / copy if copy else 1.0)
    return out


def ep_exchange(model, par, cluster, profile) -> float:
    """Seconds of one MoE layer's dispatch and combine for one micro-batch, on the busiest rank
    (moe_imbalance times its share): an all-to-all of a copy per expert, or DeepEP's or HybridEP's
    copy per node and per GPU (comm.dispatch_time)."""
    g = expert_group("ep", par, cluster)
    mine, moe = BF16 * tokens(par) * model.hidden / (par.tp if par.sp else 1), model.moe
    one = dispatch_time(mine, moe.experts, moe.top_k, g, cluster, profile, moe.group_limit, BF16 * model.hidden,
                        par.dispatcher, par.dispatch_sms) if par.dispatcher != "alltoall" else \
        collective_time("all_to_all", mine * moe.top_k, g, cluster, profile)
    return 2 * par.moe_imbalance * one


def paired_hidden(lt, a2a: float) -> float:
    """The hidden fraction of an MoE layer's dispatch and combine when one micro-batch's forward
    runs beside another's backward (Megatron's overlap_moe_expert_parallel_comm,
    megatron/core/models/common/model_chunk_schedule_plan.py; DualPipe pairs its chunks alike).
    Each all-to-all runs on the communication stream beside one piece of compute, as far as their
    data allow:
        comm: combine_bwd      | dispatch_fwd -> dispatch_bwd | combine_fwd
        comp: attention_fwd    | mlp_bwd -> mlp_fwd           | attention_bwd
    the backward's combine under the forward's attention (and router); the forward's dispatch
    once that attention is done, under the MLP's backward; the backward's dispatch once the
    MLP's input gradient is (half its backward); the MLP's forward once its tokens arrive; the
    forward's combine once that MLP is done, under the backward's attention, which waits for the
    backward's dispatch. An all-to-all longer than the compute beside it shows; `a2a` is the
    forward's dispatch and combine (the backward's are as long)."""
    one = a2a / 2
    mf, mb = lt.mlp
    af = max(0.0, lt.forward - mf)
    ab = max(0.0, lt.backward_input + lt.backward_weight - lt.recompute - mb)
    s2 = max(af, one)                       # attention forward, and the backward's combine, done
    df_end = s2 + one                       # the forward's dispatch
    db_end = max(df_end, s2 + mb / 2) + one  # the backward's dispatch, after the MLP's input gradient
    mf_end = max(s2 + mb, df_end) + mf      # the MLP's forward, after its backward and its tokens
    end = max(max(db_end, mf_end) + one, max(mf_end, db_end) + ab)
    exposed = max(0.0, end - (af + ab + mf + mb))
    return 1.0 - min(1.0, exposed / (4 * one)) if one > 0 else 1.0


def paired_share(par) -> float:
    """The share of a rank's micro-batch forwards (and as many backwards) that Megatron's combined
    1F1B schedule (overlap_moe_expert_parallel_comm) runs beside another micro-batch's backward.
    Without PP the first forward and the last backward run alone
    (pipeline_parallel/combined_1f1b.py, combined_1f1b_schedule_for_no_pipelining). With PP (which
    it allows only interleaved) each rank's warmup forwards run alone, and as many cooldown
    backwards: (pp - rank - 1) * 2 + (vpp - 1) * pp + 1, the one extra so that every paired
    forward and backward are independent (schedules.py, get_pp_rank_microbatches), pp - 1 + (vpp -
    1) * pp + 1 averaged over the ranks, out of the rank's m * vpp chunks."""
    chunks = par.microbatches * par.vpp
    alone = 1 if par.pp == 1 else par.pp - 1 + (par.vpp - 1) * par.pp + 1
    return 1.0 - min(alone, chunks) / chunks if chunks > 0 else 0.0


def tp_hidden(par, comm: float, gemm: float, profile) -> float:
    """Hidden fraction of a layer's TP collectives. Pipelined with their GEMMs (tp_overlap:
    Transformer Engine splits each all-gather/reduce-scatter into tp ring steps, each running
    under the GEMM on the chunk already there), one step in tp stays exposed and the rest hides
    only as far as the layer's GEMMs last (the forward's, the shorter; backward runs two).
    Without it, the profile's overlap["tp"] (0: the collective waits for its GEMM)."""
    if not par.tp_overlap or comm <= 0 or not tp_pipelining(par.framework):
        return profile.overlap["tp"]
    exposed = max(comm / par.tp, comm - gemm)
    return max(profile.overlap["tp"], 1 - exposed / comm)
