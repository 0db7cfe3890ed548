"""A layout as the frameworks spell it: our benchmark harness's command, Megatron-LM arguments,
a torchtitan TOML fragment and a DeepSpeed config. Each export returns (text, notes): the notes
say what the framework cannot express exactly, so nothing is silently dropped.

Names follow each framework's documentation: Megatron-LM `megatron/training/arguments.py` (with
`--pipeline-model-parallel-layout` for uneven splits, "E" the embedding, "t" a layer, "L" the
loss); torchtitan's `[parallelism]`, `[activation_checkpoint]` and `[training]` sections;
DeepSpeed's JSON config (`train_batch_size`, `zero_optimization.stage`, ...).
"""
from __future__ import annotations

import json
from dataclasses import replace

from ..specs.hardware import ClusterSpec
from .explain import runs_text as split_text
from ..memory.estimate import ddp_buckets, pipeline_stages
from ..specs.models import ModelSpec
from ..specs.errors import ConfigError
from ..specs.fp8 import fp8_recipe, fp8_weights
from ..specs.frameworks import grad_dtype, master_dtype
from ..memory.activations import liger
from ..specs.kernels import loss_kernel
from ..specs.parallel import ParallelConfig
from ..specs.stages import megatron_split
from ..specs.recompute import (STANDARD as RECOMPUTE_LEVELS, modules, offload_modules, policy,
                               sac_recomputes_attention)

FORMATS = ("harness", "megatron", "torchtitan", "deepspeed")
TORCHTITAN_SCHEDULES = {"gpipe": "GPipe", "1f1b": "1F1B", "interleaved": "Interleaved1F1B",
                        "zb": "InterleavedZeroBubble", "dualpipe": "DualPipeV"}


