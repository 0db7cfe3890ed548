"""What a published run's recipe ran, beyond its row's columns: read from its other settings and
from the scripts and configs of its source (kernels, dispatcher, the optimizer's state), each with
the file it comes from. validation.stacks builds each run's layout with these."""
from __future__ import annotations

import re


def alst_features(settings: str) -> bool:
    """Whether a row is one of ALST's runs with all its features: they say "ALST", its baselines
    "baseline"."""
    return bool(re.search(r"\bALST\b", settings)) and "baseline" not in settings


def loss(settings: str) -> str:
    """The loss kernel a row states (loss=eager, loss=compiled or loss=bf16 in its other settings): a
    run of torchtitan from before it compiled its loss under training.compile says loss=eager, NeMo
    Automodel's MoE benchmarks (MaskedCrossEntropy with fp32_upcast false) loss=bf16; ALST's tiled
    logits and loss (Liger-Kernel's fused linear cross-entropy) chunked."""
    for kernel in ("eager", "compiled", "bf16"):
        if f"loss={kernel}" in settings.replace(" ", "").lower():
            return kernel
    # ALST's rows say "tiled logits", or "ALST" for all its features
    return "chunked" if alst_features(settings) or re.search(r"tiled logits|fused linear cross.?entropy", settings, re.I) else ""


def te_modules(settings: str) -> bool:
    """Whether a PyTorch-native row builds its layers from Transformer Engine's modules: NeMo
    Automodel's "TE" kernel optimizations (its performance summary's glossary: "RMSNorm, Linear and
    DotProductAttention")."""
    return re.search(r"(^|[;,+\s])TE(\s*\+|\s*;|\s*,|$)", settings) is not None


def attention(settings: str) -> str:
    """The attention kernel a row forces (sdpa=cudnn or sdpa=flash: PyTorch's SDPA backends, flash
    being FlashAttention-2; Transformer Engine's DotProductAttention, whose FusedAttention backend
    runs cuDNN's kernels, as Megatron's does), else "" (the framework's, kernels.attention_kernel)."""
    found = re.search(r"sdpa\s*=\s*(cudnn|flash)\b", settings, re.I)
    if found:
        return {"cudnn": "cudnn", "flash": "fa2"}[found.group(1).lower()]
    return "cudnn" if te_modules(settings) else ""


def cudnn_2025(row: dict) -> bool:
    """Whether a row's stack carries one of cuDNN's 2025 releases (9.9 to 9.13), whose attention
    kernels on Blackwell the calculators cost with their own tables (attention.B200_CUDNN_2025):
    - a release it names (cudnn-frontend's Llama 3.2 1B benchmark: cuDNN 9.9.0, NGC's
      pytorch:25.04 as shipped, its README at 7606332);
    - PyTorch 2.8 or 2.9 from PyTorch's CUDA 12.8 wheels, nightlies included, which require
      nvidia-cudnn-cu12 9.10.2.21 (.github/scripts/generate_binary_build_matrix.py of those
      releases; not checked here against a copy of the file of that date);
    - NeMo's 25.04 containers (April 2025), taken to carry at most the cuDNN of NGC's pytorch:25.04
      (9.9.0): an assumption, not read from the container."""
    text = row["framework_version"]
    found = re.search(r"cudnn\s*9\.(9|1[0-3])\b|(^|\W)(py)?torch\s*2\.[89]\b|nemo(:|\s+|\s+container\s+)25\.04",
                      text, re.I)
    return found is not None


def dispatcher(settings: str) -> str:
    """hybridep where a row names HybridEP, deepep where it names DeepEP (both send a token once per
    node, and once per GPU inside it, that holds one of its experts), unless it says
    dispatcher=alltoall."""
    text = settings.replace(" ", "").lower()
    if "dispatcher=alltoall" in text:
        return "alltoall"
    return "hybridep" if "hybridep" in text else "deepep" if "deepep" in text else "alltoall"


def async_tp(settings: str) -> bool:
    """Whether a PyTorch-native row runs async TP (torchtitan's enable_async_tensor_parallel: each
    all-gather and reduce-scatter of TP split by rank and pipelined with its matmul, costed as
    tp_overlap); "vanilla TP" is the plain one."""
    return re.search(r"(^|[;,]\s*)async TP\b", settings) is not None


