"""Activation recompute policies, by what each framework means by its names.

"selective" does not mean the same thing everywhere, so `parallel.recompute` names a policy and
each framework says what its "selective" is:

| recompute   | policy    | what it keeps for backward, per layer | what backward runs again |
|-------------|-----------|---------------------------------------|--------------------------|
| none        | none      | everything autograd saves             | nothing                  |
| core_attn   | core_attn | everything but the attention scores   | the attention core's forward |
| op_sac      | op_sac    | the layer's input, every other matmul's output, the attention's | the other matmuls, |
|             |           | output and log-sum-exp, reduce-scatters' and | every element-wise op, |
|             |           | all-to-alls' outputs                  | TP's all-gathers         |
| op_sac+core_attn | op_sac | as op_sac, less the attention's output and | as op_sac, and |
|             |           | log-sum-exp                           | the attention core       |
| full        | full      | the layer's input                     | the layer's forward      |
| layer:N     | full on every N-th layer, none on the others | | |
| selective   | megatron, nanotron, deepspeed: core_attn; fsdp2: op_sac | | |

- core_attn is Megatron's `--recompute-granularity selective` (recompute_modules ["core_attn"]):
  with flash attention the core keeps only its output and log-sum-exp, so it saves memory only
  without it (the s x s scores).
- op_sac is torchtitan's default selective activation checkpointing (mode "op"):
  `torch.utils.checkpoint.create_selective_checkpoint_contexts` with a policy that must-saves the
  outputs of compute-intensive ops (torch._functorch.partitioners' compute_intensive_ops: mm,
  SDPA's flash and efficient kernels, ...) and of reduce-scatter and all-to-all, except every
  second mm of the block, counted in execution order; the MoE router's gate is forced to
  recompute (`force_recompute_mm_shapes_by_fqns`), and the experts' grouped GEMMs are not in the
  save list (torchtitan/distributed/activation_checkpoint.py, SelectiveAC). Everything else
  (norms, RoPE, activation functions, residual adds) is recomputed.
- op_sac+core_attn is op_sac where the attention kernel is not in the save list, so its output is
  recomputed too. torchtitan runs cuDNN attention on Blackwell (models/attention.py puts
  SDPBackend.CUDNN_ATTENTION first when the device's capability is 10.0 or more, since 3b85aa31f,
  2025-05-14), and its save list named only SDPA's flash and efficient kernels until
  `_scaled_dot_product_cudnn_attention` joined it (b39377f9f, 2025-12-01): torchtitan's "selective"
  on a B200 between those dates is this policy; before and after it, and on Hopper, it is op_sac.
- layer:N is torchtitan's earlier layer-level selective AC (`selective_ac_option = N`): every
  N-th block is wrapped in full checkpointing. layer:1 is full.
- a list of Megatron's submodules joined by "+" (`layernorm+moe`, `core_attn+moe_act`) is
  Megatron-Core's `--recompute-granularity selective --recompute-modules ...`
  (TransformerConfig.recompute_modules; the list replaces the default ["core_attn"]). Each module
  frees what it alone keeps and runs its forward again in backward (MODULES says what). layernorm,
  moe_act and mla_up_proj discard their output once the next op has read it and recompute it just
  before that op's backward (Megatron's CheckpointWithoutOutput); mlp, moe and shared_experts are
  checkpointed whole and keep only their input; moe runs its dispatch and combine all-to-alls
  again. A module the model does not have (moe_act without experts) frees nothing.
tests/calculators/test_recompute_torch.py checks the bytes against what PyTorch keeps under the
same torch.utils.checkpoint policy.
"""
from __future__ import annotations

import re

from .models import Matmul

