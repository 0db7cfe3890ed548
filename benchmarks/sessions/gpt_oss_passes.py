"""The eager passes Megatron-Core runs for gpt-oss outside its fused kernels, timed on one GPU: the
sequences in benchmarks/eager_ops.py, whose bytes the calculators count from PyTorch's trace.

    PYTHONPATH=. python gpt_oss_passes.py OUT.jsonl [profile|held]

Shapes are one micro-batch of the Megatron-Bridge runs the validation scores: on H100, micro-batch 1
of 4,096 tokens with EP 8 (16 local experts, 16,384 expert rows); on GB200, micro-batch 4 with EP
64 (2 local experts, 65,536 rows); hidden and expert width 2,880, 64 query and 8 kv heads of 64.
- clamp: glu_clamp on the experts' (rows, 2 x 2,880) GLU input;
- bias: expert_bias on (rows, 2,880), the probabilities in bf16 (Megatron's router) and in fp32
  (DeepEP and HybridEP);
- rope: unfused_rope on q and on k, (4,096, batch, heads, 64), with YaRN's mscale for a factor of
  32 (0.1 ln 32 + 1);
- copy: a device-to-device copy of the largest input, for the rate a pass of plain reads and
  writes gets here.
`held` times the same passes at shapes the paces were not fitted on: EP 32 with micro-batch 4 (4
local experts, 65,536 rows; RoPE over 16,384 tokens) and EP 8 with micro-batch 2 (16 local experts,
32,768 rows; RoPE over 8,192 tokens).
Each timed forward and forward + backward (CUDA events, median of 5 batches after a warm-up). With
`profile`, each forward + backward runs 5 times under torch.profiler instead, and each row gives its
kernels' GPU time (their sum, and by kernel name): a pass whose kernels sum to less than its timed
time waits for the host between launches.
"""
import json
import math
import sys

import torch

from benchmarks.eager_ops import expert_bias, glu_clamp, unfused_rope
from timing import kernel_times, timed as _timed

H, F, HEADS, KV, D, S = 2880, 2880, 64, 8, 64, 4096
CASES = {"H100 ep8 mbs1": (16384, 16, 1), "GB200 ep64 mbs4": (65536, 2, 4)}   # rows, local experts, batch
HELD = {"ep32 mbs4": (65536, 4, 4), "ep8 mbs2": (32768, 16, 2)}


def timed(fn):
    return _timed(fn, target_ms=20.0)[0]


def leaf(*shape, dtype=torch.bfloat16):
    return torch.randn(*shape, device="cuda", dtype=torch.float32).to(dtype).requires_grad_()


PROFILE = False


def kernels(fn, runs=5):
    """{kernel name: GPU seconds per run} of fn, from torch.profiler."""
    return kernel_times(fn, runs, width=90)


def both_ways(fn, inputs):
    """(forward seconds, forward + backward seconds) of fn(*inputs); profiled: the forward +
    backward's kernels instead, {"kernels_s": their sum, "by_kernel": ...}."""
    out = fn(*inputs)
    grad = torch.randn_like(out)
    leaves = [t for t in inputs if t.requires_grad]

    def backward():             # the gradients returned, not accumulated into .grad (no extra add)
        torch.autograd.grad(fn(*inputs), leaves, grad)
    if PROFILE:
        by = kernels(backward)
        return sum(by.values()), {k: round(v * 1e6, 1) for k, v in sorted(by.items(), key=lambda kv: -kv[1])}
    return timed(lambda: fn(*inputs)), timed(backward)


def main(path, cases=CASES):
    gpu = torch.cuda.get_device_name(0)
    mscale = 0.1 * math.log(32) + 1.0
    with open(path, "a") as f:
        def record(**row):
            if PROFILE and "fwd_s" in row:     # both_ways gave the kernels' sum and each kernel's time
                row["kernels_s"], row["by_kernel_us"] = row.pop("fwd_s"), row.pop("both_s")
            row.update(gpu=gpu, torch=torch.__version__)
            print(json.dumps(row))
            f.write(json.dumps(row) + "\n")
            f.flush()
        for case, (rows, local, batch) in cases.items():
            x = leaf(rows, 2 * F)
            record(case=case, part="clamp", shape=list(x.shape), **dict(zip(("fwd_s", "both_s"),
                                                                             both_ways(glu_clamp, (x,)))))
            y = leaf(rows, H)
            bias = leaf(local, H)
            for dtype in (torch.bfloat16, torch.float32):
                probs = leaf(rows, 1, dtype=dtype)
                fwd, both = both_ways(lambda r, b, p: expert_bias(r, b, p, [rows // local] * local), (y, bias, probs))
                record(case=case, part="bias", shape=[rows, H], local=local, probs=str(dtype).split(".")[-1],
                       fwd_s=fwd, both_s=both)
            pos = torch.arange(S, device="cuda", dtype=torch.float32)
            inv = 1.0 / (150000.0 ** (torch.arange(0, D, 2, device="cuda", dtype=torch.float32) / D))
            freqs = torch.cat([torch.outer(pos, inv)] * 2, -1)[:, None, None, :]
            for name, heads in (("q", HEADS), ("k", KV)):
                t = leaf(S, batch, heads, D)
                fwd, both = both_ways(lambda t_: unfused_rope(t_, freqs, mscale), (t,))
                record(case=case, part="rope", tensor=name, shape=list(t.shape), mscale=mscale, fwd_s=fwd, both_s=both)
            src = torch.randn(rows, 2 * F, device="cuda", dtype=torch.bfloat16)
            dst = torch.empty_like(src)
            copy = timed(lambda: dst.copy_(src))
            record(case=case, part="copy", shape=list(src.shape), s=copy,
                   gbps=2 * src.numel() * src.element_size() / copy / 1e9)


if __name__ == "__main__":
    PROFILE = len(sys.argv) > 2 and sys.argv[2] == "profile"
    main(sys.argv[1], HELD if len(sys.argv) > 2 and sys.argv[2] == "held" else CASES)
