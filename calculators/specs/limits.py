"""The stated limits of every input, and the time budget of one call.

Every size a caller can send (a scenario, a plan request, a config.json, a URL value, a result
row) is bounded here, generously: well past every published model and cluster, and low enough
that no single answer can take seconds or gigabytes. `validate.py` checks values against these
tables; README.md ("Input limits") prints them.

Sizes that cost time or memory, and why the limit is where it is:
- layers: the memory and time models walk the layers (and the planner each pipeline split of
  them); 1,024 is eight times Llama 3 405B's 126.
- GPUs: the planner enumerates the divisors of the GPU count; 1,048,576 is 16 times the largest
  cluster a training run has been reported on.
- gbs (sequences) and seq (tokens): 2^24 each. A pipeline step is simulated op by op up to
  `pipeline.SIM_OPS`; longer ones are extrapolated from two shorter simulations (within 0.5%),
  so a large batch costs no more time than a small one.

A call's time budget (`time_budget`) is cooperative: long loops (the planner's search, the
smallest-cluster search after it) call `check_time`, which raises ConfigError once the budget
is spent, so nothing outlives its request. The CLI adds a wall-clock alarm on top (POSIX).
"""
from __future__ import annotations

import contextlib
import contextvars
import time

from .errors import ConfigError

MAX_GPUS = 1_048_576
MAX_LAYERS = 1024
MAX_BATCH = 16_777_216            # gbs in sequences, and mbs
MAX_SEQ = 16_777_216              # tokens per sequence
MAX_JSON_BYTES = 1_048_576        # one scenario, plan request, profile or config.json
MAX_JSON_DEPTH = 32               # nesting of any JSON input (the deepest valid input is 4)
MAX_TEXT = 200                    # characters of a name (model name, GPU name)
MAX_LIST = 1024                   # entries of a list (a split, a constraint's values)
MIN_GBPS = 1e-3                   # a link's GB/s when given (0 = not given); 1 MB/s, below any real link

# field -> (lowest, highest). Integers unless the field is in FRACTIONS or FLOATS.
MODEL = {
    "layers": (1, MAX_LAYERS), "hidden": (1, 131_072), "heads": (1, 4096), "kv_heads": (0, 4096),
    "head_dim": (0, 4096), "ffn": (0, 1_048_576), "vocab": (1, 4_194_304), "positions": (0, MAX_SEQ),
    "window": (0, MAX_SEQ), "window_layers": (0, MAX_LAYERS), "glu_limit": (0.0, 1e6),
}
MOE = {
    "experts": (1, 4096), "top_k": (1, 4096), "expert_ffn": (1, 1_048_576), "shared_experts": (0, 64),
    "shared_ffn": (0, 1_048_576), "dense_layers": (0, MAX_LAYERS), "moe_every": (1, MAX_LAYERS),
    "groups": (0, 4096), "groups_per_token": (0, 4096),
}
MLA = {
    "q_lora_rank": (0, 131_072), "kv_lora_rank": (1, 131_072), "qk_nope_dim": (1, 4096), "qk_rope_dim": (0, 4096),
    "v_head_dim": (1, 4096),
}
GPU = {                           # floats: datasheet figures
    "memory_gib": (1e-3, 1e5), "bf16_tflops": (1e-3, 1e6), "fp8_tflops": (0.0, 1e6), "hbm_tbps": (1e-3, 1e4),
    "intra_node_gbps": (0.0, 1e6), "inter_node_gbps": (0.0, 1e6), "gpus_per_node": (1, 1024), "host_gbps": (0.0, 1e6),
}
CLUSTER = {"nodes": (1, 131_072), "gpus_per_node": (0, 1024), "intra_node_gbps": (0.0, 1e6),
           "inter_node_gbps": (0.0, 1e6), "host_optimizer_gbps": (0.0, 1e6)}
