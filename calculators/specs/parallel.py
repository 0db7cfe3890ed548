"""Parallel layouts and the rules that make them valid.

`ParallelConfig` checks what it can alone; `check_layout(model, cluster, par)` checks the rules
that need the model and the cluster, raises ConfigError with every broken rule (numbers and what
to change), and returns warnings for layouts that run but are probably not what the user wants.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from . import limits
from .errors import ConfigError, require
from .validate import check_fields, show, whole_list
from .frameworks import MAX_ZERO_WITH_PP, runs
from .overlap import tp_pipelining
from .knob_checks import check_megatron_knobs
from .hardware import DEFAULT_NETWORK, ClusterSpec
from .models import ModelSpec
from .optimizers import OPTIMIZERS
from .stages import virtual_split
from .recompute import (EXPLICIT, MODULES, MODULES_TEXT, OFFLOAD_MODULES, STANDARD as RECOMPUTE, modules,
                        offload_modules, order as recompute_order, recomputed_norms,
                        valid as recompute_valid)

ATTENTION_KERNELS = ("", "fa2", "fa3", "cudnn", "cudnn-2025")    # "": the framework's (kernels.attention_kernel)
LOSS_KERNELS = ("", "eager", "compiled", "bf16", "chunked")   # "": the framework's (kernels.loss_kernel)
EXPERT_KERNELS = ("", "loop", "fused")             # "": the framework's (kernels.expert_kernel)
ELEMENTWISE_KERNELS = ("", "eager", "fused", "eager-fused-norm")   # "": the framework's (kernels.elementwise_kernels)
GRAD_DTYPES = ("", "fp32", "bf16")                 # "": the framework's (frameworks.grad_dtype)
MOMENT_DTYPES = ("", "fp32", "bf16")               # "": fp32
MASTER_DTYPES = ("", "fp32", "remainder", "16bit", "none")  # "": the framework's (frameworks.master_dtype)
FP8_RECIPES = ("", "delayed", "tensorwise", "mxfp8", "blockwise", "rowwise", "rowwise_with_gw_hp")  # fp8.fp8_recipe
FP8_WEIGHTS = ("", "fp8", "bf16")                  # "": the framework's (fp8.fp8_weights)
SCHEDULES = ("gpipe", "1f1b", "interleaved", "zb", "dualpipe")
FRAMEWORKS = ("megatron", "fsdp2", "deepspeed", "nanotron")
DISPATCHERS = ("alltoall", "deepep", "hybridep")
PRECISIONS = ("bf16", "fp8")
ZERO_STAGES = (0, 1, 2, 3)
DEFAULT_FRAMEWORK = "megatron"


@dataclass(frozen=True)
class ParallelConfig:
    dp: int = 1                  # d, data-parallel replicas
    dp_replicate: int = 1        # HSDP under fsdp2 (ZeRO 2/3): FSDP shards over dp*cp / dp_replicate ranks and
                                 # those groups replicate (torchtitan's data_parallel_replicate_degree); 1: one group
    tp: int = 1                  # t, tensor parallel
    pp: int = 1                  # p, pipeline stages
    cp: int = 1                  # c, context parallel (sequence split for attention)
    ep: int = 1                  # e, expert parallel (inside dp*cp*tp, as in Megatron)
    etp: int = 0                 # expert tensor parallel; 0: = tp (Megatron's default)
    vpp: int = 1                 # v, virtual stages per pipeline rank (interleaved)
    zero: int = 0                # Z, ZeRO stage 0..3 (3 = FSDP full shard)
    sp: bool = False             # sequence parallelism with TP
    tp_overlap: bool = False     # TP collectives pipelined with their GEMMs (Megatron/TE tp_comm_overlap)
    dispatcher: str = "alltoall"  # MoE token dispatch: alltoall (a copy per expert) | deepep (DeepEP's normal
                                  # kernels) | hybridep (NVIDIA's): a copy per node on the network, then NVLink
    dispatch_sms: int = 0        # SMs DeepEP's kernels run on (Megatron's moe_flex_dispatcher_num_sms); 0: 20
    ep_overlap: bool = False     # MoE dispatch and combine run under another micro-batch's compute
                                 # (Megatron's overlap_moe_expert_parallel_comm; DualPipe does it always)
    moe_imbalance: float = 1.0   # tokens the busiest expert rank receives over the balanced share
    mbs: int = 1                 # b, micro-batch in sequences
    gbs: int = 1                 # B, global batch in sequences
    seq: int = 4096              # s, tokens per sequence
    recompute: str = "none"      # none | selective | full | core_attn | op_sac | op_sac+core_attn | layer:N |
                                 # modules a+b (recompute.py; selective: the framework's, core_attn or fsdp2's op_sac)
    precision: str = "bf16"      # bf16 | fp8
    schedule: str = "1f1b"       # gpipe | 1f1b | interleaved | zb | dualpipe
    framework: str = DEFAULT_FRAMEWORK
    flash: bool = True           # flash attention (no s x s score matrix is stored)
    attention: str = ""          # its kernel: fa2 | fa3 | cudnn | cudnn-2025 (cuDNN 9.9 to 9.13); "": the framework's
    compile: bool = False        # torch.compile (fsdp2, deepspeed): element-wise ops fused, fewer saved
    loss: str = ""               # the cross-entropy: eager | compiled | bf16 (eager on the bf16 logits, no fp32
                                 # upcast) | chunked (Liger's fused linear one); "": kernels.loss_kernel's
    experts: str = ""            # the local experts' GEMMs: loop (a launch per expert, Transformer Engine's
                                 # GroupedLinear) | fused (one kernel); "": the framework's (kernels.expert_kernel)
    elementwise: str = ""        # the norms, RoPE and activation kernels' HBM traffic: eager (unfused PyTorch
                                 # ops) | fused (Transformer Engine's, Liger's, torch.compile's); "": the
                                 # framework's (kernels.elementwise_kernels); time only
    grad_dtype: str = ""         # gradients for the optimizer and the data-parallel reduction: fp32 | bf16;
                                 # "": the framework's (frameworks.grad_dtype; Megatron's --grad-reduce-in-bf16)
    moment_dtype: str = ""       # Adam's moments: fp32 | bf16 (Megatron's precision-aware optimizer,
                                 # --exp-avg-dtype / --exp-avg-sq-dtype); "": fp32
    master_dtype: str = ""       # the optimizer's master weights: fp32 | remainder (the 16 bits an fp32 master
                                 # has beyond its bf16 weight: Megatron's precision-aware optimizer's
                                 # store_param_remainders, Apex's DistributedFusedAdam under NeMo 1.x) | 16bit
                                 # (a master of its own in 2 bytes: Megatron's --main-params-dtype fp16, Apex's
                                 # with a bf16 state over FP8 weights) | none
                                 # (the bf16 weights are the master: Apex's with dtype bf16); megatron only;
                                 # "": the framework's (frameworks.master_dtype)
    fp8_recipe: str = ""         # FP8 scaling. megatron, Transformer Engine's (--fp8-recipe): delayed |
                                 # tensorwise (current per-tensor scaling) | mxfp8 (Blackwell's 1x32 blocks) |
                                 # blockwise (DeepSeek-V3's 1x128 and 128x128 blocks); "": delayed. fsdp2,
                                 # torchao's: tensorwise | rowwise | rowwise_with_gw_hp | mxfp8; "": tensorwise
    fp8_weights: str = ""        # what Megatron keeps its FP8 layers' weights as: fp8 (FP8 parameters, gathered
                                 # in FP8: --fp8-param-gather) | bf16 (bf16 parameters, whose FP8 copy Transformer
                                 # Engine keeps from step to step); "": the framework's (fp8.fp8_weights)
    offload_layers: int = 0      # layers whose saved activations wait in host memory between forward and backward
                                 # (Megatron's --cpu-offloading-num-layers; deepspeed's cpu_checkpointing: all)
    offload_modules: str = ""    # modules whose saved activations wait in host memory, joined by '+' (Megatron's
                                 # fine-grained activation offloading, --offload-modules): attn_norm, qkv_linear,
                                 # core_attn, attn_proj, mlp_norm, expert_fc1, moe_act
    optimizer_offload: float = 0.0  # share of the optimizer (master, moments, the gradients it reads) kept and
                                 # stepped in host memory (memory/host.py): DeepSpeed's offload_optimizer, Megatron's
                                 # --optimizer-cpu-offload with its fraction, FSDP2's CPUOffloadPolicy
    optimizer: str = "adamw"     # adamw | muon (Newton-Schulz on the weight matrices, AdamW on the rest, as each
                                 # framework runs it: specs/optimizers.py)
    tiled_mlp: bool = False      # the dense SwiGLU MLP run in tiles of `hidden` tokens, its forward again tile by tile
                                 # in backward (DeepSpeed's TiledMLP: ALST, ArcticTraining's tiled_mlp_compute)
    param_offload: bool = False  # ZeRO-3 weight shards in host memory, copied in for every gather (DeepSpeed's
                                 # offload_param; FSDP2's CPUOffloadPolicy, which moves both)
    split: tuple = ()            # layers held by each pipeline stage, first to last (p*vpp stages when
                                 # interleaved: stage i runs on rank i % p); () = even
    recompute_ranks: tuple = ()  # recompute per pipeline rank (first to last); () = `recompute` on every rank

    def __post_init__(self):
        for key in ("split", "recompute_ranks"):
            if isinstance(getattr(self, key), list):
                object.__setattr__(self, key, tuple(getattr(self, key)))
        if self.etp == 0:
            object.__setattr__(self, "etp", self.tp if type(self.tp) is int else 1)
        p = check_fields(self, "parallel", limits.PARALLEL,
                         flags=("sp", "tp_overlap", "flash", "compile", "ep_overlap", "param_offload", "tiled_mlp"),
                         choices={"precision": PRECISIONS, "schedule": SCHEDULES, "framework": FRAMEWORKS,
                                  "dispatcher": DISPATCHERS, "attention": ATTENTION_KERNELS,
                                  "loss": LOSS_KERNELS, "experts": EXPERT_KERNELS, "grad_dtype": GRAD_DTYPES,
                                  "elementwise": ELEMENTWISE_KERNELS,
                                  "moment_dtype": MOMENT_DTYPES, "master_dtype": MASTER_DTYPES,
                                  "fp8_recipe": FP8_RECIPES, "fp8_weights": FP8_WEIGHTS, "optimizer": OPTIMIZERS})
        in_range = type(self.dispatch_sms) is int and 0 <= self.dispatch_sms <= limits.PARALLEL["dispatch_sms"][1]
        require(p, self.dispatcher != "deepep" or not in_range or self.dispatch_sms % 2 == 0,
                lambda: f"parallel.dispatch_sms={self.dispatch_sms} must be even with dispatcher deepep: DeepEP runs "
                "a channel on each pair of SMs (its intranode kernel asserts an even count)")
        require(p, recompute_valid(self.recompute),
                lambda: f"parallel.recompute must be one of {RECOMPUTE + EXPLICIT}, layer:N "
                        f"(every N-th layer recomputed in full, N from 1 to 1,024) or Megatron's recompute modules "
                        f"joined by '+' (e.g. {MODULES_TEXT}; modules: {', '.join(MODULES)}) "
                        f"(got {show(self.recompute)})")
        require(p, self.offload_modules == "" or offload_modules(self.offload_modules),
                lambda: f"parallel.offload_modules must be Megatron's offload modules joined by '+', each once "
                        f"(e.g. expert_fc1+moe_act; modules: {', '.join(OFFLOAD_MODULES)}), or empty "
                        f"(got {show(self.offload_modules)})")
        if self.split != ():             # an empty dict or string is not "no split": it is refused
            # the first and last stage may hold no layer: only the embedding, only the loss (Megatron)
            whole_list(p, "parallel.split (layers of each pipeline stage)", self.split, 0, limits.MAX_LAYERS)
            require(p, not isinstance(self.split, (list, tuple)) or 0 not in self.split[1:-1],
                    "parallel.split: only the first and the last pipeline stage may hold no layer (the "
                    "embedding's and the loss's stages)")
        modes_ok = isinstance(self.recompute_ranks, tuple) and len(self.recompute_ranks) <= limits.MAX_LAYERS \
            and _recompute_modes(self.recompute_ranks)
        bad = [m for m in self.recompute_ranks if not recompute_valid(m)][:1] \
            if isinstance(self.recompute_ranks, tuple) else []
        require(p, modes_ok, lambda: f"parallel.recompute_ranks must list one recompute value per pipeline rank "
                                     f"(got {show(self.recompute_ranks)}" +
                                     (f"; {show(bad[0], 40)} is not one: use {', '.join(RECOMPUTE + EXPLICIT)}, "
                                      "layer:N or Megatron's modules joined by '+'" if bad else "") + ")")
        if modes_ok and self.recompute_ranks and recompute_valid(self.recompute):
            most = max(self.recompute_ranks, key=recompute_order)
            require(p, self.recompute == most,
                    lambda: f"parallel.recompute must be the most recompute of recompute_ranks ({most!r}), "
                            "the one a framework that applies one setting everywhere would use")
        if p:
            raise ConfigError(p)

    def rank_recompute(self, rank: int) -> str:
        """The recompute mode of pipeline rank `rank`."""
        return self.recompute_ranks[rank] if self.recompute_ranks else self.recompute

    def by_recompute(self) -> dict:
        """{mode: this layout with that mode on every rank} for every mode some rank uses: the
        per-layer costs that memory and time look up by a rank's mode."""
        if not self.recompute_ranks:
            return {self.recompute: self}
        return {mode: replace(self, recompute=mode, recompute_ranks=())
                for mode in set(self.recompute_ranks) | {self.recompute}}

    @property
    def world(self) -> int:
        return self.dp * self.tp * self.pp * self.cp

    @property
    def microbatches(self) -> int:   # m, per pipeline per step
        return self.gbs // (self.dp * self.mbs)

    @property
    def tokens_per_step(self) -> int:
        return self.gbs * self.seq


