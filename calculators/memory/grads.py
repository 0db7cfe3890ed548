"""When the gradients exist beside the activations: FSDP2's that come as the backward frees the
activations, and PyTorch DDP's buckets that live from step to step (estimate's module docstring)."""
from __future__ import annotations

from ..specs.parallel import ParallelConfig


def late_grads(par: ParallelConfig) -> bool:
    """Whether the gradients come only as the backward frees the activations (estimate's module docstring):
    FSDP2 sharding (ZeRO 2/3) or one GPU per replica (no DDP), no pipeline, one micro-batch per
    step. torchtitan's DDP (fsdp2 at ZeRO 0/1 with dp > 1) keeps PyTorch's gradient buckets,
    allocated when the model is wrapped and as large as every gradient, from step to step."""
    return (par.framework == "fsdp2" and par.pp == 1 and par.microbatches == 1
            and (par.zero >= 2 or par.dp * par.cp == 1))


def ddp_buckets(par: ParallelConfig) -> bool:
    """Whether the layout runs PyTorch's DDP, whose gradient buckets are as large as every gradient
    and live beside the parameters' own .grad (estimate's module docstring): fsdp2 unsharded (ZeRO 0/1) over
    more than one data-parallel replica."""
    return par.framework == "fsdp2" and par.zero <= 1 and par.dp * par.cp > 1
