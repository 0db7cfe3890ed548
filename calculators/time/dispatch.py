"""DeepEP's normal (training) kernels inside one node of Blackwell: measured, bound by their SMs.

`parallel.dispatcher` "deepep" is DeepEP's first normal kernels (deep_ep.Buffer), which Megatron's flex
dispatcher calls (20 SMs unless moe_flex_dispatcher_num_sms says otherwise) and torchtitan's DeepEP
branch of 2026-01 ran. On an 8-GPU H800 node they move 153 to 158 GB/s, near what DeepEP's README
calls the ~160 GB/s NVLink maximum, so comm.dispatch_time costs them as a share of the links. On
Blackwell's 900 GB/s NVLink 5 the SMs they run on bound them instead. DeepEP's B200 measurement (its
hybrid-ep branch, docs/README_Hybrid-EP.md at 94a9f8f, "B200 Platform": 8 ranks, 4,096 tokens of
hidden 7168 in bf16, top-8 of 64 experts, uniform routing, through the Torch API) rises with the SMs
and levels off past about 36:

    SMs                16   24   28   32   36   40   44   48
    dispatch (GB/s)   348  494  560  619  635  629  640  646
    combine (GB/s)    302  420  477  524  549  570  577  586

GB/s is DeepEP's own measure: the bytes a rank receives, its own tokens included, over the kernel's
time; so a rank's dispatch takes (its tokens x GPUs each reaches x token bytes) / rate. torchtitan's
DeepEP branch timed the same kernels for Qwen3-30B-A3B's smaller tokens (hidden 2048, top-8 of 128
experts, 4,096 tokens, 8 B200; torchtitan/distributed/deepep/utils.py at 2a642d0): 516.71 GB/s dispatch
and 485.75 GB/s combine at 128 SMs, "41.2% faster dispatch, 48.3% faster combine" than at 24 SMs
(its tuning script's measure: the time saved), so 303.8 and 251.1 GB/s at 24. Small tokens cost more
per byte, and more so on few SMs: 0.61 and 0.60 of the 14 KB rates at 24 SMs, 0.80 and 0.83 past the
level.

Model: the time per received token is a fixed cost plus a cost per byte (each solved from a pair of
token sizes above, per direction); on s SMs it is the 24-SM time x 24 / s (SM-bound), never below the
levelled-off time (measured at 48 SMs for 14 KB tokens and 128 for 4 KB; the model reaches it from
about 45 SMs), nor below what the link model gives. Fitted on four numbers a direction; checked on
the table's other SM counts (within 8%) and DeepEP's GB200 table at 8 ranks in the same document
(within 10%), and on the training runs in validation/data that use DeepEP on Blackwell (torchtitan's
six on 128 SMs, from the same branch's README, and Megatron-Bridge's Qwen3-235B-A22B on 20), none of
whose times were read here. The tuning's summary file that the torchtitan comment cites is not in
that commit; the rates are as the comment prints them.

Measured at 8 ranks and used for fewer too: torchtitan's tuning at EP 4 (218 and 185 GB/s at 24 SMs
for 4 KB tokens; scripts/deepep/torchtitan_deepep_tune/TUNING_RESULTS_SUMMARY.md) ran 0.72 and 0.74
of the 8-rank rates, so fewer ranks are slower still. A group of more than 8 in one NVLink domain
(GB200 NVL72) keeps the link model, as DeepEP's first intranode kernels hold at most 8 peers. So
does Hopper: no measurement there at these SM counts; Blackwell's per-SM rates would hold 4 KB
tokens on 20 SMs (253 and 209 GB/s) below H100's link share (344), which the one 8-GPU H100 DeepEP
run (NeMo AutoModel's Qwen3-30B-A3B, already predicted 17% slow) does not support. HybridEP
(parallel.dispatcher "hybridep") keeps it too: its kernels alone ran 735 and 674 GB/s at 16 SMs in
the same B200 benchmark, about the 688 GB/s the link model gives (0.67 of 900 GB/s on the 7/8 of the
bytes that leave the GPU), and Megatron calls them with the permutation fused (dispatch_with_permute),
which the calculators cost apart. DeepEP's second version (deep_ep.ElasticBuffer, 2026, which
torchtitan's main branch runs) moved 643 to 740 GB/s on SM100 at 24 to 64 SMs in one node in DeepEP's
README, near the link model as "hybridep" costs it, and 0.85 and 0.92 of the NIC over 2 and 4 nodes
(90 and 81, 61 GB/s logical), which "hybridep" puts at 0.72 and 0.83 (nic_share): no value here
costs it exactly across nodes.

Across nodes, comm.dispatch_time costs the copies that leave a node at the profile's share of the NIC
(profiles.py, ep_dispatch 0.86). DeepEP's RDMA GB/s counts a rank's tokens times the nodes each
reaches, its own node included (its README calls its second version's figures "logical bandwidth";
the first's test_internode.py counts the same), so only (N - 1) / N of them cross the NIC. The first
version's figures (43, 57 and 50 GB/s combining over 2, 4 and 8 nodes, README at b306af0~1, H800 with
400 Gb/s CX7) so read are 0.43, 0.86 and 0.88 of the NIC: the profile's share holds from 4 nodes, and
2 nodes reach half of it. HybridEP's kernels on H100 (8 SMs, its default across nodes; the hybrid-ep
README's H100 table, kernel time) reach 0.72, 0.83 and 0.89. nic_share gives a node count's share
over the 4-and-8-node mean, interpolated between the measured counts and held past 8. H200 runs of
DeepEP's first kernels over 2 nodes (DeepEP issue 493: 40.89 and 44.37 GB/s) agree with its README.
"""
from __future__ import annotations

