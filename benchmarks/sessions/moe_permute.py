"""What an MoE layer's token permutation costs on one GPU, kernel by kernel, against the bytes each
kernel must move: the measurement behind the calculators' permutation cost (time/elementwise.py).

    python moe_permute.py OUT.jsonl [part,part,...]   (code: what torch.compile writes)

For T tokens of width h, each sent to K experts (balanced routing, copies in expert order), every
variant is timed forward and forward + backward (CUDA events, median of 20 after 3 warm-ups):
- gather: the K*T copies in expert order, torch.gather on an index expanded over h (torchtitan's
  dispatch) and index_select (Megatron's unfused permute).
- scale: each copy times its routing score, upcast to fp32 and back (torchtitan, Megatron).
- scatter_add / index_add: the combine by atomic adds into the T outputs, bf16 and fp32.
- gather_sum: the combine without atomics: each token gathers its K copies and sums them (what a
  fused unpermute kernel does in one pass).
- index / scatter_add_det: x[idx] (whose backward is index_put_ with accumulate, sorted, no
  atomics) and scatter_add under deterministic algorithms (the same sorted kernel), as torchtitan
  0.3 gathers and combines.
- torchtitan: the eager layer's whole sequence of mid-2025 torchtitan, gather, scale, atomic
  scatter_add, minus the experts; torchtitan_ep: torchtitan 0.3's with expert parallelism 8, x[idx],
  the rank-major to expert-major reorder after the all-to-all and its inverse, scale, the
  deterministic scatter_add (the all-to-alls and the experts left out); torchtitan_compiled: the
  mid-2025 sequence under torch.compile, each shape compiled for itself; the part "code" records
  whether the kernels it writes add atomically.
- router: the gate GEMM, fp32 softmax, top-k, the per-expert histogram and the stable argsort that
  orders the copies (the router of an eager stack, without the auxiliary loss).
Bytes are the minimum each kernel must read and write, so bytes / time is its effective bandwidth.
"""
import json
import sys

import torch

SHAPES = {   # name: (tokens, hidden, top_k, experts)
    "deepseek-v3 T16k": (16384, 7168, 8, 256),
    "qwen3-30b T16k": (16384, 2048, 8, 128),
    "llama4-scout T8k": (8192, 5120, 1, 16),
    "mixtral T16k": (16384, 4096, 2, 8),
}


