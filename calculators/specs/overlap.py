"""What each framework overlaps with compute, as its source runs it: ZeRO-1/2's weight gathers
beside the next forward, pipeline sends beside compute, the windows the gradient sync hides in,
and how tensor parallelism's collectives run beside their GEMMs (with and without tp_overlap).
The bytes each framework keeps and moves are frameworks.py's."""
from __future__ import annotations

from .fp8 import fp8_recipe


def param_gather_overlapped(framework: str) -> bool:
    """Whether ZeRO-1/2's all-gather of the updated weights runs beside the next step's forward
    instead of after the optimizer step.

    - fsdp2 at ZeRO-2 (reshard_after_forward=False): yes, FSDP2 gathers each layer at its forward,
      prefetching the next one;
    - megatron: not modelled yet. NVIDIA's recipes set overlap_param_gather (the distributed
      optimizer launches its all-gathers bucket by bucket ahead of the forward), but hiding them
      behind the first micro-batch's forward moved the published dense runs by under 1% and the
      MoE recipes the wrong way, which waits on the MoE layer's own costs. The gather is costed in
      bf16's 2 bytes a parameter, FP8 parameters (fp8_weights) included, which go as 1 byte (MXFP8's
      as bf16): with the gather exposed, that alone moved the published FP8 runs 1 to 4% faster
      (Nemotron-4 340B's, already too fast), so the two wait together;
    - nanotron and deepspeed: no, the gather follows the optimizer step."""
    return framework == "fsdp2"


def p2p_overlapped(framework: str, schedule: str) -> bool:
    """Whether pipeline sends run beside compute instead of holding their sender.

    - megatron, interleaved: yes; its training arguments default overlap_p2p_comm to true and
      turn it off for every other schedule (the non-interleaved 1F1B waits on batched isend/irecv);
    - everything else: the profile's overlap["pp"] decides (0 by default: nanotron's engine and
      Megatron's 1F1B wait on their sends).
    """
    return framework == "megatron" and schedule == "interleaved"


def grad_sync_windows(framework: str, schedule: str, p: int, v: int) -> tuple:
    """The backward work, in one micro-batch's backward of one model chunk, that each chunk's
    gradient sync (1/v of the rank's) can hide behind, one entry per chunk.

    - megatron, interleaved: each chunk's sync starts as soon as its last micro-batch's backward
      ends (megatron/core/pipeline_parallel/schedules.py, forward_backward_pipelining_with_
      interleaving: config.grad_sync_func[chunk] at is_last_microbatch_for_model_chunk). The
      cooldown runs the last p micro-batches chunk by chunk, so the chunk k-th from the end still
      has k x p chunk backwards after it, besides its own: 1 + k p;
    - everything else: the sync of the whole rank hides behind its last micro-batch's backward
      (v chunk backwards)."""
    if framework == "megatron" and schedule == "interleaved" and v > 1:
        return tuple(1 + k * p for k in range(v))
    return (v,)


def tp_backward_overlapped(framework: str) -> bool:
    """Whether, with sequence parallelism, a column-parallel linear's backward runs its TP
    collectives beside its GEMMs: Megatron's LinearWithGradAccumulationAndAsyncCommunication and
    nanotron's async column linear (tp_linear_async_communication, which the Ultra-Scale runs
    used) save the input sharded, launch its all-gather again at the start of the backward and
    compute the input gradient meanwhile, then launch the input gradient's reduce-scatter and
    compute the weight gradient meanwhile. The row-parallel linear's gradient all-gather and the
    forward's collectives wait for their GEMMs. torchtitan's DTensor TP and DeepSpeed: no."""
    return framework in ("megatron", "nanotron")


def tp_pipelining(framework: str) -> str:
    """What tp_overlap pipelines with GEMMs in each framework: "both" directions (Megatron:
    Transformer Engine's userbuffers overlap every TP collective of the layer), "forward" (fsdp2:
    torchtitan's async TP), or "" (DeepSpeed and nanotron have no such path: tp_overlap changes
    nothing there, and check_layout says so).

    torchtitan's async TP is Inductor's micro-pipeline pass (torch/_inductor/fx_passes/
    micro_pipeline_tp.py): it fuses an all-gather with the matmuls that take its result as left
    operand, and a reduce-scatter only with the one matmul whose output it scatters. The forward
    (and a recomputed forward) is those patterns. In the backward the input gradient of the
    column-parallel group is a sum of matmuls (wq, wk, wv; w1, w3) before its reduce-scatter, which
    the pass leaves alone. The row-parallel linears' gathered output gradient is fused with the
    input-gradient matmul, but counting those all-gathers as hidden puts each of torchtitan's own
    vanilla/async pairs at about twice its measured gain (8B and 70B on 64 and 256 H100, bf16 and
    float8 tensorwise, validation.stacks), counting the backward as without tp_overlap within a few
    points: the rule follows the measurements there, not the pass alone."""
    return {"megatron": "both", "fsdp2": "forward"}.get(framework, "")


def async_tp_gathers(par) -> bool:
    """Whether torchtitan's async TP fuses the forward's all-gathers with their matmuls. Inductor's
    pass fuses an all-gather only with the matmuls that take its output directly as left operand
    (micro_pipeline_tp.py, _find_consumer_matmuls: mm or _scaled_mm, through a reshape at most).
    Under torchao's tensorwise float8 the input is cast before its gather and the gathered FP8
    tensor feeds _scaled_mm; under its rowwise and MX recipes the bf16 gather feeds the
    quantization first, so only the reduce-scatters, which take a matmul's output, pipeline."""
    return par.precision != "fp8" or par.framework != "fsdp2" or fp8_recipe(par) == "tensorwise"
