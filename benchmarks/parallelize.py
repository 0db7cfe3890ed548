"""Apply a layout to one model (or one pipeline stage) with PyTorch's own parallelism.

One function, `parallelize`, in a fixed order (torchtitan's, for the same reasons):
1. tensor + sequence parallelism (DTensor plans) first: it changes the parameters into DTensors
   that everything after must see;
2. context parallelism is not a module change: the train loop enters `context_parallel` around
   forward and backward (GPU only: its ring attention needs CUDA SDPA kernels);
3. activation checkpointing wraps blocks (full) or just the attention core (selective), after TP
   so the recomputed forward replays the TP collectives;
4. torch.compile per block, after AC so the compiled region includes the recompute;
5. FSDP2 `fully_shard` per block then the root (ZeRO 1/2/3 over dp x cp), last, because it
   wraps whatever the steps above produced. All of this happens on the meta device; the weights
   are materialised and initialised after, shard by shard. DDP (ZeRO 0) wraps the materialised
   model instead (`apply_ddp`).

The rank grid is one DeviceMesh, outermost to innermost: pp, dp, cp, tp (tp innermost so it stays
inside a node, as comm.py places it).
"""
from __future__ import annotations

import torch
from torch import nn
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import DTensor, Replicate, Shard
from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, RowwiseParallel,
                                               SequenceParallel, parallelize_module)
from torch.nn.parallel import DistributedDataParallel

from calculators.specs.errors import ConfigError

AXES = ("pp", "dp", "cp", "tp")


def build_mesh(device_type: str, pp: int, dp: int, cp: int, tp: int) -> tuple[DeviceMesh, DeviceMesh]:
    """The rank grid and its flattened dp x cp axis (FSDP shards over both: CP ranks hold the
    same weights)."""
    mesh = init_device_mesh(device_type, (pp, dp, cp, tp), mesh_dim_names=AXES)
    return mesh, mesh["dp", "cp"]._flatten("dp_cp")


def block_plan(sp: bool) -> dict:
    """TP plan of one block: q/k/v and w1/w3 column-wise, wo and w2 row-wise (Megatron's pairing:
    one all-reduce, or with SP one all-gather + one reduce-scatter, per attention and per MLP)."""
    seq = Shard(1)                               # SP shards the sequence axis of (B, T, h)
    plan = {"attention.wq": ColwiseParallel(), "attention.wk": ColwiseParallel(),
            "attention.wv": ColwiseParallel(),
            "attention.wo": RowwiseParallel(output_layouts=seq if sp else Replicate()),
            "feed_forward.w1": ColwiseParallel(), "feed_forward.w3": ColwiseParallel(),
            "feed_forward.w2": RowwiseParallel(output_layouts=seq if sp else Replicate())}
    if sp:
        plan.update({
            "attention_norm": SequenceParallel(), "ffn_norm": SequenceParallel(),
            # all-gather the sequence before the column-parallel linears (the rope table is a plain tensor)
            "attention": PrepareModuleInput(input_layouts=(seq, None), desired_input_layouts=(Replicate(), None)),
            "feed_forward": PrepareModuleInput(input_layouts=(seq,), desired_input_layouts=(Replicate(),)),
        })
    return plan


def apply_tp(model: nn.Module, mesh: DeviceMesh, sp: bool) -> None:
    spec = model.spec
    tp = mesh.size()
    if spec.heads % tp or spec.kv_heads % tp:
        raise ConfigError(f"tp={tp} must divide heads={spec.heads} and kv_heads={spec.kv_heads}")
    if spec.moe is not None:
        raise ConfigError("the harness does not shard MoE experts with TP; use tp=1 for MoE models")
    seq = Shard(1)
    top = {}
    if model.tok_embeddings is not None:
        top["tok_embeddings"] = RowwiseParallel(input_layouts=Replicate(), output_layouts=seq if sp else Replicate())
    if model.norm is not None and sp:
        top["norm"] = SequenceParallel()
    if model.output is not None:
        # logits gathered to every TP rank (Replicate) so the loss is the plain one
        top["output"] = ColwiseParallel(input_layouts=seq if sp else Replicate(), output_layouts=Replicate())
    if top:
        parallelize_module(model, mesh, top)
    for block in model.layers.values():
        parallelize_module(block, mesh, block_plan(sp))


def apply_ac(model: nn.Module, recompute: str) -> None:
    """full: keep each block's input, recompute the block; selective: recompute the attention
    core only (Megatron's selective recompute; with flash attention it saves little, as the
    calculators' activation model says)."""
    if recompute == "none":
        return
    for name, block in list(model.layers.items()):
        if recompute == "full":
            model.layers[name] = checkpoint_wrapper(block, preserve_rng_state=False)
        else:
            block.attention.core = checkpoint_wrapper(block.attention.core, preserve_rng_state=False)


def apply_compile(model: nn.Module) -> None:
    for name, block in list(model.layers.items()):
        model.layers[name] = torch.compile(block, fullgraph=False)


def apply_ddp(model: nn.Module, mesh: DeviceMesh | None, zero: int, device: torch.device) -> nn.Module:
    """ZeRO 0 over more than one rank: DDP, on the materialised model (DDP broadcasts rank 0's
    weights when it wraps, so it comes after initialisation, unlike FSDP2)."""
    if zero != 0 or mesh is None or mesh.size() == 1:
        return model
    if any(isinstance(p, DTensor) for p in model.parameters()):
        raise ConfigError("DDP does not compose with tensor parallelism: use --zero 1, 2 or 3 (FSDP2) with tp > 1")
    return DistributedDataParallel(model, process_group=mesh.get_group(),
                                   device_ids=[device.index] if device.type == "cuda" else None)


def apply_fsdp(model: nn.Module, mesh: DeviceMesh | None, zero: int, precision: str) -> None:
    """ZeRO 1/2/3 -> FSDP2 (1 and 2 keep the gathered weights from forward to backward; PyTorch
    has no separate ZeRO-1). A 1-rank dp x cp axis wraps nothing."""
    if zero == 0 or mesh is None or mesh.size() == 1:
        return
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) \
        if precision == "bf16" else MixedPrecisionPolicy()
    reshard = zero == 3
    for block in model.layers.values():
        fully_shard(block, mesh=mesh, mp_policy=mp, reshard_after_forward=reshard)
    fully_shard(model, mesh=mesh, mp_policy=mp, reshard_after_forward=reshard)


def parallelize(model: nn.Module, mesh: DeviceMesh | None, dp_mesh: DeviceMesh | None, run) -> None:
    """`model`: a Transformer (or a pipeline stage of one) on the meta device; it is changed in
    place. Materialise and initialise it afterwards (model.init_weights), then `apply_ddp`."""
    if mesh is not None and mesh["tp"].size() > 1:
        apply_tp(model, mesh["tp"], run.sp)
    apply_ac(model, run.recompute)
    if run.compile:
        apply_compile(model)
    apply_fsdp(model, dp_mesh, run.zero, run.precision)
