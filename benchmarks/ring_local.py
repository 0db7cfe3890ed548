"""PyTorch's ring attention (torch.distributed.tensor.experimental's context_parallel, what
torchtitan runs for CP) as one rank of a ring on one device, its communication taken out.

The library's own _templated_ring_attention and its backward run with the process group replaced by
a stand-in that says "rank r of cp" and the rotaters that move K and V (and, backward, the fp32 dK
and dV) around the ring replaced by one that hands back the rank's own buffer: each step runs the
kernels, fp32 merges, partial updates and accumulations a rank runs, at the same shapes, and no byte
crosses a link. The calculators count those passes' bytes from PyTorch's trace of this
(tests/calculators/test_ring_merges.py); a GPU session times it (benchmarks/sessions/ring_attention.py).
"""
from __future__ import annotations

import types


def library():
    """The module holding PyTorch's ring attention (it moved into a package in 2025)."""
    try:
        from torch.distributed.tensor.experimental._context_parallel import _attention as mod
    except ImportError:
        from torch.distributed.tensor.experimental import _attention as mod
    return mod


class Group:
    """Stands in for the CP process group: its rank and size are all the ring code asks of it."""

    def __init__(self, rank: int, size: int):
        self.rank, self.size = rank, size


class Loopback:
    """A rotater that hands back what it was given: the step's shapes and work, none of its bytes."""

    def __init__(self, *_args, **_kwargs):
        self.buffer = None

    def exchange_buffers(self, buffer):
        self.buffer = buffer

    def next_buffer(self):
        return self.buffer


def patch(mod) -> None:
    """Points `mod`'s ring code at Group and Loopback, with its defaults: load balancing on, merges
    and gradient accumulation in fp32. For a process that runs no real CP afterwards."""
    mod.dist = types.SimpleNamespace(get_rank=lambda g: g.rank, get_world_size=lambda g: g.size, ProcessGroup=Group)
    mod._create_rotater = lambda *args, **kwargs: Loopback()
    mod._cp_options.enable_load_balance = True
    mod._cp_options.convert_to_f32 = True


def forward(mod, rank: int, cp: int, op, q, k, v):
    """One rank's ring forward: (out, logsumexp, *the last step's other outputs)."""
    return mod._templated_ring_attention(Group(rank, cp), 2, op, query=q, key=k, value=v, is_causal=True)


def backward(mod, rank: int, cp: int, op, do, q, k, v, out, lse, **kwargs):
    """One rank's ring backward: (dq, dk, dv, ...); kwargs are the op's other arguments."""
    return mod._templated_ring_attention_backward(Group(rank, cp), 2, op, grad_out=do, grad_out_name="grad_out",
                                                  query=q, key=k, value=v, out=out, logsumexp=lse, is_causal=True,
                                                  **kwargs)