STANDARD = ("none", "selective", "full")          # the planner's levels, least memory saved first
SAC_WITH_ATTENTION = "op_sac+core_attn"         # op_sac whose save list lacks the attention kernel
EXPLICIT = ("core_attn", "op_sac", SAC_WITH_ATTENTION)
MAX_EVERY = 1024
_LAYER = re.compile(r"layer:([1-9][0-9]{0,3})")
SELECTIVE = {"fsdp2": "op_sac"}                   # every other framework's "selective" is core_attn
# Megatron-Core's recompute_modules this project models, in its documented order, and what each
# frees (memory/activations.py module_freed) and runs again (time/compute.py)
MODULES = ("core_attn", "moe_act", "layernorm", "mla_up_proj", "mlp", "moe", "shared_experts")
MODULES_TEXT = "+".join(MODULES[1:3])            # an example for messages: moe_act+layernorm


def modules(recompute: str) -> tuple[str, ...]:
    """The Megatron submodules a "+"-joined list names, in MODULES order; () if `recompute` is
    not such a list (a single module other than core_attn is a list of one). core_attn alone
    stays its own policy."""
    if not isinstance(recompute, str) or recompute == "core_attn" or len(recompute) > 200:
        return ()
    names = recompute.split("+")
    if len(set(names)) != len(names) or not set(names) <= set(MODULES):
        return ()
    return tuple(m for m in MODULES if m in names)


# Megatron's fine-grained activation offloading (--offload-modules): each module's saved tensors go to
# host memory (megatron/core/pipeline_parallel/fine_grained_activation_offload.py, saved-tensor hooks
# around the module); "fused_group_mlp" (Transformer Engine's op fuser) is not modelled
OFFLOAD_MODULES = ("attn_norm", "qkv_linear", "core_attn", "attn_proj", "mlp_norm", "expert_fc1", "moe_act")


def offload_modules(text) -> tuple[str, ...]:
    """The modules a "+"-joined offload list names, in OFFLOAD_MODULES order; () for "" or a list
    that is not one (valid_offload says which)."""
    if not isinstance(text, str) or not text or len(text) > 200:
        return ()
    names = text.split("+")
    if len(set(names)) != len(names) or not set(names) <= set(OFFLOAD_MODULES):
        return ()
    return tuple(m for m in OFFLOAD_MODULES if m in names)


def recomputed_modules(recompute: str) -> set[str]:
    """The modules of a list that each rerun a part of their own: moe already covers moe_act and
    shared_experts, which run inside it."""
    mods = set(modules(recompute))
    return mods - {"moe_act", "shared_experts"} if "moe" in mods else mods


def recomputed_norms(framework: str, mla: bool, moe_layer: bool) -> int:
    """How many of a layer's two norms the "layernorm" module reruns. Megatron recomputes only
    norms that are modules of their own (transformer_layer.py: not an IdentityOp): with Transformer
    Engine a dense layer's norms are fused into the linear after them (TELayerNormColumnParallelLinear)
    and stay as they are; a MoE layer's pre-MLP norm (the router reads it) and MLA's input norm are
    separate. Other frameworks' module lists take both."""
    if framework != "megatron":
        return 2
    return int(moe_layer) + int(mla)


def matmul_modules(name: str, moe_layer: bool) -> tuple[str, ...]:
    """The modules whose recompute runs the layer matmul `name` (ModelSpec.layer_matmuls) again:
    MLA's up projections mla_up_proj; the rest of attention none (only full, op_sac); a dense
    layer's MLP mlp; an MoE layer's router and experts moe, its shared experts also
    shared_experts."""
    if name in ("q_b", "kv_b"):
        return ("mla_up_proj",)
    if name in ("q", "k", "v", "o", "q_a", "kv_a"):
        return ()
    if not moe_layer:
        return ("mlp",)
    return ("moe", "shared_experts") if name.startswith("shared_") else ("moe",)


def valid(recompute) -> bool:
    """Whether `recompute` names a policy: STANDARD, EXPLICIT, layer:N (1 <= N <= MAX_EVERY) or
    a "+"-joined list of MODULES, each once."""
    if not isinstance(recompute, str):
        return False
    if recompute in STANDARD or recompute in EXPLICIT or modules(recompute):
        return True
    m = _LAYER.fullmatch(recompute)
    return bool(m) and 1 <= int(m.group(1)) <= MAX_EVERY


