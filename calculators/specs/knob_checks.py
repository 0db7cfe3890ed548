"""What check_layout asks of the knobs that are one framework's, mostly Megatron's: its activation
offloading (offload_layers, offload_modules), its precision-aware optimizer (moment_dtype,
master_dtype) and Transformer Engine's FP8 (fp8_recipe, fp8_weights), as Megatron accepts them, and
torchao's FP8 recipes under fsdp2."""
from __future__ import annotations

from typing import TYPE_CHECKING

from .errors import require
from .fp8 import TE_RECIPES, TORCHAO_RECIPES, fp8_recipe
from .frameworks import host_bytes_per_param
from .hardware import BLACKWELL
from .optimizers import check_muon
from .recompute import modules, offload_modules, policy as recompute_policy

# A DGX H100's or DGX B200's system memory, 2 TB (NVIDIA's datasheets): the host memory a node is taken
# to have where an offloaded optimizer may not fit in it (a warning, not a rule)
HOST_MEMORY = 2e12

if TYPE_CHECKING:
    from .hardware import ClusterSpec
    from .models import ModelSpec
    from .parallel import ParallelConfig


def check_megatron_knobs(p: list, w: list, model: ModelSpec, cluster: ClusterSpec, par: ParallelConfig) -> None:
    """Adds to problems `p` and warnings `w`."""
    if par.offload_layers and par.framework == "deepspeed":
        # DeepSpeed's activation_checkpointing.cpu_checkpointing: every checkpoint, under full recompute
        require(p, par.recompute == "full" and par.offload_layers == model.layers,
                lambda: f"offload_layers under deepspeed is its cpu_checkpointing, which keeps every layer's "
                f"checkpoint in host memory: use recompute full and offload_layers {model.layers}, or 0")
        require(p, par.pp == 1, "deepspeed's cpu_checkpointing is modelled without a pipeline: set pp=1 or "
                "offload_layers=0")
    elif par.offload_layers:
        # Megatron's TransformerConfig refuses the rest (transformer_config.py)
        require(p, par.framework == "megatron", lambda: f"offload_layers is Megatron's activation offloading "
                f"(--cpu-offloading-num-layers, Transformer Engine's CPU offload) or deepspeed's cpu_checkpointing; "
                f"{par.framework} has none: set 0")
        require(p, par.pp == 1, "Megatron has no activation offloading with pipeline parallelism: set pp=1 or "
                "offload_layers=0")
        require(p, par.recompute == "none", "Megatron's activation offloading does not run with recompute: set "
                "recompute none or offload_layers=0")
        require(p, par.offload_layers < model.layers,
                lambda: f"offload_layers={par.offload_layers} must be below the model's {model.layers} layers")
    if par.moment_dtype == "bf16" and par.framework != "megatron":
        p.append(f"{par.framework} keeps Adam's moments in fp32; moment_dtype bf16 is Megatron's precision-aware "
                 "optimizer (--exp-avg-dtype bf16): use framework megatron, or moment_dtype fp32")
    if par.framework == "megatron" and par.zero == 0 and (par.moment_dtype == "bf16"
                                                          or par.master_dtype not in ("", "fp32")):
        asked = " and ".join(([f"moment_dtype {par.moment_dtype}"] if par.moment_dtype == "bf16" else [])
                             + ([f"master_dtype {par.master_dtype}"] if par.master_dtype not in ("", "fp32") else []))
        p.append(f"{asked} {'need' if ' and ' in asked else 'needs'} Megatron's precision-aware optimizer, "
                 "which runs only with its distributed "
                 "optimizer: use zero 1, or moment_dtype fp32 and master_dtype fp32")
    if par.master_dtype not in ("", "fp32") and par.framework != "megatron":
        p.append(f"{par.framework} keeps an fp32 master (fsdp2: its fp32 weights); master_dtype "
                 f"{par.master_dtype} is Megatron's or NeMo's distributed optimizer: use framework megatron, or "
                 "master_dtype fp32")
    if par.elementwise == "eager-fused-norm" and par.framework == "deepspeed":
        p.append("elementwise eager-fused-norm is torchtitan's eager block on PyTorch 2.8 and later (nn.RMSNorm's "
                 "fused kernels); deepspeed runs Hugging Face's modules, whose RMSNorm is Python op by op in every "
                 "version: use elementwise eager, or fused for Liger's or Transformer Engine's kernels")
    _check_fp8(p, par, cluster)
    _check_offload(p, w, model, par)
    _check_host_offload(p, par)
    p.extend(check_muon(par))
    if par.tiled_mlp:
        require(p, par.framework == "deepspeed", lambda: f"tiled_mlp is DeepSpeed's TiledMLP (ALST; ArcticTraining's "
                f"tiled_mlp_compute), patched into a Hugging Face model's MLP; {par.framework} has none: use framework "
                "deepspeed, or tiled_mlp false")
        require(p, model.moe is None and model.mlp == "swiglu", "tiled_mlp tiles a dense gated MLP, down(act(gate x) * "
                "up x); this model's MLP is " + ("a mixture of experts" if model.moe else "not gated") +
                ": set tiled_mlp false")
    if par.loss == "chunked" and par.tp > 1:
        p.append("loss chunked (Liger-Kernel's fused linear cross-entropy) takes the whole vocabulary on each rank; "
                 "a tensor-parallel output layer holds a slice of it: use tp 1, or another loss")
    if par.optimizer_offload or par.param_offload:
        node = host_bytes_per_param(par) * model.total_params / cluster.nodes
        if node > HOST_MEMORY:
            w.append(f"the offloaded optimizer{' and weights' if par.param_offload else ''} take about "
                     f"{node / 1e12:.1f} TB of host memory a node, more than a DGX node's 2 TB: check the "
                     "nodes' memory, or offload less")
    if par.schedule == "dualpipe" and par.pp == 1 and model.moe is not None:
        w.append("schedule dualpipe with pp=1 is costed as DualPipe's pairing of two micro-batches, whose "
                 "all-to-alls hide under each other's compute; "
                 + ("Megatron runs that as ep_overlap (--overlap-moe-expert-parallel-comm) with 1f1b, without "
                    "full recompute or the 'moe' module"
                    if par.framework == "megatron" else
                    f"{par.framework} runs no such pairing without a pipeline: use schedule 1f1b"))
    if par.master_dtype == "remainder" and par.precision == "fp8" and fp8_recipe(par) != "delayed":
        w.append(f"master_dtype remainder: Megatron keeps 16-bit remainders under FP8 delayed scaling only; with "
                 f"fp8_recipe {par.fp8_recipe} it keeps fp32 masters: use master_dtype fp32 or fp8_recipe delayed")