def dispatch_sms(settings: str) -> int:
    """The SMs a row gives DeepEP's kernels (num_sms=N); 0: the default."""
    found = re.search(r"num_sms\s*=\s*(\d+)", settings)
    return int(found.group(1)) if found else 0


def ep_overlap(settings: str) -> bool:
    """Whether a row runs Megatron's EP overlap (moe_a2a_overlap, A2A_OVERLAP=1)."""
    return re.search(r"a2a_overlap\s*=\s*(1|true)\b", settings, re.I) is not None


def experts(settings: str) -> str:
    """"fused" where a row's experts run one grouped kernel for all (Megatron's
    cutedsl_fused_grouped_mlp), else "" (the framework's, kernels.expert_kernel)."""
    return "fused" if re.search(r"cutedsl_fused_grouped_mlp\s*=\s*(1|true)\b", settings, re.I) else ""


# Sources whose runs keep and reduce Megatron's gradients in bf16 (frameworks.grad_dtype): Megatron-
# Bridge's performance recipes set ddp.grad_reduce_in_fp32=False in every model's script since the
# first (scripts/performance, 568b3a3ef, 2025-08-28; configs/*/*_llm_pretrain.py at dabf51d9d);
# Megatron-LM's Llama 3 example passes --grad-reduce-in-bf16 (examples/llama/train_llama3_8b_h100_fp8.sh
# at bf6e9985) and its other rows follow NeMo's performance scripts, bf16 from 2025-06-12
# (scripts/performance/helpers.py, ab020f6a72). NeMo 2.0 before that reduced in fp32.
BF16_GRADS = ("megatron-bridge-", "megatron-lm-llama-example-")
# ... except FP8: NeMo 2.0's performance scripts set grad_reduce_in_fp32=False for FP8 runs from their
# first version (scripts/performance/llm/pretrain_*.py, 81d94d1501, 2025-02-19; utils.py's
# set_primary_perf_configs from 023b82de24). dgxc-benchmarking v25.04 and v25.05.01 launch those
# scripts (llama3.1/launch.sh: python3 -m scripts.performance.llm.pretrain_llama31; nemotron/launch.sh).
NEMO2_PERF_FP8 = ("dgxc-benchmarking-v25.04", "dgxc-benchmarking-v25.05.01")


def grad_dtype(row: dict) -> str:
    """A row's grad_reduce=fp32|bf16 where it states one, else bf16 for the sources above."""
    found = re.search(r"grad_reduce\s*=\s*(fp32|bf16)\b", row["other_settings"], re.I)
    if found:
        return found.group(1).lower()
    if row["source_id"] in NEMO2_PERF_FP8 and row["precision"].strip().lower() == "fp8":
        return "bf16"
    return "bf16" if row["source_id"].startswith(BF16_GRADS) else ""


def moment_dtype(row: dict) -> str:
    """bf16 where a row states exp_avg_dtype=bf16, and for Megatron-MoE-ModelZoo's FP8 runs, whose
    script passes --use-precision-aware-optimizer --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16 for
    fp8 and mxfp8 (sbatch_benchmarking.sh); else "" (fp32)."""
    if re.search(r"exp_avg_dtype\s*=\s*bf16\b", row["other_settings"], re.I):
        return "bf16"
    modelzoo_fp8 = row["source_id"].startswith("megatron-moe-modelzoo-") and row["precision"].strip().lower() == "fp8"
    return "bf16" if modelzoo_fp8 else ""


# NeMo 1.x launcher runs on Apex's DistributedFusedAdam (optim name distributed_fused_adam in the
# configs they ran: NVIDIA/dgxc-benchmarking at v24.11.1 (35a9aec) and v25.02 (8f5cbb3),
# llama3.1/*.yaml, nemo_megatron/gpt3_175b_hydra.yaml, nemotron/*.yaml; NeMo-Framework-Launcher's
# conf/training/nemotron/nemotron_340b.yaml as of NeMo 24.07, 1ab2c78). NeMo's setup_optimization
# (megatron_base_model.py) gives it no fp32 master with bf16 weights: 16-bit remainders where its
# state is fp32 (store_param_remainders), nothing where it is bf16 (store_params=False); Apex reduces
# gradients in its state dtype unless grad_sync_dtype says otherwise. (source, model) -> (grad_dtype,
# moment_dtype, master_dtype); dgxc v25.02's Nemotron-4 15B moved to Megatron's optimizer
# (mcore_distributed_optim) and keeps the default.
_DEFAULT_APEX = ("", "", "remainder")
_BF16_APEX = ("bf16", "bf16", "none")            # optim.dtype bf16, grad_sync_dtype bf16
APEX_ADAM = {("dgxc-benchmarking-v24.11.1", m): _DEFAULT_APEX
             for m in ("llama3-8b", "llama3-70b", "llama3-405b", "gpt3-175b", "nemotron4-15b")}