PARALLEL = {
    "dp": (1, MAX_GPUS), "dp_replicate": (1, MAX_GPUS), "tp": (1, MAX_GPUS), "pp": (1, MAX_LAYERS),
    "cp": (1, MAX_GPUS), "ep": (1, 4096),
    "etp": (0, MAX_GPUS), "vpp": (1, MAX_LAYERS), "zero": (0, 3), "mbs": (1, MAX_BATCH), "gbs": (1, MAX_BATCH),
    "seq": (1, MAX_SEQ), "moe_imbalance": (1.0, 64.0), "dispatch_sms": (0, 1024), "offload_layers": (0, MAX_LAYERS),
    "optimizer_offload": (0.0, 1.0),
}
PLAN = {"seq": (1, MAX_SEQ), "gbs": (1, MAX_BATCH), "top": (1, 50)}
# A budget (calculators/planning/budget.py): up to MAX_SIZES cluster sizes, each one planner search (seconds
# for the largest models), so a request stays within its time budget. Tokens to 1e15, 64 times
# Llama 3's 15.6T; a price per GPU-hour to $10,000; a checkpoint interval to 100 days.
MAX_SIZES = 16
BUDGET = {"tokens": (1.0, 1e15), "seq": (1, MAX_SEQ), "gbs": (1, MAX_BATCH), "price_per_gpu_hour": (0.0, 1e4),
          "max_batch_tokens": (1, 2**40), "failures_per_gpu_day": (0.0, 1.0), "checkpoint_gbps": (1e-3, 1e6),
          "restart_s": (0.0, 86_400.0), "checkpoint_interval_s": (1.0, 8.64e6)}
# Compute-optimal sizing (calculators/planning/chinchilla.py): FLOPs to 1e30 (26,000 times Llama 3 405B's
# 3.8e25), GPU-hours to 1e10, an MFU from 0.1% to 100%; at most MAX_SIZES smaller models to compare.
OPTIMAL = {"flops": (1.0, 1e30), "gpu_hours": (1e-3, 1e10), "params": (1e3, 1e15), "mfu": (1e-3, 1.0)}

_DEADLINE: contextvars.ContextVar = contextvars.ContextVar("calculators_deadline", default=None)


NARROW = "fewer nodes, constraints on tp, pp or mbs, a smaller batch"


@contextlib.contextmanager
def time_budget(seconds: float, what: str = "this request", narrow: str = NARROW):
    """Run the block under a time budget: `check_time` inside it raises once it is spent, saying
    how to `narrow` the request. A budget inside another keeps the earlier deadline."""
    outer = _DEADLINE.get()
    end = time.monotonic() + seconds
    token = _DEADLINE.set((end, seconds, what, narrow) if outer is None or end < outer[0] else outer)
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def check_time() -> None:
    """Raise ConfigError when the current time budget is spent (no budget: never)."""
    deadline = _DEADLINE.get()
    if deadline is not None and time.monotonic() > deadline[0]:
        _, seconds, what, narrow = deadline
        raise ConfigError(f"{what} took longer than its {seconds:g} s budget; narrow it ({narrow}) and ask again")


def remaining() -> float | None:
    """Seconds left in the current time budget (None: no budget), for work handed to another
    process, which cannot see this one's budget."""
    deadline = _DEADLINE.get()
    return None if deadline is None else max(0.0, deadline[0] - time.monotonic())


def table() -> list[tuple[str, object, object]]:
    """(field, lowest, highest) for every bounded field: README.md's table and the tests."""
    rows = []
    for where, limits in (("model", MODEL), ("model.moe", MOE), ("model.mla", MLA), ("hardware.gpu", GPU),
                          ("hardware", CLUSTER), ("parallel", PARALLEL), ("plan", PLAN), ("budget", BUDGET),
                          ("optimal", OPTIMAL)):
        rows += [(f"{where}.{k}", lo, hi) for k, (lo, hi) in limits.items()]
    return rows + [("GPUs in all (nodes x gpus_per_node)", 1, MAX_GPUS), ("budget.gpus: cluster sizes", 1, MAX_SIZES)]
