"""Muon's step on one GPU (parallel.optimizer "muon"): the Newton-Schulz GEMMs on the weight matrices
the GPU orthogonalises, and the communication each framework adds to bring them whole
(specs/optimizers.py says who does what, from each framework's source).

The matrices of a pipeline rank's layers are shared among the ranks that own them: Megatron's
layer-wise distributed optimizer (ZeRO 1), DeepSpeed's partitions and torchtitan's DistMuon over the
data-parallel shards, the routed experts over their own (zero_shards); Megatron at ZeRO 0 steps every
matrix on every rank. Sharing cannot split a matrix: a rank does at least the largest one's NS
(its owners are balanced by NS cost, as Megatron's and torchtitan's are; DeepSpeed's round robin is
taken as balanced too). Megatron orthogonalises each whole matrix on every TP rank (its default
tp_mode, "duplicated") after an fp32 all-gather of the TP shards, and the experts' over their
expert-TP group alike. torchtitan's fp32 all-to-alls there and back run beside the NS (double-
buffered on their own stream): the slower of the two counts. DeepSpeed's ZeRO 3 all-reduces the
gradients where ZeRO 3 reduce-scatters them and all-gathers the momenta, the new gradients and the
new momenta (bf16): four all-gathers' worth of the matrices over the data-parallel group, on every
micro-batch (its reduce path runs them, not the step). Under HSDP torchtitan's owners are one
replica's FSDP group. Under
tensor parallelism the frameworks but Megatron orthogonalise each TP rank's own shard."""
from __future__ import annotations

from ..specs.hardware import ClusterSpec
from ..specs.models import ModelSpec
from ..specs.optimizers import NS_STEPS, momentum_bytes, muon, ns_gemms
from ..specs.parallel import ParallelConfig, zero_shards
from ..specs.frameworks import grad_dtype
from .comm import Group, collective_time, expert_group, group, hsdp_groups
from .compute import gemm_time
from .profiles import HardwareProfile


def _ns_seconds(rows: float, cols: float, cluster: ClusterSpec, profile: HardwareProfile) -> float:
    return NS_STEPS * sum(gemm_time(m, n, k, cluster.gpu, profile) for m, n, k in ns_gemms(rows, cols))


def _innermost(n: int, cluster: ClusterSpec) -> Group:
    """The expert-TP group: consecutive ranks, innermost in Megatron's expert grid (comm.expert_group)."""
    per_node = min(n, cluster.gpus_per_node)
    return Group(n, per_node, -(-n // per_node))


def muon_step_time(model: ModelSpec, par: ParallelConfig, cluster: ClusterSpec, profile: HardwareProfile,
                   layers_by_kind: dict) -> tuple[float, float]:
    """(Newton-Schulz seconds, exposed communication seconds) of one step's Muon on a GPU whose
    pipeline rank holds `layers_by_kind` layers of each kind ({moe?: count}); (0, 0) under AdamW."""
    if not muon(par) or not any(layers_by_kind.values()):
        return 0.0, 0.0
    owners = zero_shards(par) if par.zero >= 1 else (1, 1)
    work, largest, whole = [0.0, 0.0], [0.0, 0.0], [0.0, 0.0]   # (dense, expert): seconds, params
    for moe, n in layers_by_kind.items():
        for mm in model.layer_matmuls(moe) if n else ():
            count = n * (mm.stored / par.ep if mm.expert else mm.stored)
            rows, cols = mm.fan_out, mm.fan_in
            if par.framework != "megatron":      # the others orthogonalise a TP rank's own shard
                ways = par.etp if mm.expert else par.tp
                rows, cols = (rows / ways, cols) if mm.tp == "col" else (rows, cols / ways) if mm.tp == "row" \
                    else (rows, cols)
            t = _ns_seconds(rows, cols, cluster, profile)
            work[mm.expert] += count * t
            largest[mm.expert] = max(largest[mm.expert], t)
            whole[mm.expert] += count * rows * cols
    ns = sum(max(w / k, big) for w, k, big in zip(work, owners, largest) if w)
    owned = [p / k for p, k in zip(whole, owners)]      # whole-matrix parameters this GPU steps
    if par.framework == "megatron":
        comm = sum(collective_time("all_gather", 4 * p, g, cluster, profile) for p, g, ways in
                   zip(owned, (group(("tp",), par, cluster), _innermost(par.etp, cluster)), (par.tp, par.etp))
                   if p and ways > 1)
        return ns, comm
    dense_g = group(("cp", "ep", "dp"), par, cluster)
    groups = (hsdp_groups(dense_g, par.dp_replicate)[0] if par.dp_replicate > 1 else dense_g,
              expert_group("edp", par, cluster))
    if par.framework == "fsdp2":     # there and back, fp32, beside the NS: the slower one counts
        a2a = sum(2 * collective_time("all_to_all", 4 * p, g, cluster, profile) for p, g in zip(owned, groups) if p)
        return max(ns, a2a), 0.0
    if par.zero == 3:                # deepspeed: in its communication dtype, on every micro-batch's reduction
        nbytes = 4 * momentum_bytes(par.framework, grad_dtype(par))
        m = par.microbatches
        return m * ns, m * sum(collective_time("all_gather", nbytes * w, g, cluster, profile)
                               for w, g in zip(whole, groups) if w)
    return ns, 0.0
