"""The optimizer (`parallel.optimizer`): AdamW, or Muon as each framework runs it.

Muon keeps one momentum buffer per weight matrix where Adam keeps two moments, and replaces Adam's
element-wise update with an orthogonalised one: Newton-Schulz iterations on the momentum, 5 quintic
steps on the matrix's short side, each X X^T, then b A + c A A, then a X + B X. For an a x b matrix
(a <= b) that is 4 a^2 b + 2 a^3 FLOPs a step (`ns_flops`; exactly what FlopCounterMode counts for
torch.optim.Muon's step, tests/calculators/test_muon.py). Embeddings, the output layer and 1-D
parameters (norms, biases) stay with AdamW in every framework below. Read from each one's source:

- megatron (Megatron-Core since 2026-01, `--optimizer muon`): an fp32 master and an fp32 momentum,
  8 bytes a matrix parameter where Adam keeps 12; the fused QKV split into q, k and v first; TP
  shards all-gathered in fp32 and the whole matrix orthogonalised on every TP rank (its default
  tp_mode, "duplicated"), in bf16 (fp32_matmul_prec "medium"); its fused gate-and-up matrix is one
  matrix there, taken as two here (within a few percent of its NS FLOPs). ZeRO 0: every data-parallel rank
  steps every matrix. ZeRO 1 (`--use-distributed-optimizer`: its layer-wise distributed optimizer):
  each rank owns whole matrices, balanced by their NS cost, and steps only those; the gradients'
  reduce-scatter and the weights' all-gather are the distributed optimizer's. It refuses
  Megatron-FSDP (ZeRO 2/3), the precision-aware optimizer (bf16 moments, 16-bit masters) and so
  CPU offload.
- fsdp2 (torchtitan's DistMuon, 2026-08): fully_shard's fp32 shards, the momentum fp32 like them;
  each matrix orthogonalised in bf16 by one owner rank of the FSDP group (routed experts batched by
  the ranks that hold them), balanced by NS cost, its shards moved there and back by fp32
  all-to-alls that overlap the NS. It refuses TP and CP; CPU offload fails its check that
  parameters are DTensors on the GPU; DDP (ZeRO 0/1) has no shards to own.
- deepspeed (`"optimizer": {"type": "Muon"}`; ZeRO 1/2 since 2025-08, ZeRO 3 since 2026-03): the
  momentum in the model's dtype (bf16: 2 bytes; fp32 with fp32 gradients and communication); ZeRO 1/2:
  each rank orthogonalises the whole
  matrices in its partition; ZeRO 3 (reduce_scatter off): the gradients all-reduced, the momentum
  shards all-gathered, each matrix orthogonalised on one rank (round robin), the new gradients
  and momenta all-gathered: an all-gather's worth more of the gradients and three of bf16, on every
  micro-batch's reduction (its reduce path, not the step). Its default NS is a Gram-matrix variant
  (ns_method "gram", fp16) that it reports about 2x faster on rectangular matrices; it is costed as
  the standard iteration here, an upper bound.
  At ZeRO 0, or with optimizer offload, DeepSpeed steps the matrices by plain SGD: refused here.
- nanotron: no Muon.
"""
from __future__ import annotations

OPTIMIZERS = ("adamw", "muon")
NS_STEPS = 5
ADAM_STATE = 8                            # bytes a parameter of Adam's two fp32 moments
MUON_MOMENTUM = {"megatron": 4, "fsdp2": 4, "deepspeed": 2}    # bytes a parameter of Muon's momentum
MUON_ZERO = {"megatron": (0, 1), "fsdp2": (2, 3), "deepspeed": (1, 2, 3)}
# HBM bytes a matrix parameter Muon's element-wise work moves outside the NS GEMMs, as
# torch.optim.Muon's per-tensor step runs it over fp32 state (unfused, one op at a time): the
# momentum's lerp (read the gradient and the buffer, write the buffer: 12), Nesterov's lerp (12),
# the cast to bf16 (6), the norm and the division (6), weight decay on the master (8), the update
# added (10) and the bf16 weight written from the master (6): 60, where a fused Adam moves 30.
MUON_STEP_BYTES = 60.0


def muon(par) -> bool:
    return getattr(par, "optimizer", "adamw") == "muon"


def ns_flops(rows: float, cols: float, steps: int = NS_STEPS) -> float:
    """FLOPs of Newton-Schulz on one rows x cols matrix (module docstring)."""
    a, b = min(rows, cols), max(rows, cols)
    return steps * (4 * a * a * b + 2 * a ** 3)


def ns_gemms(rows: float, cols: float) -> tuple:
    """The (m, n, k) of one Newton-Schulz step's three GEMMs on a rows x cols matrix."""
    a, b = min(rows, cols), max(rows, cols)
    return (a, a, b), (a, a, a), (a, b, a)


def momentum_bytes(framework: str, grads: str = "") -> int:
    """Bytes a parameter of Muon's momentum; DeepSpeed's is in its gradients' (communication) dtype."""
    if framework == "deepspeed" and grads == "fp32":
        return 4
    return MUON_MOMENTUM.get(framework, ADAM_STATE)


def check_muon(par) -> list[str]:
    """What each framework refuses of Muon (module docstring); [] for AdamW."""
    if not muon(par):
        return []
    fw, p = par.framework, []
    if fw not in MUON_ZERO:
        return [f"{fw} has no Muon optimizer: use optimizer adamw, or framework megatron, fsdp2 or deepspeed"]
    stages = MUON_ZERO[fw]
    if par.zero not in stages:
        why = {"megatron": "its layer-wise distributed optimizer is ZeRO 1; Megatron-FSDP refuses Muon",
               "fsdp2": "torchtitan's DistMuon steps fully_shard's shards (ZeRO 2 or 3)",
               "deepspeed": "at ZeRO 0 DeepSpeed steps Muon's matrices by plain SGD"}[fw]
        p.append(f"optimizer muon under {fw} needs zero {' or '.join(map(str, stages))} ({why}): set zero "
                 f"{stages[-1]}, or optimizer adamw")
    if par.optimizer_offload or par.param_offload:
        p.append(f"optimizer muon under {fw} has no host offload (Megatron's CPU offload is the precision-aware "
                 "Adam's, DeepSpeed then steps the matrices by plain SGD, DistMuon needs its shards on the GPU): "
                 "set optimizer_offload 0 and param_offload false, or optimizer adamw")
    if fw == "megatron" and (par.moment_dtype == "bf16" or par.master_dtype not in ("", "fp32")):
        p.append("optimizer muon under megatron keeps an fp32 master and momentum (the precision-aware optimizer "
                 "is Adam's): set moment_dtype fp32 and master_dtype fp32, or optimizer adamw")
    if fw == "fsdp2" and (par.tp > 1 or par.cp > 1):
        p.append(f"optimizer muon under fsdp2 (torchtitan's DistMuon) refuses tensor and context parallelism "
                 f"(tp={par.tp}, cp={par.cp}): set tp 1 and cp 1, or optimizer adamw")
    return p
