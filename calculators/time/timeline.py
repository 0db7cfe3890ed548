"""Memory through a training step on the most loaded GPU: what is allocated at each phase of the
first two steps (the shape of PyTorch's memory profile of a training loop).

Phases and what is live (W weights, M master weights, G gradients, O Adam moments, A activations of
the in-flight micro-batches, X framework buffers, all from estimate_memory's worst stage):
    init                    W + M (+ G when the framework keeps a persistent gradient buffer)
    step 1 forward peak     + A + X
    step 1 backward end     activations freed, gradients written: W + M + G + X
    step 1 optimizer        Adam allocates its moments lazily on the first step: + O
    step 2 forward peak     W + M + O + A + X (+ G if persistent; else zero_grad freed them)
    step 2 backward peak    W + M + G + O + A + X: the estimate's total, the step's peak
    step 2 optimizer        W + M + G + O + X
Persistent gradient buffers: Megatron-LM, nanotron and DeepSpeed allocate one contiguous buffer
at init, and so does PyTorch's DDP (fsdp2 at ZeRO 0/1 over more than one replica: its gradient
buckets, built when the model is wrapped, beside the parameters' own .grad, so twice G after the
backward); PyTorch FSDP2 (zero_grad(set_to_none=True)) frees gradients between steps, and with one
micro-batch per step its backward creates them as it frees the activations, so its backward peak
holds only the gradients beyond the activations (G at the peak, estimate._grads_at_peak; G after
the backward is every gradient). The second step holds the most either way (the first lacks the
moments), so "it fit the first step" proves nothing.
"""
from __future__ import annotations

from ..memory.estimate import MemoryEstimate, ddp_buckets
from ..specs.parallel import ParallelConfig

PERSISTENT_GRADS = ("megatron", "nanotron", "deepspeed")


def step_timeline(est: MemoryEstimate, par: ParallelConfig) -> list[tuple[str, dict]]:
    """[(phase, {role: GiB})] for the most loaded GPU of layout `par`."""
    s = est.worst
    W, M, G, O, A, X = (s.weights_gib, s.master_gib, s.grads_gib, s.optimizer_gib, s.activations_gib,
                        s.other_gib)
    full = max(G, s.grads_full_gib)                     # after the backward: every gradient
    # the buffer kept from init on: the framework's one, or DDP's buckets (half of what DDP holds
    # after the backward, the parameters' own .grad being the other half)
    keep_g = full / 2 if ddp_buckets(par) else full if par.framework in PERSISTENT_GRADS else 0.0

    def roles(g=0.0, o=0.0, a=0.0, x=0.0):
        return {"weights": W, "master weights": M, "gradients": g, "Adam moments": o, "activations": a, "buffers": x}
    return [("init", roles(g=keep_g)),
            ("step 1 forward peak", roles(g=keep_g, a=A, x=X)),
            ("step 1 backward end", roles(g=full, x=X)),
            ("step 1 optimizer", roles(g=full, o=O, x=X)),
            ("step 2 forward peak", roles(g=keep_g, o=O, a=A, x=X)),
            ("step 2 backward peak", roles(g=G, o=O, a=A, x=X)),
            ("step 2 optimizer", roles(g=full, o=O, x=X))]