APEX_ADAM.update({("dgxc-benchmarking-v25.02", m): _DEFAULT_APEX
                  for m in ("llama3-8b", "llama3-70b", "llama3-405b", "gpt3-175b")})
APEX_ADAM.update({("dgxc-benchmarking-v24.11.1", "nemotron4-340b"): _BF16_APEX,
                  ("nemo-24.07", "nemotron4-340b"): _BF16_APEX})
# NeMo 24.07's SFT rows: the launcher's examples/peft/llama/h100/{7b_1node,13b_1node,70b_2node}.sh
# (the table's layouts) run conf/peft/llama/sft.yaml, Apex with dtype and grad_sync_dtype bf16, and
# pass fp8_params=true, for which NeMo stores a master (store_params) in the state's bf16. Their FP8
# weights are FP8 parameters, as every FP8 row's whose recipe says (the fp8_weights default from ZeRO
# 1 on): NeMo 1.x's fp8_params and NeMo 2.0's fp8_param_gather in dgxc-benchmarking's configure.sh and
# scripts, Megatron-Bridge's fp8_cs and fp8_mx, Megatron-LM's Llama 3 example, the ModelZoo's script.
APEX_ADAM.update({("nemo-24.07", m): ("bf16", "bf16", "16bit") for m in ("llama2-7b", "llama2-13b", "llama2-70b")})


def optimizer(row: dict) -> tuple[str, str, str]:
    """(grad_dtype, moment_dtype, master_dtype) of a row: APEX_ADAM's for the NeMo 1.x launcher runs
    on Apex's optimizer, else what grad_dtype and moment_dtype read, with master remainders for
    Megatron-Bridge's bf16 runs: its performance scripts turn on Megatron's precision-aware
    optimizer whenever the compute dtype is bf16 (scripts/performance, since the first, 568b3a3ef,
    2025-08-28), whose Transformer Engine FusedAdam keeps 16-bit remainders (store_param_remainders,
    Megatron-Core's default), fp32 masters where a row's FP8 recipe is not delayed scaling, and the
    framework's master elsewhere."""
    apex = APEX_ADAM.get((row["source_id"], row["model"].strip()))
    if apex and row["framework"].strip().lower() == "nemo":
        return apex
    precision = row["precision"].strip().lower()
    bridge_bf16 = row["source_id"].startswith("megatron-bridge-") and precision == "bf16"
    # FP8 recipes other than delayed scaling keep fp32 masters in Megatron's distributed optimizer
    # (OptimizerConfig.use_precision_aware_optimizer_no_fp8_or_ds_fp8): frameworks.master_dtype
    # reads that from fp8_recipe (Megatron-MoE-ModelZoo's MXFP8)
    return grad_dtype(row), moment_dtype(row), "remainder" if bridge_bf16 else ""


def fp8_recipe(row: dict) -> str:
    """The FP8 recipe of a row, as its fp8_recipe column names it. Megatron or NeMo: Transformer
    Engine's (mxfp8; te-current, Megatron-Bridge's FP8-CS, is per-tensor current scaling; blockwise);
    "" (delayed, Megatron-LM's default and NeMo's hybrid recipe) where it is not stated. torchtitan:
    torchao's (rowwise, rowwise_with_gw_hp, mxfp8 where every linear runs it); "" (tensorwise, its
    default) otherwise, and for MX runs that quantize only some GEMMs ("... only")."""
    if row["precision"].strip().lower() != "fp8":
        return ""
    text = row["fp8_recipe"].lower()
    if row["framework"].strip().lower() in ("torchtitan", "fsdp2"):
        named = (text.split() or [""])[0].removeprefix("torchao-")       # the recipe leads, notes follow
        return named if named in ("rowwise", "rowwise_with_gw_hp", "mxfp8") and "only" not in text else ""
    if row["framework"].strip().lower() not in ("megatron", "nemo"):
        return ""
    return next((recipe for words, recipe in (("mxfp8", "mxfp8"), ("te-current", "tensorwise"),
                                              ("blockwise", "blockwise"), ("delayed", "delayed")) if words in text), "")