def derive(par: ParallelConfig, **changes) -> ParallelConfig:
    """`par` with `changes`, without running ParallelConfig's checks again: for the planner's hot
    loops (thousands of layouts per search), whose values come from its checked search space
    (space.space) and keep every rule that holds alone. A tenth of dataclasses.replace's cost."""
    new = object.__new__(ParallelConfig)
    new.__dict__.update(par.__dict__)
    new.__dict__.update(changes)
    return new


def _recompute_modes(modes: tuple) -> bool:
    return all(recompute_valid(mode) for mode in modes)


_MODULE_PART = {"moe_act": "MoE layer", "moe": "MoE layer", "shared_experts": "shared expert",
                "mla_up_proj": "multi-latent attention", "mlp": "dense MLP layer",
                "layernorm": "norm of its own (Megatron fuses a dense layer's norms into its linears)"}


def _has_module(model: ModelSpec, module: str, framework: str = "megatron") -> bool:
    """Whether the model has the part a Megatron recompute module recomputes (Megatron's
    layernorm: a norm of its own, recompute.recomputed_norms)."""
    if module == "layernorm":
        return recomputed_norms(framework, model.mla is not None, bool(model.moe and model.moe_layers)) > 0
    if module == "mla_up_proj":
        return model.mla is not None
    if module == "mlp":
        return model.dense_mlp_layers > 0
    if module == "shared_experts":
        return bool(model.moe and model.moe.shared_experts and model.moe_layers)
    if module in ("moe", "moe_act"):
        return bool(model.moe and model.moe_layers)
    return True


