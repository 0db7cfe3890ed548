"""One rank's share of PyTorch's ring attention (torch.distributed.tensor.experimental's
context_parallel: what torchtitan runs for CP) on one GPU, its communication taken out.

    PYTHONPATH=. python benchmarks/sessions/ring_attention.py OUT.jsonl [seconds]

benchmarks/ring_local.py runs PyTorch's own ring code for one rank, no bytes crossing a link.
Torchtitan's Llama 3 8B attention as of its December 2024 benchmark: 32 query heads of
128, K and V repeated to 32 heads before SDPA (its repeat_kv), the flash backend, load balancing on
(the default), 32,768 tokens on every rank whatever cp (the benchmark's per-rank share). Each cp
is timed for rank 0 and rank cp - 1 (their steps split the load-balanced work differently), forward
and backward apart, with the bare flash kernels of the same steps (no merges) beside them.
"""
import json
import sys
import time

import torch

from benchmarks.ring_local import backward, forward, library, patch
from timing import timed

TOKENS, HEADS, HEAD_DIM = 32768, 32, 128
CPS = (1, 2, 4, 8)
aten = torch.ops.aten


def ring(mod, rank, cp):
    q, k, v, do = (torch.randn(1, HEADS, TOKENS, HEAD_DIM, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    box = {}

    def fwd():
        box["o"] = forward(mod, rank, cp, aten._scaled_dot_product_flash_attention, q, k, v)

    def bwd():
        out, lse, cq, ck, mq, mk, seed, offset = box["o"][:8]
        backward(mod, rank, cp, aten._scaled_dot_product_flash_attention_backward.default, do, q, k, v, out, lse,
                 cum_seq_q=cq, cum_seq_k=ck, max_q=mq, max_k=mk, dropout_p=0.0, philox_seed=seed,
                 philox_offset=offset, scale=None)

    def steps():
        """(query, key) of each step's kernel for this rank, and whether it is causal."""
        out = [(q, k, True)]
        for i in range(1, cp):
            out.append((q, k.chunk(2, dim=2)[0], False) if i <= rank else (q.chunk(2, dim=2)[1], k, False))
        return out

    saved = {}

    def bare_fwd():
        for j, (qq, kk, causal) in enumerate(steps()):
            saved[j] = aten._scaled_dot_product_flash_attention(qq, kk, kk, is_causal=causal)

    def bare_bwd():
        for j, (qq, kk, causal) in enumerate(steps()):
            o, lse, cq, ck, mq, mk, seed, offset = saved[j][:8]
            aten._scaled_dot_product_flash_attention_backward(do[:, :, :qq.shape[2]], qq, kk, kk, o, lse, cq, ck, mq,
                                                              mk, 0.0, causal, seed, offset)
    return fwd, bwd, bare_fwd, bare_bwd


def main(path, seconds):
    t0 = time.time()
    mod = library()
    patch(mod)
    gpu = torch.cuda.get_device_name(0)
    with open(path, "a") as f:
        for cp in CPS:
            for rank in sorted({0, cp - 1}):
                if time.time() - t0 > seconds:
                    print("time's up")
                    return
                fwd, bwd, bare_fwd, bare_bwd = ring(mod, rank, cp)
                row = {"cp": cp, "rank": rank, "tokens_per_rank": TOKENS, "heads": HEADS, "head_dim": HEAD_DIM,
                       "kernel": "flash", "gpu": gpu, "torch": torch.__version__}
                row["fwd_s"], row["fwd_spread"] = timed(fwd)
                fwd()
                row["bwd_s"], row["bwd_spread"] = timed(bwd)
                row["bare_fwd_s"], _ = timed(bare_fwd)
                bare_fwd()
                row["bare_bwd_s"], _ = timed(bare_bwd)
                # FLOPs of the rank's pairs: half its square causal, then (cp - 1) steps of half the square each
                pairs = TOKENS * TOKENS / 2 * cp
                flops = 4 * pairs * HEAD_DIM * HEADS
                row["fwd_tflops"], row["bwd_tflops"] = flops / row["fwd_s"] / 1e12, 2.5 * flops / row["bwd_s"] / 1e12
                print(json.dumps({k: (round(v, 5) if isinstance(v, float) else v) for k, v in row.items()}))
                f.write(json.dumps(row) + "\n")
                f.flush()
                torch.cuda.empty_cache()


if __name__ == "__main__":
    main(sys.argv[1], float(sys.argv[2]) if len(sys.argv) > 2 else 240.0)
