"""Element-wise passes the PyTorch-native stacks (fsdp2: torchtitan, DDP) run outside a layer's
own operations, in bytes and kernels per layer and micro-batch, which elementwise.layer_bytes adds:
PyTorch's ring attention's merges under context parallelism, and autocast's casts over fp32
weights. Each is counted from PyTorch's trace of the code that runs it."""
from __future__ import annotations

from ..memory.activations import autocast_over_fp32
from ..specs.kernels import eager_ops, elementwise_kernels
from ..specs.models import ModelSpec
from ..specs.parallel import ParallelConfig

# Autocast over fp32 weights (fsdp2 at ZeRO 0/1, memory.activations.autocast_over_fp32: DDP or one
# GPU) adds passes a bf16 model has not: each forward casts every weight to bf16 (6 bytes a
# parameter, compiled or not), and eagerly the residual stream and the norms run in fp32 and each
# linear casts its fp32 input to bf16 on its own (q, k and v: three). Per token per unit of h, and
# kernels, for torchtitan's block with either norm (the weights' casts among the forward's
# kernels), from PyTorch's trace of the block under torch.autocast over fp32 weights against the
# same block in bf16 (tests/calculators/test_autocast_torch.py); the gradients' casts back to fp32
# are the optimizer's (frameworks.grad_bytes). Seen on our H200 (call 25): 114 ms of casts and 73
# of fp32 adds in an 820 ms eager step of the 1.34B at 4k tokens, 29 and 33 ms compiled.
AUTOCAST = {"eager": {"forward": (14, 8), "backward": (48, 8)},
            "eager-fused-norm": {"forward": (46, 12), "backward": (92, 14)}}
AUTOCAST_WEIGHT_CAST = 6                      # bytes a parameter each forward: read fp32, write bf16

# PyTorch's ring attention (torchtitan's context parallelism, torch.distributed.tensor.experimental's
# _templated_ring_attention) merges each ring step's partial output into the running one in fp32
# (sigmoid/logsigmoid of the logsumexp difference) and, backward, accumulates dq, dk and dv in fp32,
# concatenating dk and dv to send them on: eager passes outside the attention kernels. It also
# makes k and v contiguous (torchtitan hands them over as (batch, heads, seq, dim) views of
# (batch, seq, heads, dim): a copy each, forward and backward) and zero-fills its fp32 gradient
# buffers. Bytes per element of the rank's q, of its k (v's bytes with them) and of its logsumexp
# (query tokens x heads): (for the ring, for each step past the first), and kernels (the same), on
# the rank whose steps all take the whole q (the last; the first's take half of it and move 19 to
# 27% less forward, and with GQA up to 6% more backward). From PyTorch's trace of its own code with
# the communication taken out (benchmarks/ring_local.py, tests/calculators/test_ring_merges.py),
# k and v laid out as torchtitan passes them; the trace counts no zero-fill, which RING_ZERO_FILL
# adds (4 bytes an element of each fp32 buffer, backward). K and V are the model's kv heads, as
# torchtitan passes them since its SDPA takes enable_gqa; before (2024 to mid-2025) its repeat_kv
# widened them to the query heads first, which this does not cost (2.5 times the backward's bytes
# at Llama 3 8B's 4:1). The lse term includes a 4-byte buffer a CPU's log_sigmoid keeps and a
# GPU's does not (under 0.1% of the total). At the streaming rate the merges came within 25% of
# the time they added on our H100 (call 21: k and v contiguous there, without the copies).
# Compiled, Inductor fuses them: not costed.
RING_MERGE = {"forward": {"q": (12, 38), "kv": (8, 8), "lse": (0, 60), "kernels": (4, 10)},
              "backward": {"q": (16, 10), "kv": (72, 50), "lse": (0, 0), "kernels": (10, 7)}}
RING_LAYOUT_COPY = {"forward": (8, 2), "backward": (24, 4)}     # of RING_MERGE's kv base: (bytes, kernels)
RING_ZERO_FILL = {"q": 4, "kv": 8, "kernels": 3}                # backward: dq, and dk with dv, in fp32


def ring_extras(model: ModelSpec, par: ParallelConfig, tokens: float, way: str) -> tuple[float, int]:
    """(bytes, kernels) PyTorch's eager ring attention adds for `tokens` tokens of a micro-batch on
    one GPU (mbs * seq / cp) under context parallelism (RING_MERGE, RING_ZERO_FILL); megatron's CP
    is Transformer Engine's, deepspeed's Ulysses. A stack on Transformer Engine's modules
    (elementwise="fused") runs Transformer Engine's; a Liger stack on PyTorch's CP would pay them
    and is not told apart."""
    if par.cp == 1 or par.framework != "fsdp2" or not eager_ops(par):
        return 0.0, 0
    r, steps = RING_MERGE[way], par.cp - 1
    per_token = sum((r[k][0] + r[k][1] * steps) * width for k, width in
                    (("q", model.q_dim), ("kv", model.kv_dim), ("lse", model.heads)))
    kernels = r["kernels"][0] + r["kernels"][1] * steps
    if way == "backward":
        per_token += RING_ZERO_FILL["q"] * model.q_dim + RING_ZERO_FILL["kv"] * model.kv_dim
        kernels += RING_ZERO_FILL["kernels"]
    return tokens / par.tp * per_token, kernels


def autocast_extras(model: ModelSpec, par: ParallelConfig, moe_layer: bool, tokens_sp: float,
                    way: str) -> tuple[float, int]:
    """(bytes, kernels) autocast over fp32 weights adds to one layer's element-wise work for
    `tokens_sp` tokens of its norms (AUTOCAST); compiled, only the weights' casts."""
    if not autocast_over_fp32(par):
        return 0.0, 0
    mms = model.layer_matmuls(moe_layer)
    nbytes, kernels = 0.0, 0
    if way == "forward":
        params = sum(mm.fan_in * mm.fan_out * mm.stored / (par.ep * par.etp if mm.expert else
                                                           par.tp if mm.tp in ("col", "row") else 1) for mm in mms)
        # a pipeline's schedule runs every micro-batch in one autocast region, whose cache casts each
        # weight once a step (the harness's, benchmarks/train.py); else each micro-batch casts again
        nbytes, kernels = AUTOCAST_WEIGHT_CAST * params / (par.microbatches if par.pp > 1 else 1), len(mms)
    kind = elementwise_kernels(par)
    if kind in AUTOCAST:
        per_h, k = AUTOCAST[kind][way]
        nbytes, kernels = nbytes + per_h * tokens_sp * model.hidden, k      # the trace's kernels include the casts
    return nbytes, kernels