def policy(framework: str, recompute: str) -> tuple[str, int]:
    """(policy, every): the policy each recomputed layer runs ("none", "core_attn", "op_sac",
    "full" or "modules": a list of Megatron submodules, see `modules`) and how often a layer runs
    it (every `every`-th layer; 1: all). `recompute` must be valid()."""
    if recompute == "selective":
        return SELECTIVE.get(framework, "core_attn"), 1
    m = _LAYER.fullmatch(recompute)
    if m:
        return "full", int(m.group(1))
    if modules(recompute):
        return "modules", 1
    if recompute == SAC_WITH_ATTENTION:
        return "op_sac", 1
    return recompute, 1


def sac_recomputes_attention(recompute: str) -> bool:
    """Whether an op_sac policy leaves the attention core out of its save list (op_sac+core_attn)."""
    return recompute == SAC_WITH_ATTENTION


def order(recompute: str) -> float:
    """How much a value recomputes, for ordering (none < core_attn/selective < a module list, by
    MODULE_SHARE < op_sac < layer:N by 1/N < full): the most of a layout's per-rank values names
    the layout, and the planner tries them least first."""
    m = _LAYER.fullmatch(recompute)
    if m:
        return 3.0 - 1.0 / int(m.group(1))
    if modules(recompute):     # between core_attn and op_sac, by the share of the layer each reruns
        return 1.0 + min(0.95, sum(MODULE_SHARE[m] for m in modules(recompute)))
    return {"none": 0.0, "selective": 1.0, "core_attn": 1.0, "op_sac": 2.0, SAC_WITH_ATTENTION: 2.05,
            "full": 3.0}[recompute]


# a rough share of a layer's forward each module reruns, for ordering only: the norms, activations
# and up projections are a few memory-bound kernels; the MLP or the MoE block most of the layer
MODULE_SHARE = {"core_attn": 0.05, "layernorm": 0.05, "moe_act": 0.1, "mla_up_proj": 0.1, "shared_experts": 0.15,
                "mlp": 0.5, "moe": 0.6}
# the planner's levels for MoE layers under Megatron, least first: Megatron-Bridge's MoE recipes
# recompute these before a whole layer
MOE_LEVELS = ("moe_act+layernorm", "layernorm+moe")


def levels(framework: str, moe: bool) -> tuple[str, ...]:
    """The recompute values the planner tries, least first: none, selective, full, and for an MoE
    model under Megatron its module lists between selective and full."""
    return STANDARD[:2] + (MOE_LEVELS if moe and framework == "megatron" else ()) + STANDARD[2:]


def sac_saved(matmuls: tuple[Matmul, ...]) -> tuple[bool, ...]:
    """For each of a layer's matmuls (ModelSpec.layer_matmuls order, which is the execution
    order of torchtitan's blocks: q, k, v, o, then gate/w1, up/w3, down/w2), whether op_sac keeps
    its output: mm calls are counted in order and every second one is recomputed; the router's
    gate is forced to recompute and the routed experts' grouped GEMMs are not saved ops, so
    neither counts."""
    out, count = [], 0
    for mm in matmuls:
        if mm.expert or mm.name == "router":
            out.append(False)
            continue
        count += 1
        out.append(count % 2 == 1)
    return tuple(out)


def reissue(framework: str, recompute: str) -> float:
    """The fraction of a layer's forward kernels its backward launches again (the host issues
    them again too): full 1 (1/N with layer:N); op_sac 1 (every element-wise op and half the
    matmuls: most of the forward's launches); a module list with mlp or moe 1/2, other module
    lists, core_attn and none 0 (a few kernels, or none)."""
    kind, every = policy(framework, recompute)
    if kind == "modules":        # mlp and moe: the MLP half of the layer's launches; the rest a few kernels
        return 0.5 if {"mlp", "moe"} & set(modules(recompute)) else 0.0
    return {"full": 1.0 / every, "op_sac": 1.0}.get(kind, 0.0)
