"""DeepEP's normal (training) kernels inside one NVLink domain on Blackwell: measured, not link-bound.

On an 8-GPU H800 node DeepEP's intranode dispatch and combine move 153 to 158 GB/s, near the 200 GB/s
NVLink (DeepEP's README), so comm.dispatch_time costs them as a share of the link. On Blackwell's
900 GB/s NVLink 5 they are bound by the SMs they run on instead. DeepEP's own B200 measurement (its
hybrid-ep branch, docs/README_Hybrid-EP.md at 94a9f8f, "B200 Platform": 8 ranks, 4,096 tokens of
hidden 7168 in bf16, top-8 of 64 experts, uniform routing, through the Torch API) rises with the SMs
given to the kernels and levels off past about 36:

    SMs                16   24   28   32   36   40   44   48
    dispatch (GB/s)   348  494  560  619  635  629  640  646
    combine (GB/s)    302  420  477  524  549  570  577  586

GB/s there is DeepEP's own measure: the bytes a rank receives (its own tokens included) over the
kernel's time, so a rank's dispatch takes (tokens x GPUs each reaches x token bytes) / rate. Fewer
SMs than 16 are taken as proportionally slower, more than 48 as 48's.

Smaller tokens move fewer bytes per token handled. torchtitan's DeepEP branch tuned the kernels for
Qwen3-30B-A3B (hidden 2048, top-8 of 128 experts) on 8 B200 at 128 SMs and measured 516.71 GB/s
dispatch and 485.75 GB/s combine (torchtitan/distributed/deepep/utils.py at 2a642d0), 0.80 and 0.83
of the 48-SM rates above. Each pair fits a time per received token of a fixed cost plus its bytes at
a rate (_token_cost), the fixed cost worth 1,594 bytes (dispatch) and 1,290 bytes (combine) at that
rate; their mean C scales a token of b bytes by size_factor(b) = b (C + 14336) / (14336 (C + b)) at
every SM count (an assumption: the two sizes were compared at 128 and 48 SMs, both past the level).
Fitted on these kernel measurements only; checked on the training runs in validation/data that use
DeepEP on Blackwell (torchtitan's six on 128 SMs, from the same branch's README, and Megatron-Bridge's
Qwen3-235B-A22B on 20), none of whose times were read here.

HybridEP (NVIDIA's TMA-based kernels, parallel.dispatcher "hybridep") keeps the link model: its
kernels alone ran 735 and 674 GB/s at 16 SMs in the same B200 benchmark, near the 792 GB/s the model
gives (0.77 of 900 GB/s on the 7/8 of the bytes that leave the GPU); through its Torch API, which adds
a copy of the received tokens and a synchronisation, 536 and 531. The Megatron-Bridge runs that name
it on B200 and GB200 (-5 to +15% with the link model) do not say which of the two is nearer training.
"""
from __future__ import annotations

from ..specs.hardware import BLACKWELL

MEASURED_TOKEN_BYTES = 7168 * 2   # the benchmark's bf16 token
# (SMs, dispatch GB/s, combine GB/s): DeepEP on 8 B200, the table above
DEEPEP_B200 = ((16, 348.0, 302.0), (24, 494.0, 420.0), (28, 560.0, 477.0), (32, 619.0, 524.0),
               (36, 635.0, 549.0), (40, 629.0, 570.0), (44, 640.0, 577.0), (48, 646.0, 586.0))
# (token bytes, dispatch GB/s, combine GB/s): torchtitan's Qwen3-30B-A3B tuning at 128 SMs
QWEN3_B200 = (2048 * 2, 516.71, 485.75)


def _token_cost(column: int) -> float:
    """Bytes' worth of the fixed cost per received token: b / rate = (cost + b) / link, solved for cost
    from the 48-SM rate of 14,336-byte tokens and torchtitan's rate of its smaller ones."""
    big, small = DEEPEP_B200[-1][column], QWEN3_B200[column]
    b, s = MEASURED_TOKEN_BYTES, QWEN3_B200[0]
    link = (b - s) / (b / big - s / small)
    return link * s / small - s


TOKEN_COST_BYTES = (_token_cost(1) + _token_cost(2)) / 2


def size_factor(token_bytes: float) -> float:
    """The rate of tokens of `token_bytes` over the benchmark's 14,336-byte tokens."""
    b, c = float(token_bytes), TOKEN_COST_BYTES
    return b * (c + MEASURED_TOKEN_BYTES) / (MEASURED_TOKEN_BYTES * (c + b))


def _at(sms: float, column: int) -> float:
    table = DEEPEP_B200
    if sms <= table[0][0]:
        return table[0][column] * sms / table[0][0]
    for lo, hi in zip(table, table[1:]):
        if sms <= hi[0]:
            return lo[column] + (hi[column] - lo[column]) * (sms - lo[0]) / (hi[0] - lo[0])
    return table[-1][column]


def deepep_rates(sms: float, token_bytes: float) -> tuple[float, float]:
    """(dispatch, combine) GB/s in DeepEP's measure for DeepEP's intranode kernels on `sms` SMs."""
    f = size_factor(token_bytes)
    return _at(sms, 1) * f, _at(sms, 2) * f


def measured_nvlink_time(received_bytes: float, token_bytes: float, gpu_name: str, dispatcher: str,
                         sms: int) -> float | None:
    """Seconds of one DeepEP dispatch or combine (their mean) inside an NVLink domain, for a rank that
    receives `received_bytes`; None where no measurement applies (not DeepEP, not Blackwell)."""
    if dispatcher != "deepep" or gpu_name not in BLACKWELL or received_bytes <= 0:
        return None
    d, c = deepep_rates(max(1, sms), token_bytes)
    return received_bytes * (1 / d + 1 / c) / 2 / 1e9