def export(fmt: str, model: ModelSpec, cluster: ClusterSpec, par: ParallelConfig,
           model_ref: str = "") -> tuple[str, list[str]]:
    """`model_ref`: how the harness names the model (a preset id or a config.json path)."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown export format {fmt!r}; choose one of {FORMATS}")
    text, notes = {"harness": _harness, "megatron": _megatron, "torchtitan": _torchtitan,
                   "deepspeed": _deepspeed}[fmt](model, cluster, par, model_ref)
    if par.schedule == "dualpipe" and par.pp == 1 and model.moe is not None and fmt != "harness":
        notes.append("schedule dualpipe without a pipeline is planned as pairing two micro-batches, each one's "
                     "all-to-alls under the other's compute: " +
                     ("add --overlap-moe-expert-parallel-comm (its first forward and last backward run alone; "
                      "it refuses full recompute and the 'moe' module)"
                      if fmt == "megatron" else f"{fmt} runs no such pairing, so its step takes longer"))
    notes += _kernel_notes(fmt, par)
    if len(set(par.recompute_ranks)) > 1 and fmt != "harness":
        notes.append(f"recompute per pipeline rank ({', '.join(par.recompute_ranks)}) is not a setting here: "
                     f"exported with the most, {par.recompute!r}, on every rank, which recomputes more than "
                     f"planned (a slower step, same fit)")
    return text, notes


def _kernel_notes(fmt: str, par: ParallelConfig) -> list[str]:
    """What the config cannot say of a loss or element-wise kernels the plan names (the deepspeed
    export says how to run Liger's itself)."""
    if fmt == "deepspeed":
        return []
    notes = []
    if par.loss == "chunked":
        notes.append(f"loss chunked is Liger-Kernel's fused linear cross-entropy, which {fmt} does not run from its "
                     "config: the plan counts its memory, so use it in the model's loss or plan with the "
                     "framework's loss")
    elif par.loss:
        notes.append(f"loss {par.loss}: the plan costs that cross-entropy; the config does not set it")
    if par.elementwise:
        notes.append(f"elementwise {par.elementwise}: the plan costs those norm, RoPE and activation kernels; "
                     f"the {fmt} config does not choose them")
    return notes


def _harness(model, cluster, par, model_ref):
    ref = model_ref or model.name
    args = [f"torchrun --nnodes {cluster.nodes} --nproc-per-node {cluster.gpus_per_node}"
            + (" --rdzv-backend c10d --rdzv-endpoint $HEAD_NODE:29500" if cluster.nodes > 1 else ""),
            "-m benchmarks train", f"--model {ref}"]
    for key in ("tp", "cp", "ep", "pp", "vpp", "zero", "mbs", "gbs", "seq"):
        args.append(f"--{key} {getattr(par, key)}")
    recompute, notes = _harness_recompute(par.recompute)
    args += [f"--recompute {recompute}", f"--schedule {par.schedule}", f"--precision {par.precision}"]
    if par.split:
        args.append("--split " + ",".join(map(str, par.split)))
    if len(set(par.recompute_ranks)) > 1:
        args.append("--recompute-ranks " + ",".join(_harness_recompute(r)[0] for r in par.recompute_ranks))
    if par.tp_overlap:
        notes.append("the harness does not pipeline TP's collectives with their GEMMs: expect the step without "
                     "tp_overlap")
    if par.optimizer_offload or par.param_offload:
        notes.append("the harness keeps the optimizer and the weights on the GPU: expect its memory and step "
                     "without offloading")
    if par.optimizer == "muon":
        notes.append("the harness steps AdamW: expect its memory and step with Adam's two moments, not Muon")
    return " \\\n    ".join(args), notes + _alltoall_only(par, "the harness")


def _harness_recompute(recompute: str) -> tuple[str, list[str]]:
    """The harness's --recompute (none, selective: the attention core, or full) for a policy, and a
    note where it is not the same policy."""
    if recompute in RECOMPUTE_LEVELS:
        return recompute, []
    if recompute == "core_attn":
        return "selective", []
    nearest = "full" if recompute.startswith("layer:") else "selective"
    return nearest, [f"the harness recomputes none, the attention core (selective) or whole layers (full): "
                     f"recompute {recompute!r} exported as {nearest!r}"]


def _alltoall_only(par, who: str) -> list[str]:
    name = {"deepep": "DeepEP", "hybridep": "HybridEP"}.get(par.dispatcher, par.dispatcher)
    if par.ep == 1 or par.dispatcher == "alltoall":
        return []
    if who == "torchtitan":
        # torchtitan's models take the dispatcher in their config (moe_comm_backend: standard, deepep,
        # hybridep; torchtitan/models/common/config_utils.py), not in [parallelism]
        return [f'{name}: set the model\'s moe_comm_backend = "{par.dispatcher}" in its torchtitan config (not a '
                "[parallelism] key); torchtitan's deepep backend is DeepEP's second version, which the "
                "calculators cost as hybridep"]
    return [f"{who} dispatches MoE tokens with an all-to-all, not {name}: expect the step with dispatcher "
            "alltoall (more inter-node traffic)"]


def _megatron(model, cluster, par, _ref):
    notes = []
    a = [f"--tensor-model-parallel-size {par.tp}", f"--pipeline-model-parallel-size {par.pp}",
         f"--context-parallel-size {par.cp}", f"--micro-batch-size {par.mbs}",
         f"--global-batch-size {par.gbs}", f"--seq-length {par.seq}", "--bf16"]
    if par.sp:
        a.append("--sequence-parallel")
    if par.tp_overlap:
        a.append("--tp-comm-overlap")
    if par.ep > 1:
        a += [f"--expert-model-parallel-size {par.ep}", f"--expert-tensor-parallel-size {par.etp}"]
        a += ["--moe-token-dispatcher-type flex", f"--moe-flex-dispatcher-backend {par.dispatcher}"] \
            if par.dispatcher != "alltoall" else ["--moe-token-dispatcher-type alltoall"]
        a += [f"--moe-flex-dispatcher-num-sms {par.dispatch_sms}"] if par.ep > 1 and par.dispatch_sms and \
            par.dispatcher != "alltoall" else []
        a += ["--overlap-moe-expert-parallel-comm"] if par.ep_overlap else []
    if model.moe and par.experts == "fused":
        notes.append("experts=fused is Megatron's grouped MLP through Transformer Engine's op fuser "
                     "(TransformerConfig.use_transformer_engine_op_fuser; Megatron-Bridge's "
                     "cutedsl_fused_grouped_mlp): set it in the model config, there is no flag here; "
                     "without it expect the step with experts=loop")
    stages = par.pp * (par.vpp if par.schedule == "interleaved" else 1)
    # Megatron refuses layers that its stages do not divide unless a split says where they go: the one
    # the calculators cost (pipeline_stages: the first stages take one more); for DualPipe's V, which
    # Megatron runs as 1F1B (noted below), 1F1B's
    ran = replace(par, schedule="1f1b") if par.schedule == "dualpipe" else par
    split = par.split or tuple(len(s) for s in pipeline_stages(model, ran)) if model.layers % stages else par.split
    if len(split) != stages:
        split = ()
    if split and _is_megatron_split(model, split):
        a += ["--account-for-embedding-in-pipeline-split", "--account-for-loss-in-pipeline-split"]
        if par.schedule == "interleaved":
            a.append(f"--num-layers-per-virtual-pipeline-stage {split[1]}")
    elif split:
        layout = "|".join(("E" if st == 0 else "") + f"t*{n}" + (",L" if st == stages - 1 else "")
                          for st, n in enumerate(split))
        a.append(f'--pipeline-model-parallel-layout "{layout}"')
    elif par.schedule == "interleaved":
        a.append(f"--num-layers-per-virtual-pipeline-stage {model.layers // stages}")
    if par.zero == 1:
        a.append("--use-distributed-optimizer")
    elif par.zero >= 2:
        # Megatron-LM's parallelism guide: Megatron-FSDP saves fsdp_dtensor checkpoints (the default
        # torch_dist does not hold its shards) and builds the model on the meta device, then in shards
        a += ["--use-megatron-fsdp", "--data-parallel-sharding-strategy "
              + ("optim_grads" if par.zero == 2 else "optim_grads_params"), "--ckpt-format fsdp_dtensor",
              "--init-model-with-meta-device"]
    if par.recompute == "selective":
        a.append("--recompute-granularity selective")
    elif modules(par.recompute):
        a += ["--recompute-granularity selective", "--recompute-modules " + " ".join(modules(par.recompute))]
    elif par.recompute == "full":
        a += ["--recompute-granularity full", "--recompute-method uniform", "--recompute-num-layers 1"]
    if par.precision == "fp8":
        a += ["--fp8-format " + ("e4m3" if fp8_recipe(par) == "mxfp8" else "hybrid"),
              f"--fp8-recipe {fp8_recipe(par)}"]
        if fp8_weights(par) == "fp8":
            a.append("--fp8-param-gather")     # FP8 parameters; without it TE caches an FP8 copy of each
            if fp8_recipe(par) == "mxfp8" and par.zero == 1:    # MXFP8's bf16 gather in the gradient buffer
                a.append("--reuse-grad-buf-for-mxfp8-param-ag")
    if grad_dtype(par) == "bf16":
        a.append("--grad-reduce-in-bf16")       # else its default with --bf16: fp32 main grads
    if par.offload_layers:
        a.append(f"--cpu-offloading-num-layers {par.offload_layers}")
    offloaded = offload_modules(par.offload_modules)
    if offloaded:
        a += ["--fine-grained-activation-offloading", "--offload-modules " + " ".join(offloaded)]
    master = master_dtype(par)
    if par.moment_dtype == "bf16" or master in ("remainder", "16bit") or par.optimizer_offload:
        a.append("--use-precision-aware-optimizer")     # Transformer Engine's FusedAdam (remainders by default)
    if par.optimizer_offload:                           # its CPU offload asks for the precision-aware optimizer
        a += ["--optimizer-cpu-offload", f"--optimizer-offload-fraction {par.optimizer_offload:g}"]
    if par.moment_dtype == "bf16":
        a += ["--exp-avg-dtype bf16", "--exp-avg-sq-dtype bf16"]
    if par.optimizer == "muon":        # with --use-distributed-optimizer: its layer-wise distributed optimizer
        a.append("--optimizer muon")
    if master == "16bit":
        a.append("--main-params-dtype fp16")
    if master == "remainder" and par.precision == "fp8" and fp8_recipe(par) != "delayed":
        notes.append(f"master_dtype=remainder holds under FP8 delayed scaling only; with fp8_recipe {fp8_recipe(par)} "
                     "Megatron keeps fp32 masters (plan with master_dtype fp32)")
    if master == "none":
        notes.append("master_dtype=none is Apex's DistributedFusedAdam with dtype bf16 (NeMo 1.x); Megatron's "
                     "nearest is --main-params-dtype fp16 with --use-precision-aware-optimizer (master_dtype 16bit)")
    if master == "fp32" and par.moment_dtype == "bf16" and par.zero == 1:
        notes.append("master_dtype=fp32: Megatron's precision-aware optimizer keeps only remainders in bf16 and "
                     "FP8 delayed-scaling training (OptimizerConfig.store_param_remainders, no command-line flag); "
                     "set it False there")
    if par.schedule in ("zb", "dualpipe") and par.pp > 1:
        notes.append(f"Megatron-LM has no '{par.schedule}' schedule; it will run 1F1B (or use a fork that "
                     "adds zero-bubble / DualPipe scheduling)")
    if par.schedule == "gpipe":
        notes.append("Megatron-LM runs 1F1B, not GPipe; 1F1B has the same bubble with less memory")
    return " \\\n    ".join(a), notes


def _is_megatron_split(model, split) -> bool:
    try:
        return len(split) > 2 and tuple(split) == megatron_split(model.layers, len(split))
    except ConfigError:
        return False


def _torchtitan_stages(model, par, notes) -> list:
    """torchtitan's stage sizing: ceil((layers + first_stage_less_layers + last_stage_less_layers)
    / layers_per_stage) stages (torchtitan/distributed/pipeline_parallel.py), the two "less
    layers" 1 by default, i.e. Megatron's embedding-and-loss split; 0 for an even split."""
    sizes = [len(s) for s in pipeline_stages(model, par)]
    if _is_megatron_split(model, sizes):
        return [f"pipeline_parallel_layers_per_stage = {(model.layers + 2) // len(sizes)}"]
    if len(set(sizes)) == 1:
        return [f"pipeline_parallel_layers_per_stage = {sizes[0]}", "pipeline_parallel_first_stage_less_layers = 0",
                "pipeline_parallel_last_stage_less_layers = 0"]
    notes.append(f"torchtitan sizes stages evenly; for the uneven split {split_text(sizes)} pass each stage's "
                 "module FQNs in module_fqns_per_model_part")
    return []


def _torchtitan_recompute(par, notes) -> list:
    """torchtitan's [activation_checkpoint] (its TOML releases, v0.2): mode "none", "full" or
    "selective" with selective_ac_option "op" (op-level SAC) or "N" (every N-th block in full)."""
    kind, every = policy(par.framework, par.recompute)
    if kind == "none":
        return ['mode = "none"']
    if kind == "full" and every == 1:
        return ['mode = "full"']
    if kind == "full":
        return ['mode = "selective"', f'selective_ac_option = "{every}"']
    if kind in ("core_attn", "modules"):
        what = "attention-core-only" if kind == "core_attn" else f"per-module ({par.recompute})"
        notes.append(f"torchtitan has no {what} recompute: exported as its op-level selective "
                     "checkpointing, which also recomputes half the matmuls and the element-wise ops")
    if sac_recomputes_attention(par.recompute):
        notes.append("op_sac+core_attn is torchtitan's op-level checkpointing as it ran on Blackwell before "
                     "2025-12-01 (cuDNN attention missing from its save list); today's keeps the attention output")
    return ['mode = "selective"', 'selective_ac_option = "op"']


def _torchtitan_fp8(model, par) -> list:
    """torchtitan's quantization converters and sections (v0.2 TOML): torchao's recipe
    (fp8.fp8_recipe) on the linears, the output layer and the router left in bf16, and the experts'
    grouped GEMMs in float8 rowwise or MXFP8, as the calculators cost them; tensorwise with the
    float8 FSDP all-gather they cost (fp8.param_gather_bytes)."""
    recipe = fp8_recipe(par)
    kind = "mx" if recipe == "mxfp8" else "float8"
    moe = bool(model.moe_layers)
    converters = [f"quantize.linear.{kind}"] + ([f"quantize.grouped_mm.{kind}"] if moe else [])
    skip = '"output", "router.gate"' if moe else '"output"'
    out = ["", "[model]", "converters = [" + ", ".join(f'"{c}"' for c in converters) + "]",
           "", f"[quantize.linear.{kind}]", f"filter_fqns = [{skip}]"]
    if recipe == "tensorwise":
        out += ["enable_fsdp_float8_all_gather = true", "precompute_float8_dynamic_scale_for_fsdp = true"]
    else:
        out += [f'recipe_name = "{"mxfp8_cublas" if recipe == "mxfp8" else recipe}"']
    if moe:
        out += ["", f"[quantize.grouped_mm.{kind}]", 'fqns = ["experts"]']
    return out


def _torchtitan(model, cluster, par, _ref):
    notes = []
    replicate = par.dp if par.zero == 0 else par.dp_replicate          # HSDP: dp_replicate replicas
    shard = par.dp // replicate
    if par.zero in (1, 2):
        notes.append(f"torchtitan shards with FSDP2 (ZeRO-3); ZeRO-{par.zero} maps to fully_shard with "
                     "reshard_after_forward=False, which keeps the gathered weights through backward")
    if ddp_buckets(par):
        notes.append("the memory here is PyTorch's DDP (gradient buckets beside each parameter's .grad); torchtitan "
                     "replicates with FSDP since 2026-03 and shards for ZeRO-1, holding less gradient memory")
    pipe = [f"pipeline_parallel_degree = {par.pp}"]
    if par.pp > 1:
        pipe += [f'pipeline_parallel_schedule = "{TORCHTITAN_SCHEDULES[par.schedule]}"',
                 f"pipeline_parallel_microbatch_size = {par.mbs}"]
        if par.split or par.vpp > 1:
            pipe += _torchtitan_stages(model, par, notes)
    lines = ["[parallelism]", f"data_parallel_replicate_degree = {replicate}",
             f"data_parallel_shard_degree = {shard}", f"tensor_parallel_degree = {par.tp}",
             f"context_parallel_degree = {par.cp}", *pipe]
    if par.tp_overlap:
        lines.append("enable_async_tensor_parallel = true")
        notes.append("async TP (TP comm pipelined with its GEMMs) needs torch.compile: [compile] enable = true, "
                     'components = ["model"]')
    if par.ep > 1:
        lines += [f"expert_parallel_degree = {par.ep}", f"expert_tensor_parallel_degree = {par.etp}"]
        notes += _alltoall_only(par, "torchtitan")
    # torchtitan accumulates global_batch_size / (local_batch_size x dp) forwards a step; a pipeline
    # splits its local batch into micro-batches of pipeline_parallel_microbatch_size (train.py)
    local = par.gbs // par.dp if par.pp > 1 else par.mbs
    lines += ["", "[activation_checkpoint]", *_torchtitan_recompute(par, notes), "", "[training]",
              f"local_batch_size = {local}", f"global_batch_size = {par.gbs}", f"seq_len = {par.seq}"]
    if par.compile:
        # torchtitan compiles the blocks and, by default, the loss (compile.components)
        components = '"model", "loss"' if loss_kernel(par) == "compiled" else '"model"'
        lines += ["", "[compile]", "enable = true", f"components = [{components}]"]
    if par.precision == "fp8":
        lines += _torchtitan_fp8(model, par)
    if par.grad_dtype == "bf16":
        notes.append("grad_dtype=bf16: torchtitan's [training] mixed_precision_reduce offers float32 only; "
                     "reduce in bf16 with fully_shard(mp_policy=MixedPrecisionPolicy(reduce_dtype=torch.bfloat16)) "
                     "in your own code, or expect the step with fp32 reductions")
    if par.tp > 1 and not par.sp:
        notes.append("torchtitan always uses sequence parallelism with TP")
    if par.optimizer_offload:                  # FSDP2's CPUOffloadPolicy: weights, gradients, optimizer
        lines.insert(lines.index("[training]") + 1, "enable_cpu_offload = true")
    if par.optimizer == "muon":
        notes.append("optimizer=muon: torchtitan's DistMuon (2026-08) is set by optimizer parameter groups "
                     "(ParamGroupConfig with optimizer_name \"DistMuon\", AdamW for the embedding, norms and output) "
                     "as its kimi_k2_7 configs do, not by a [optimizer] name")
    return "\n".join(lines), notes


def _deepspeed(model, cluster, par, _ref):
    notes = []
    cfg = {"train_batch_size": par.gbs, "train_micro_batch_size_per_gpu": par.mbs,
           "gradient_accumulation_steps": par.microbatches, "bf16": {"enabled": True},
           "zero_optimization": {"stage": min(par.zero, 3), "overlap_comm": True, "contiguous_gradients": True}}
    if par.tp > 1:
        cfg["tensor_parallel"] = {"autotp_size": par.tp}
    if par.optimizer_offload:                  # ZeRO-Offload; a share below 1 is Twin-Flow's ratio (ZeRO 3)
        cfg["zero_optimization"]["offload_optimizer"] = {"device": "cpu", "pin_memory": True, **(
            {"ratio": par.optimizer_offload} if par.optimizer_offload < 1 else {})}
    if par.param_offload:
        cfg["zero_optimization"]["offload_param"] = {"device": "cpu", "pin_memory": True}
    if par.optimizer == "muon":                # Muon on the >= 2-D weights but embed and lm_head, AdamW on the rest
        cfg["optimizer"] = {"type": "Muon"}
        if par.zero == 3:                      # its ZeRO-3 Muon all-reduces whole gradients
            cfg["zero_optimization"]["reduce_scatter"] = False
    if par.grad_dtype == "fp32":
        cfg["data_types"] = {"grad_accum_dtype": "fp32"}
        cfg["communication_data_type"] = "fp32"
    if par.recompute != "none":
        cfg["activation_checkpointing"] = {"partition_activations": par.tp > 1, "contiguous_memory_optimization": True,
                                           **({"cpu_checkpointing": True} if par.offload_layers else {})}
        if par.recompute == "selective":
            notes.append("DeepSpeed checkpoints whole layers; selective recompute needs the model to "
                         "checkpoint only its attention core (Megatron-DeepSpeed: --recompute-granularity selective)")
    if par.tp_overlap:
        notes.append("DeepSpeed does not pipeline TP's collectives with its GEMMs: expect the step without tp_overlap")
    if par.pp > 1:
        notes.append(f"pipeline parallelism: build the model as deepspeed.pipe.PipelineModule(num_stages={par.pp}"
                     + (f", partition_method='parameters') and set per-stage layers {split_text(par.split)}"
                        if par.split else ")") + "; DeepSpeed's pipeline engine runs 1F1B")
        if par.zero >= 2:
            notes.append("DeepSpeed does not combine ZeRO-2/3 with its pipeline engine")
    if par.tiled_mlp:
        notes.append("tiled_mlp: DeepSpeed's TiledMLP (deepspeed.runtime.sequence_parallel.ulysses_sp) is no config "
                     "key; patch it into the model's MLP forward before the model is built, as ArcticTraining's "
                     "tiled_mlp_compute: true does, with ceil(seqlen / hidden) shards")
    if par.cp > 1:
        notes.append(f"context parallel {par.cp}: DeepSpeed offers Ulysses sequence parallelism "
                     "(sequence_parallel_size), a different algorithm from ring attention")
    if par.ep > 1:
        notes.append(f"expert parallel {par.ep}: set ep_size={par.ep} on deepspeed.moe.layer.MoE")
        notes += _alltoall_only(par, "DeepSpeed's MoE layer")
    if par.precision == "fp8":
        notes.append("FP8 in DeepSpeed goes through Transformer Engine layers in the model")
    if liger(par):
        notes.append("Liger-Kernel is no config key: build the model with liger_kernel.transformers."
                     "AutoLigerKernelForCausalLM (its modules: elementwise fused" +
                     (", and its fused linear cross-entropy: loss chunked" if loss_kernel(par) == "chunked" else
                      "; fused_linear_cross_entropy=False, the plan's loss is the framework's") + ")" +
                     (", swiglu=False beside the tiled MLP" if par.tiled_mlp else ""))
    elif loss_kernel(par) == "chunked":
        notes.append("loss chunked is Liger-Kernel's fused linear cross-entropy alone: patch only it "
                     "(apply_liger_kernel_to_<model>(rope=False, rms_norm=False, swiglu=False, "
                     "fused_linear_cross_entropy=True)); AutoLigerKernelForCausalLM would also swap the norms, RoPE "
                     "and SwiGLU, whose activations the plan counts eagerly")
    return json.dumps(cfg, indent=2), notes