def hsdp_replicas(row: dict, dp: int, dp_per_node: int) -> int:
    """FSDP's replicas where a row says HSDP (shard within a node, replicate across nodes): the
    data-parallel ranks over those of one node; 1 otherwise, or where they do not divide."""
    if "hsdp" not in row["other_settings"].lower() or dp_per_node < 1 or dp % dp_per_node:
        return 1
    return dp // dp_per_node


def offload(settings: str) -> int:
    """The layers a row's Megatron offloads activations of (cpu_offloading_num_layers=N), else 0."""
    found = re.search(r"cpu_offloading_num_layers\s*=\s*(\d+)", settings)
    return int(found.group(1)) if found else 0


def offload_list(settings: str) -> str:
    """The modules a row's Megatron offloads the saved activations of (offload_modules=a+b), else ""."""
    found = re.search(r"offload_modules\s*=\s*([a-z0-9_+]+)", settings)
    return found.group(1) if found else ""


def checkpoint_offload(settings: str) -> bool:
    """Whether a DeepSpeed row keeps its activation checkpoints in host memory (ALST's checkpoint
    offload, in its "+AC offload" rows and its full ALST rows; DeepSpeed's cpu_checkpointing)."""
    return bool(re.search(r"activation-checkpoint offload|AC offload|cpu_checkpointing", settings)
                or alst_features(settings))


def tiled_mlp(settings: str) -> bool:
    """Whether a row ran its MLP tiled (DeepSpeed's TiledMLP): ALST's "+ tiled MLP" rows and its full
    ALST rows."""
    return bool(re.search(r"tiled MLP", settings, re.I) or alst_features(settings))


def host_offload(settings: str) -> tuple[float, bool]:
    """(optimizer_offload, param_offload) of a row that says its optimizer states, and its weights, were
    offloaded to the CPU (DeepSpeed's offload_optimizer and offload_param)."""
    optimizer = re.search(r"optimizer[- ]states? offloaded to (the )?CPU|offload_optimizer", settings, re.I)
    weights = re.search(r"offloads weights to (the )?CPU|weights offloaded to (the )?CPU|offload_param", settings,
                        re.I)
    return (1.0 if optimizer else 0.0), bool(weights)


def liger_modules(row: dict) -> bool:
    """Whether a Hugging Face row's model runs Liger-Kernel's modules (elementwise fused under deepspeed):
    ALST's runs with the tiled logits built the model as ArcticTraining's model type liger
    (AutoLigerKernelForCausalLM: LigerRMSNorm, its RoPE and fused linear cross-entropy, its SwiGLU
    unless the MLP is tiled; projects/sequence-parallelism/run-*.yml, arctic_training/model/liger_factory.py);
    its baselines the plain Hugging Face model."""
    return row["source_id"].startswith("arxiv-2506.13996") and loss(row["other_settings"]) == "chunked"


def knobs(row: dict) -> dict:
    """The ParallelConfig settings a row's recipe fixes beyond its columns."""
    settings = row["other_settings"]
    grads, moments, master = optimizer(row)
    return {"dispatcher": dispatcher(settings), "dispatch_sms": dispatch_sms(settings),
            "ep_overlap": ep_overlap(settings), "loss": loss(settings),
            "attention": attention(settings), "experts": experts(settings),
            "elementwise": "fused" if te_modules(settings) or liger_modules(row) else "",
            "grad_dtype": grads, "moment_dtype": moments,
            "master_dtype": master, "fp8_recipe": fp8_recipe(row), "offload_layers": offload(settings),
            "offload_modules": offload_list(settings),
            **dict(zip(("optimizer_offload", "param_offload"), host_offload(settings)))}