def check_layout(model: ModelSpec, cluster: ClusterSpec, par: ParallelConfig) -> list[str]:
    """Raise ConfigError naming every broken rule; return warnings (layout runs, but look again)."""
    p: list[str] = []
    w: list[str] = []
    t, d, pp, c, e, v = par.tp, par.dp, par.pp, par.cp, par.ep, par.vpp
    require(p, par.world == cluster.world,
            lambda: f"dp*tp*pp*cp = {d}*{t}*{pp}*{c} = {par.world} GPUs but the cluster has "
                    f"{cluster.nodes}x{cluster.gpus_per_node} = {cluster.world}; change a size so the product is "
                    f"{cluster.world}")
    require(p, model.heads % t == 0,
            lambda: f"tp={t} must divide heads={model.heads}; try tp in {_divisors(model.heads, 64)}")
    require(p, model.kv_heads % t == 0 or model.mla is not None,
            lambda: f"tp={t} must divide kv_heads={model.kv_heads} (each TP rank owns whole KV groups); "
            f"try tp in {_divisors(model.kv_heads, 64)}")
    if model.dense_mlp_layers:
        require(p, model.ffn % t == 0, lambda: f"tp={t} must divide ffn={model.ffn}")
    require(p, par.gbs % (d * par.mbs) == 0,
            lambda: f"gbs={par.gbs} must be a multiple of dp*mbs = {d}*{par.mbs} = {d * par.mbs}; "
            f"nearest valid gbs: {max(1, round(par.gbs / (d * par.mbs))) * d * par.mbs}")
    m = max(1, par.gbs // (d * par.mbs))
    if par.dp_replicate > 1:
        require(p, d % par.dp_replicate == 0,
                lambda: f"dp_replicate={par.dp_replicate} must divide dp={d} (HSDP: dp / dp_replicate ranks shard "
                f"each replica); try dp_replicate in {_divisors(d, 64)}")
        expert_ranks = zero_shards(replace(par, dp_replicate=1))[1]
        require(p, model.moe is None or expert_ranks % par.dp_replicate == 0,
                lambda: f"dp_replicate={par.dp_replicate} must divide the experts' data-parallel ranks, "
                f"dp*cp*tp / (ep*etp) = {expert_ranks}: lower ep or dp_replicate")
        require(p, par.framework == "fsdp2" and par.zero >= 2,
                lambda: f"dp_replicate={par.dp_replicate} is FSDP2's hybrid sharding (HSDP), under zero 2 or 3; "
                + (f"at zero {par.zero} every data-parallel rank is already a replica: leave it 1"
                   if par.framework == "fsdp2" else f"{par.framework} has no such knob: leave it 1"))
    require(p, model.layers >= pp * v or bool(par.split or virtual_split(model.layers, pp, v, par.framework)),
            lambda: f"layers={model.layers} cannot fill pp*vpp = {pp}*{v} = {pp * v} stages; lower pp or vpp")
    if par.split:
        stages = pp * v
        require(p, len(par.split) == stages and sum(par.split) == model.layers,
                lambda: f"split={list(par.split)} must give each of the pp*vpp = {stages} pipeline stages its layers, "
                f"{model.layers} in all")
        require(p, par.schedule != "dualpipe", "a non-uniform split needs a schedule other than dualpipe")
    if par.recompute_ranks:
        require(p, len(par.recompute_ranks) == pp,
                lambda: f"recompute_ranks={list(par.recompute_ranks)} must give each of the pp={pp} ranks its mode")
    if v > 1:
        require(p, par.schedule == "interleaved",
                lambda: f"vpp={v} needs schedule 'interleaved' (got {par.schedule!r})")
        auto = virtual_split(model.layers, pp, v, par.framework)
        if model.layers % (pp * v) and not par.split and (auto or model.layers >= pp * v):
            w.append(f"layers={model.layers} do not divide pp*vpp = {pp * v} stages: "
                     + (f"they follow Megatron's split counting the embedding and the loss as layers "
                        f"(split={','.join(map(str, auto[:2]))},...,{','.join(map(str, auto[-2:]))})" if auto else
                        f"the first {model.layers % (pp * v)} stages take one layer more")
                     + "; set parallel.split (the layers per pipeline stage) to choose another")
    if par.schedule == "interleaved":
        require(p, v > 1, "schedule 'interleaved' needs vpp >= 2 virtual stages per rank")
        require(p, m % pp == 0,
                lambda: f"interleaved 1F1B needs microbatches m = gbs/(dp*mbs) = {m} divisible by pp={pp}")
    if par.schedule == "dualpipe":
        require(p, m >= 2 * pp, lambda: f"dualpipe needs microbatches m = {m} >= 2*pp = {2 * pp}")
    if par.ep_overlap and par.schedule != "dualpipe":
        # Megatron's overlap_moe_expert_parallel_comm asserts these (transformer_config.py)
        require(p, e > 1, "ep_overlap hides the expert-parallel dispatch: it needs ep > 1")
        require(p, pp == 1 or v > 1, lambda: f"ep_overlap with pp={pp} needs interleaved stages (vpp >= 2): "
                "Megatron's overlap_moe_expert_parallel_comm pairs micro-batches only in its interleaved schedule; "
                "set vpp, or pp=1, or ep_overlap=false")
        reruns = [r for r in {par.recompute, *par.recompute_ranks} if r.startswith(("full", "layer:")) or
                  "moe" in modules(r)]
        require(p, not reruns, lambda: f"ep_overlap cannot rerun the experts' dispatch in backward (recompute "
                f"{', '.join(sorted(reruns))}); Megatron allows no full recompute and no 'moe' module with it")
    if pp > 1 and m < pp and par.schedule in ("1f1b", "zb"):
        w.append(f"only m={m} microbatches for pp={pp} stages: the pipeline never fills "
                 f"(bubble (p-1)/m = {(pp - 1) / m:.2f}); raise gbs or lower mbs")
    if v == 1 and model.layers % pp and not par.split:
        w.append(f"layers={model.layers} is not a multiple of pp={pp}: stages hold unequal layer counts")
    if model.moe is None:
        require(p, e == 1, lambda: f"ep={e} needs a mixture-of-experts model; set ep=1")
        moe_only = [f"etp={par.etp}"] if par.etp != t else []
        moe_only += [f"dispatcher={par.dispatcher}"] if par.dispatcher != "alltoall" else []
        moe_only += [f"dispatch_sms={par.dispatch_sms}"] if par.dispatch_sms else []
        if moe_only:
            w.append(f"{' and '.join(moe_only)} act on a mixture-of-experts layer; this model has none, so "
                     "they change nothing")
    else:
        require(p, model.moe.experts % e == 0, lambda: f"ep={e} must divide model.moe.experts={model.moe.experts}")
        require(p, (d * c * t) % (e * par.etp) == 0,
                lambda: f"ep*etp = {e}*{par.etp} must divide dp*cp*tp = {d * c * t} (experts live inside the "
                "data/context/tensor ranks); lower ep, or set etp=1 so experts are not tensor-sharded")
        require(p, model.moe.expert_ffn % par.etp == 0,
                lambda: f"etp={par.etp} must divide expert_ffn={model.moe.expert_ffn}")
        if par.dispatch_sms and par.dispatcher == "alltoall":
            w.append(f"dispatch_sms={par.dispatch_sms} sets the SMs of DeepEP's or HybridEP's kernels; the "
                     "all-to-all dispatcher uses NCCL's, so it changes nothing (set dispatcher=deepep)")
    require(p, par.seq % (2 * c) == 0 or c == 1,
            lambda: f"seq={par.seq} must be divisible by 2*cp = {2 * c} (load-balanced context parallel splits "
            "each sequence into 2*cp chunks)")
    if par.sp:
        require(p, (par.seq // c) % t == 0,
                lambda: f"sequence parallel needs seq/cp = {par.seq // c} divisible by tp={t}")
    if par.tp_overlap and t > 1:
        require(p, par.sp, "tp_overlap pipelines the all-gathers and reduce-scatters of sequence parallelism "
                "with their GEMMs (Transformer Engine's userbuffers): set sp=true, or tp_overlap=false")
    if par.tp_overlap and t > 1 and not tp_pipelining(par.framework):
        w.append(f"tp_overlap: {par.framework} does not pipeline its TP collectives with their GEMMs "
                 "(Megatron's userbuffers and torchtitan's async TP do): it changes nothing here")
    if t > 1 and not par.sp:
        w.append("tp > 1 without sequence parallelism: norms and dropout run on every TP rank and their "
                 "activations are replicated; set sp=true")
    idle = [m for m in modules(par.recompute) if not _has_module(model, m, par.framework)]
    if idle:
        w.append(f"recompute modules {', '.join(idle)} free nothing in this model (it has no "
                 f"{' and no '.join(sorted({_MODULE_PART[m] for m in idle}))}); drop them from recompute")
    if t > cluster.gpus_per_node:
        w.append(f"tp={t} spans more than one node ({cluster.gpus_per_node} GPUs each): its collectives "
                 "cross the slow inter-node network")
    if not cluster.gpu.intra_node_gbps and cluster.intra_node_gbps == DEFAULT_NETWORK["intra_node_gbps"] or \
            not cluster.gpu.inter_node_gbps and cluster.inter_node_gbps == DEFAULT_NETWORK["inter_node_gbps"]:
        w.append(f"hardware.gpu {cluster.gpu.name!r} gives no link bandwidths: using a DGX H100-class node's, "
                 f"{DEFAULT_NETWORK['intra_node_gbps']:g} GB/s NVLink and {DEFAULT_NETWORK['inter_node_gbps']:g} GB/s "
                 "per GPU across nodes (set intra_node_gbps and inter_node_gbps)")
    if par.precision == "fp8" and cluster.gpu.fp8_tflops <= 0:
        p.append(f"{cluster.gpu.name} has no FP8 tensor cores; use precision 'bf16'")
    if par.framework == "nanotron" and par.grad_dtype:
        p.append("nanotron's gradient layout (bf16 gradients summed in fp32) is fitted to its runs; leave "
                 "grad_dtype empty")
    check_megatron_knobs(p, w, model, cluster, par)
    schedules = runs(par.framework, "schedule") or (par.schedule,)
    if pp > 1 and par.schedule not in schedules:
        w.append(f"{par.framework} has no {par.schedule!r} pipeline schedule (it runs {', '.join(schedules)}): "
                 "this step is costed with a schedule the framework cannot run")
    if pp > 1 and par.zero > MAX_ZERO_WITH_PP.get(par.framework, 3):
        p.append(f"{par.framework} does not combine ZeRO-{par.zero} with pipeline parallelism; use "
                 f"zero<={MAX_ZERO_WITH_PP[par.framework]} or pp=1")
    if p:
        raise ConfigError(p)
    return w


def zero_shards(par: ParallelConfig) -> tuple[int, int]:
    """(dense, expert) ranks one ZeRO / FSDP shard spans: the dense weights over dp*cp, the experts
    over their data-parallel replicas (dp*cp*tp / (ep*etp)); under HSDP (dp_replicate) each replica
    shards over its own share of them."""
    r = max(1, par.dp_replicate)
    return max(1, par.dp * par.cp // r), max(1, par.dp * par.cp * par.tp // (par.ep * par.etp) // r)


def _divisors(n: int, cap: int) -> list[int]:
    return [k for k in range(1, min(n, cap) + 1) if n % k == 0]


def routed_tokens(par: ParallelConfig, T: float) -> float:
    """Tokens of a micro-batch that reach one GPU's experts, before the router picks among them:
    with sequence parallelism a rank's T/tp shard gathered over the expert-TP group, T*etp/tp;
    without it each TP rank holds all T, and an expert-TP group wider than TP gathers those of the
    etp/tp data-parallel ranks it spans, T*max(1, etp/tp) (Megatron's dispatchers gather over the
    expert-TP group before the experts' GEMMs)."""
    return T * par.etp / par.tp if par.sp else T * max(1.0, par.etp / par.tp)