from ..specs.hardware import BLACKWELL
from .profiles import DEEPEP_SMS

HYBRIDEP_SMS = (24, 8)            # HybridEP's default in one node, across nodes (csrc/hybrid_ep/config.cuh);
                                  # torchtitan's HybridEP backend sets 16 (HYBRIDEP_NUM_SMS_DISPATCH)
MEASURED_RANKS = 8
SM_POINTS = 24                    # the SM count of the SM-bound pair
# (token bytes, dispatch GB/s, combine GB/s)
SM_BOUND = ((7168 * 2, 494.0, 420.0), (2048 * 2, 516.71 * (1 - 0.412), 485.75 * (1 - 0.483)))   # 24 SMs
LEVEL = ((7168 * 2, 646.0, 586.0), (2048 * 2, 516.71, 485.75))   # 48 SMs (14 KB), 128 SMs (4 KB)


# logical RDMA GB/s by nodes: DeepEP's first version (combine, bf16), HybridEP on H100 (dispatch, combine)
DEEPEP_RDMA = {2: 43.0, 4: 57.0, 8: 50.0}
HYBRIDEP_RDMA = {2: (76.80, 68.00), 4: (54.50, 56.40), 8: (50.55, 51.03)}
NIC_GBPS = 50.0                   # the 400 Gb/s NICs of both measurements


def _measured_share(logical: float, nodes: int) -> float:
    return logical * (nodes - 1) / nodes / NIC_GBPS


def nic_share(dispatcher: str, nodes: int) -> float:
    """The share of the NIC DeepEP's or HybridEP's kernels reach over `nodes` nodes, over their mean at
    4 and 8 (which the profile's ep_dispatch stands for): linear in the node count between the
    measured 2, 4 and 8, held past 8, never above 1."""
    if dispatcher == "deepep":
        logical = DEEPEP_RDMA
    elif dispatcher == "hybridep":
        logical = {n: 2 / (1 / d + 1 / c) for n, (d, c) in HYBRIDEP_RDMA.items()}
    else:
        return 1.0
    share = {n: _measured_share(r, n) for n, r in logical.items()}
    mean = (share[4] + share[8]) / 2
    n = min(max(nodes, 2), 8)
    lo = 2 if n <= 4 else 4
    hi = 2 * lo
    at = share[lo] + (share[hi] - share[lo]) * (n - lo) / (hi - lo)
    return min(1.0, at / mean)


def default_sms(dispatcher: str, nodes: int = 1) -> int:
    """The SMs a dispatcher's kernels take when parallel.dispatch_sms leaves it to them."""
    return HYBRIDEP_SMS[nodes > 1] if dispatcher == "hybridep" else DEEPEP_SMS


def _line(points, column: int) -> tuple[float, float]:
    """(fixed ns, ns per byte) of a received token's time b / rate through two token sizes."""
    (b1, *r1), (b2, *r2) = points
    t1, t2 = b1 / r1[column - 1], b2 / r2[column - 1]
    per_byte = (t1 - t2) / (b1 - b2)
    return t1 - b1 * per_byte, per_byte


def token_ns(sms: float, token_bytes: float, column: int) -> float:
    """Nanoseconds per received token of `token_bytes` on `sms` SMs; column 1 dispatch, 2 combine."""
    f_sm, p_sm = _line(SM_BOUND, column)
    f_lv, p_lv = _line(LEVEL, column)
    return max((f_sm + token_bytes * p_sm) * SM_POINTS / max(1.0, sms), f_lv + token_bytes * p_lv)


def deepep_rates(sms: float, token_bytes: float) -> tuple[float, float]:
    """(dispatch, combine) GB/s in DeepEP's measure for its intranode kernels on `sms` SMs."""
    return tuple(token_bytes / token_ns(sms, token_bytes, c) for c in (1, 2))


def measured_nvlink_time(received_bytes: float, token_bytes: float, gpu_name: str, dispatcher: str,
                         sms: int, ranks: int) -> float | None:
    """Seconds of one DeepEP dispatch or combine (their mean) inside a node, for a rank that receives
    `received_bytes`; None where no measurement applies (not DeepEP, not Blackwell, more than 8
    ranks, no token size)."""
    if dispatcher != "deepep" or gpu_name not in BLACKWELL or ranks > MEASURED_RANKS or received_bytes <= 0 \
            or token_bytes <= 0:
        return None
    tokens = received_bytes / token_bytes
    return tokens * (token_ns(sms, token_bytes, 1) + token_ns(sms, token_bytes, 2)) / 2 * 1e-9