def _check_offload(p: list, w: list, model: ModelSpec, par: ParallelConfig) -> None:
    """offload_modules as Megatron's TransformerConfig accepts it."""
    mods = offload_modules(par.offload_modules) if par.offload_modules else ()
    if not mods:
        return
    if par.framework != "megatron":
        p.append(f"offload_modules is Megatron's fine-grained activation offloading; {par.framework} has none: "
                 "leave it empty")
        return
    if par.offload_layers:
        p.append("Megatron runs fine-grained activation offloading (offload_modules) or layer offloading "
                 "(offload_layers), not both: set offload_layers 0 or offload_modules empty")
    if "attn_proj" in mods and "core_attn" not in mods:
        p.append("offload_modules: attn_proj's input is core_attn's output, which core_attn's backward keeps: "
                 "offload core_attn with it (core_attn+attn_proj)")
    inside = [m for m in ("expert_fc1", "moe_act") if m in mods]
    if inside and "moe" in modules(par.recompute):
        p.append(f"offload_modules {'+'.join(inside)} run inside the MoE block that recompute 'moe' reruns whole: "
                 "drop them, or moe from recompute")
    kind, every = recompute_policy(par.framework, par.recompute)
    if kind == "op_sac" or (kind == "full" and every == 1):
        w.append(f"offload_modules frees nothing under recompute {par.recompute}: the layer keeps only its input")
    elif "core_attn" in mods and (kind == "core_attn" or "core_attn" in modules(par.recompute)):
        w.append("offload_modules core_attn moves nothing where the attention core is recomputed (recompute "
                 f"{par.recompute}): its checkpoint runs outside the offloading; attn_proj still moves its output")
    idle = [m for m in mods if (m in ("expert_fc1", "moe_act", "mlp_norm") and model.moe is None)
            or (m == "attn_norm" and model.mla is None)]
    if idle:
        w.append(f"offload modules {', '.join(idle)} offload nothing in this model (Megatron fuses its norms into "
                 "the linears after them, and it has no experts for expert_fc1 and moe_act); drop them")