def timed(fn, args, grad=None, iters=20):
    def once():
        out = fn(*args)
        if grad is not None:
            torch.autograd.grad(out, [a for a in args if a.requires_grad], grad)
    for _ in range(3):
        once()
    times = []
    for _ in range(iters):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        once()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e) / 1e3)
    return sorted(times)[iters // 2]


def variants(T, h, K, E, dev):
    bf = torch.bfloat16
    slot = torch.arange(T * K, device=dev)
    order = torch.argsort(slot % E, stable=True)
    src = order // K                                  # token of each copy, in expert order
    inv = torch.argsort(order)                        # copy position of (token, j)
    idx = src[:, None].expand(-1, h)
    score = torch.rand(T * K, device=dev, dtype=torch.float32)
    x = torch.randn(T, h, device=dev, dtype=bf, requires_grad=True)
    y = torch.randn(T * K, h, device=dev, dtype=bf, requires_grad=True)
    y32 = y.detach().float().requires_grad_()
    n = T * K * h                                     # elements of the copies
    ep = 8 if E % 8 == 0 else 1                       # rank-major (ep, E/ep) segments to expert-major
    perm = torch.arange(T * K, device=dev).view(ep, E // ep, -1).transpose(0, 1).reshape(-1)

    def det_scatter(a):
        torch.use_deterministic_algorithms(True)
        try:
            return torch.zeros(T, h, device=dev, dtype=bf).scatter_add(0, idx, a)
        finally:
            torch.use_deterministic_algorithms(False)

    def titan(a):
        return torch.zeros_like(a).scatter_add(0, idx, (torch.gather(a, 0, idx).float() * score[:, None]).to(bf))

    def titan_ep(a):
        routed = a[src][perm]                          # dispatch, then expert-major after the all-to-all
        back = torch.empty_like(routed)
        back[perm] = routed                            # combine's unpermute before the reverse all-to-all
        return det_scatter((back.float() * score[:, None]).to(bf))
    return {  # name: (fn, args, bytes forward, bytes backward)
        "gather": (lambda a: torch.gather(a, 0, idx), (x,), 4 * n, 4 * n + 2 * T * h),
        "index_select": (lambda a: a.index_select(0, src), (x,), 4 * n, 4 * n + 2 * T * h),
        "scale": (lambda a: (a.float() * score[:, None]).to(bf), (y,), 4 * n, 4 * n),
        "scatter_add": (lambda a: torch.zeros(T, h, device=dev, dtype=bf).scatter_add(0, idx, a), (y,),
                        2 * n + 2 * T * h, 4 * n),
        "scatter_add_fp32": (lambda a: torch.zeros(T, h, device=dev).scatter_add(0, idx, a), (y32,),
                             4 * n + 4 * T * h, 8 * n),
        "index_add": (lambda a: torch.zeros(T, h, device=dev, dtype=bf).index_add(0, src, a), (y,),
                      2 * n + 2 * T * h, 4 * n),
        "gather_sum": (lambda a: a[inv].view(T, K, h).sum(1), (y,), 2 * n + 2 * T * h, 4 * n),
        "index": (lambda a: a[src], (x,), 4 * n, 4 * n + 2 * T * h),
        "scatter_add_det": (det_scatter, (y,), 2 * n + 2 * T * h, 4 * n),
        "torchtitan_ep": (titan_ep, (x,), 34 * n, 34 * n),
        "torchtitan": (titan, (x,), 10 * n, 12 * n),
        "torchtitan_compiled": (torch.compile(titan, dynamic=False), (x,), 4 * n, 6 * n),
    }


def router(T, h, E, K, dev):
    x = torch.randn(T, h, device=dev, dtype=torch.bfloat16, requires_grad=True)
    w = (torch.randn(E, h, device=dev) * h ** -0.5).to(torch.bfloat16).requires_grad_()

    def fn(a, b):
        probs = (a @ b.t()).float().softmax(-1)
        top, sel = torch.topk(probs, K, dim=-1)
        torch.histc(sel.float(), bins=E, min=0, max=E)
        torch.argsort(sel.view(-1), stable=True)
        return top
    return fn, (x, w), torch.randn(T, K, device=dev)


def compiled_code(T, h, K, E, dev) -> dict:
    """Whether the kernels torch.compile writes for the mid-2025 sequence, forward and backward,
    add atomically (Triton's atomic_add), and how many kernels it launches."""
    from torch._inductor.utils import run_and_get_code
    torch._dynamo.reset()
    fn, args, _, _ = variants(T, h, K, E, dev)["torchtitan_compiled"]

    def both(a):
        out = fn(a)
        torch.autograd.grad(out, [a], torch.ones_like(out))
    _, code = run_and_get_code(both, *args)
    text = "\n".join(code)
    return {"atomic_add": text.count("atomic_add"), "kernels": text.count("@triton.jit"), "graphs": len(code)}


def main():
    out, dev = open(sys.argv[1], "a"), torch.device("cuda")
    only = sys.argv[2].split(",") if len(sys.argv) > 2 else None     # a subset of the parts
    for name, (T, h, K, E) in SHAPES.items():
        if only and "code" in only:
            row = {"shape": name, "tokens": T, "hidden": h, "top_k": K, "experts": E, "part": "compiled_code",
                   **compiled_code(T, h, K, E, dev)}
            print(json.dumps(row), file=out, flush=True)
            print(name, row, flush=True)
        torch._dynamo.reset()                 # each shape compiles for itself, not as a dynamic graph
        for part, (fn, args, b_f, b_b) in variants(T, h, K, E, dev).items():
            if only and part not in only:
                continue
            fwd = timed(fn, args)
            res = fn(*args)
            both = timed(fn, args, torch.randn_like(res))
            row = {"shape": name, "tokens": T, "hidden": h, "top_k": K, "experts": E, "part": part,
                   "forward_s": fwd, "backward_s": both - fwd, "bytes_forward": b_f, "bytes_backward": b_b,
                   "fwd_gbps": b_f / fwd / 1e9, "bwd_gbps": b_b / max(both - fwd, 1e-9) / 1e9}
            print(json.dumps(row), file=out, flush=True)
            print(f"{name:18s} {part:17s} fwd {fwd * 1e3:7.3f} ms {row['fwd_gbps']:6.0f} GB/s   "
                  f"bwd {(both - fwd) * 1e3:7.3f} ms {row['bwd_gbps']:6.0f} GB/s", flush=True)
        if only and "router" not in only:
            continue
        fn, args, grad = router(T, h, E, K, dev)
        fwd, both = timed(fn, args), timed(fn, args, grad)
        print(json.dumps({"shape": name, "tokens": T, "hidden": h, "top_k": K, "experts": E, "part": "router",
                          "forward_s": fwd, "backward_s": both - fwd}), file=out, flush=True)
        print(f"{name:18s} router            fwd {fwd * 1e3:7.3f} ms   bwd {(both - fwd) * 1e3:7.3f} ms", flush=True)
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