def _check_host_offload(p: list, par: ParallelConfig) -> None:
    """optimizer_offload and param_offload as each framework runs them (memory/host.py)."""
    f, fw = par.optimizer_offload, par.framework
    if not f and not par.param_offload:
        return
    if fw == "nanotron":
        p.append("nanotron has no optimizer or weight offloading: set optimizer_offload 0 and param_offload false")
    elif fw == "fsdp2":
        require(p, f == 1 and par.param_offload, "FSDP2's CPUOffloadPolicy moves the weights, the gradients and "
                "the optimizer to the host together: set optimizer_offload 1 and param_offload true, or neither")
        require(p, par.zero >= 2, lambda: f"FSDP2's CPUOffloadPolicy offloads fully_shard's shards: use zero 2 or "
                f"3 (got zero {par.zero})")
    elif fw == "megatron":
        require(p, not par.param_offload, "Megatron offloads the optimizer only (--optimizer-cpu-offload): set "
                "param_offload false")
        require(p, par.zero == 1, "Megatron's --optimizer-cpu-offload runs with its precision-aware optimizer, "
                "over the distributed optimizer: use zero 1, or optimizer_offload 0")
        require(p, par.moment_dtype != "bf16" and par.master_dtype in ("", "fp32"), "Megatron's CPU offload "
                "(HybridDeviceOptimizer) keeps fp32 masters and Adam moments, on the host and on the GPU alike: "
                "use moment_dtype fp32 and master_dtype fp32 with optimizer_offload")
    else:
        require(p, par.zero >= 1 or not f, "DeepSpeed offloads the optimizer of ZeRO 1 to 3 (offload_optimizer): "
                "use zero 1 or more, or optimizer_offload 0")
        require(p, f in (0, 1) or par.zero == 3, lambda: f"optimizer_offload {f:g} (a share: Twin-Flow's ratio) runs "
                "under ZeRO 3 only in DeepSpeed: use zero 3, or optimizer_offload 1")
        require(p, not par.param_offload or par.zero == 3, "DeepSpeed offloads weights under ZeRO 3 only "
                "(offload_param): use zero 3, or param_offload false")


def _check_fp8(p: list, par: ParallelConfig, cluster: ClusterSpec) -> None:
    """fp8_recipe and fp8_weights: Transformer Engine's FP8 under Megatron, as Megatron accepts them,
    or torchao's recipes under fsdp2 (fp8_recipe only); they describe FP8 training and mean nothing
    under precision bf16."""
    if par.precision != "fp8" or not (par.fp8_recipe or par.fp8_weights):
        return
    asked = [f"{k} {getattr(par, k)}" for k in ("fp8_recipe", "fp8_weights") if getattr(par, k)]
    if par.framework == "fsdp2":
        require(p, not par.fp8_recipe or par.fp8_recipe in TORCHAO_RECIPES, lambda: f"fp8_recipe {par.fp8_recipe} "
                f"is Transformer Engine's under Megatron; fsdp2 runs torchao's float8 recipes: "
                f"{', '.join(TORCHAO_RECIPES)}")
        require(p, not par.fp8_weights, lambda: f"fp8_weights {par.fp8_weights} is Megatron's; fsdp2 keeps bf16 "
                "weights and casts them as its torchao recipe does (fp8_recipe): leave fp8_weights empty")
    elif par.framework != "megatron":
        p.append(f"{' and '.join(asked)}: fp8_recipe names Megatron's (Transformer Engine's) or fsdp2's "
                 f"(torchao's) FP8 recipes and fp8_weights Megatron's FP8 weights; {par.framework} runs neither: "
                 f"use framework megatron or fsdp2, or leave {'them' if len(asked) > 1 else 'it'} empty")
        return
    elif par.fp8_recipe and par.fp8_recipe not in TE_RECIPES:
        p.append(f"fp8_recipe {par.fp8_recipe} is torchao's (framework fsdp2); Megatron's Transformer Engine "
                 f"runs {', '.join(TE_RECIPES)}")
    if par.fp8_recipe == "mxfp8" and cluster.gpu.name not in BLACKWELL:
        p.append(f"fp8_recipe mxfp8 needs Blackwell's MXFP8 tensor cores ({', '.join(BLACKWELL)}); "
                 f"{cluster.gpu.name} runs " + ("delayed, tensorwise or blockwise" if par.framework == "megatron"
                                                else "tensorwise, rowwise or rowwise_with_gw_hp"))
    if par.fp8_weights == "fp8" and par.zero == 0:
        p.append("fp8_weights fp8 (--fp8-param-gather) needs Megatron's distributed optimizer or Megatron-FSDP: "
                 "use zero 1 or more, or fp8_weights bf16")
    if par.fp8_weights == "bf16" and par.zero >= 2:
        p.append("fp8_weights bf16 is modelled over Megatron's distributed optimizer (zero 0 or 1), where "
                 "Transformer Engine caches each layer's FP8 weight; with Megatron-FSDP use fp8_weights fp8")
