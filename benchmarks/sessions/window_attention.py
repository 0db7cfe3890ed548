"""Sliding-window attention on one GPU against the causal kernel it is costed as: the measurement
behind calculators.time.attention's windowed layers.

    python window_attention.py OUT.jsonl [seconds] [sweep|sink|sink-held|flex]

Kernels, each timed forward and backward (CUDA events, median of 5 batches of back-to-back calls
after a warm-up):
- cudnn: cuDNN's fused attention through cudnn-frontend's graph API, the path Transformer Engine
  takes (a diagonal band: right bound 0, left bound W, so each query sees itself and the W - 1
  keys before it); W = none is the plain causal mask on the same path.
- sdpa-cudnn: the causal kernel through PyTorch's scaled_dot_product_attention (the path of our
  earlier attention rows), to tie this run to them.
- flex: PyTorch's FlexAttention (torch.compile'd, a block mask of the same band), what torchtitan
  runs for windowed layers.
Shapes: head dim 64 with 64 query and 8 kv heads (gpt-oss), head dim 128 with 32 and 8; 32,768
tokens a batch (batch = 32768 / seq); bf16. FLOPs count the pairs a query attends to (min(i, W)
keys at position i), 2 (d_qk + d_v) per pair per head forward, 2.5 times that backward: the
calculators' convention (flops.attention_flops) and cudnn-frontend's benchmark's.
`sink` times cuDNN with and without gpt-oss's learnable softmax (a per-head sink logit added to each
softmax's denominator, Transformer Engine's softmax_type "learnable", which only its cuDNN backend
runs), both in the same call, windowed and causal; its check compares the sink's gradient too.
`sink-held` does the same at shapes the sink's cost was not fitted on (other lengths and windows).
`flex` times FlexAttention and the SDPA causal kernel again (the sweep's first version accumulated
their gradients into .grad, about 1 GB more traffic a backward, and timed that too).
Before timing, one band case of each kernel is checked against a float32 reference on a slice of
its heads (forward output and the three gradients).
"""
import json
import math
import sys
import time

import torch
import torch.nn.functional as F

from timing import timed

TOKENS = 32768
SHAPES = {64: (64, 8), 128: (32, 8)}          # head dim: (query heads, kv heads)
SEQS = (4096, 8192, 32768)
WINDOWS = (128, None, 1024, 256, 512, 2048, 4096)   # None: causal; most wanted first


def pairs(seq, window):
    """Query-key pairs one head attends to: seq(seq+1)/2 causal, min(i, W) summed over positions."""
    if window is None or window >= seq:
        return seq * (seq + 1) // 2
    return window * (window + 1) // 2 + (seq - window) * window


def tensors(seq, head_dim, grad=False):
    heads, kv = SHAPES[head_dim]
    b = max(1, TOKENS // seq)
    # (b, h, s, d) views of (b, s, h, d) storage, as Transformer Engine hands them to cuDNN
    q, k, v, do = (torch.randn(b, seq, n, head_dim, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
                   for n in (heads, kv, kv, heads))
    if grad:
        for t in (q, k, v):
            t.requires_grad_(True)
    return q, k, v, do


def reference(q, k, v, do, window, sink=None, batches=1):
    """Float32 attention over the band on query heads 0-7 and kv head 0 (one GQA group) of the first
    `batches` sequences: (o, dq, dk, dv, dsink); with `sink` (per query head), each softmax's
    denominator also holds exp(sink), and dsink is its gradient (else None)."""
    q, k, v = (t[:batches, :8 if t.shape[1] > 8 else 1].float().detach().requires_grad_(True) for t in (q, k, v))
    s = q.shape[2]
    i = torch.arange(s, device="cuda")
    band = (i[:, None] >= i[None, :]) & ((i[:, None] - i[None, :] < window) if window else True)
    if sink is None:
        o = F.scaled_dot_product_attention(q, k.expand_as(q), v.expand_as(q), attn_mask=band)
    else:
        scores = (q @ k.expand_as(q).transpose(-1, -2) / math.sqrt(q.shape[-1])).masked_fill(~band, float("-inf"))
        sink = sink[:, :8].float().detach().requires_grad_(True)
        sinks = sink.expand(batches, -1, s, 1)
        o = torch.softmax(torch.cat([scores, sinks], -1), -1)[..., :-1] @ v.expand_as(q)
    o.backward(do[:batches, :8].float())
    return o.detach(), q.grad, k.grad, v.grad, (None if sink is None else sink.grad)


def rel(x, ref):
    return float((x.float() - ref).norm() / ref.norm())


class Cudnn:
    name = "cudnn"

    def __init__(self, sink=False):
        import cudnn
        self.cudnn, self.sink = cudnn, sink
        self.name = "cudnn-sink" if sink else "cudnn"
        self.version = f"frontend {cudnn.__version__}, backend {cudnn.backend_version()}"

    def build(self, q, k, v, do, window):
        c = self.cudnn
        o = torch.empty_like(q)
        stats = torch.empty(q.shape[0], q.shape[1], q.shape[2], 1, device="cuda", dtype=torch.float32)
        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        scale = 1.0 / math.sqrt(q.shape[-1])
        band = dict(diagonal_alignment=c.diagonal_alignment.TOP_LEFT, diagonal_band_right_bound=0,
                    diagonal_band_left_bound=window)
        gf = c.pygraph(io_data_type=c.data_type.BFLOAT16, intermediate_data_type=c.data_type.FLOAT,
                       compute_data_type=c.data_type.FLOAT)
        tq, tk, tv = gf.tensor_like(q), gf.tensor_like(k), gf.tensor_like(v)
        fwd_sink = bwd_sink = {}
        if self.sink:
            sink = torch.randn(1, q.shape[1], 1, 1, device="cuda", dtype=torch.float32)
            self.sink_value, self.dsink_value = sink, torch.empty_like(sink)
            dsink = self.dsink_value
            fwd_sink = {"sink_token": gf.tensor_like(sink)}
        to, ts = gf.sdpa(q=tq, k=tk, v=tv, generate_stats=True, attn_scale=scale, **band, **fwd_sink)
        to.set_output(True).set_dim(o.size()).set_stride(o.stride())
        ts.set_output(True).set_dim(stats.size()).set_stride(stats.stride()).set_data_type(c.data_type.FLOAT)
        gb = c.pygraph(io_data_type=c.data_type.BFLOAT16, intermediate_data_type=c.data_type.FLOAT,
                       compute_data_type=c.data_type.FLOAT)
        bq, bk, bv, bo, bdo = (gb.tensor_like(t) for t in (q, k, v, o, do))
        bs = gb.tensor_like(stats)
        if self.sink:
            bwd_sink = {"sink_token": gb.tensor_like(sink), "dSink_token": gb.tensor_like(dsink)}
        gq, gk, gv = gb.sdpa_backward(q=bq, k=bk, v=bv, o=bo, dO=bdo, stats=bs, attn_scale=scale, **band, **bwd_sink)
        if self.sink:
            bwd_sink["dSink_token"].set_output(True)
        for t, x in ((gq, dq), (gk, dk), (gv, dv)):
            t.set_output(True).set_dim(x.size()).set_stride(x.stride())
        for g in (gf, gb):
            g.validate()
            g.build_operation_graph()
            g.create_execution_plans([c.heur_mode.A, c.heur_mode.FALLBACK])
            g.check_support()
            g.build_plans()
        ws = torch.empty(max(gf.get_workspace_size(), gb.get_workspace_size()), device="cuda", dtype=torch.uint8)
        fwd_pack = {tq: q, tk: k, tv: v, to: o, ts: stats}
        bwd_pack = {bq: q, bk: k, bv: v, bo: o, bdo: do, bs: stats, gq: dq, gk: dk, gv: dv}
        if self.sink:
            fwd_pack[fwd_sink["sink_token"]] = sink
            bwd_pack.update({bwd_sink["sink_token"]: sink, bwd_sink["dSink_token"]: dsink})
        fwd = lambda: gf.execute(fwd_pack, ws)       # noqa: E731
        bwd = lambda: gb.execute(bwd_pack, ws)       # noqa: E731
        return fwd, bwd, lambda: (o, dq, dk, dv)

    def run(self, seq, head_dim, window):
        q, k, v, do = tensors(seq, head_dim)
        fwd, bwd, out = self.build(q, k, v, do, window)
        return fwd, bwd, (q, k, v, do), out


class SdpaCudnn:
    name = "sdpa-cudnn"
    version = f"torch {torch.__version__}, cudnn {torch.backends.cudnn.version()}"

    def run(self, seq, head_dim, window):
        from torch.nn.attention import SDPBackend, sdpa_kernel
        if window is not None:
            raise ValueError("causal only")
        q, k, v, do = tensors(seq, head_dim, grad=True)
        box = {}

        def fwd():
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                box["o"] = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)

        def both():             # the gradients returned, not accumulated into .grad
            fwd()
            box["grads"] = torch.autograd.grad(box["o"], (q, k, v), do)
        return fwd, both, (q, k, v, do), None


class Flex:
    name = "flex"
    version = f"torch {torch.__version__}"

    def __init__(self):
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
        torch._dynamo.config.cache_size_limit = 64
        self.create_block_mask, self.flex = create_block_mask, torch.compile(flex_attention, dynamic=False)

    def run(self, seq, head_dim, window):
        q, k, v, do = tensors(seq, head_dim, grad=True)
        w = window or seq

        def band(b, h, qi, ki):
            return (qi >= ki) & (qi - ki < w)
        try:          # compiled, so that 32k x 32k is never materialised
            mask = self.create_block_mask(band, None, None, seq, seq, device="cuda", _compile=True)
        except TypeError:
            mask = self.create_block_mask(band, None, None, seq, seq, device="cuda")
        box = {}

        def fwd():
            box["o"] = self.flex(q, k, v, block_mask=mask, enable_gqa=True)

        def both():             # the gradients returned, not accumulated into .grad
            fwd()
            box["grads"] = torch.autograd.grad(box["o"], (q, k, v), do)
        return fwd, both, (q, k, v, do), lambda: (box["o"], *box["grads"])


def check(kernel, window=128, seq=4096, head_dim=64):
    fwd, bwd, (q, k, v, do), out = kernel.run(seq, head_dim, window)
    fwd()
    bwd()
    torch.cuda.synchronize()
    o, dq, dk, dv = out()
    sink = getattr(kernel, "sink", False)
    nb = q.shape[0] if sink else 1              # the sink's gradient sums over every sequence
    ref = reference(q, k, v, do, window, kernel.sink_value if sink else None, batches=nb)
    got = (o[:nb, :8], dq[:nb, :8], dk[:nb, :1], dv[:nb, :1])
    errs = {name: rel(x, r) for name, x, r in zip(("o", "dq", "dk", "dv"), got, ref)}
    if not sink:
        errs["o_if_one_key_more"] = rel(got[0], reference(q, k, v, do, window + 1)[0])   # the band's edge, told apart
    else:
        errs["dsink"] = rel(kernel.dsink_value[:, :8], ref[4])
        errs["o_without_sink"] = rel(got[0], reference(q, k, v, do, window, batches=nb)[0])
    return errs


SINK_CASES = ((64, 4096), (64, 32768), (128, 8192))   # (head dim, seq), each windowed at 128 and causal
# (head dim, seq, window): none of them among SINK_CASES' pairs, for a check of the fitted constant
SINK_HELD = ((64, 8192, 1024), (64, 16384, 128), (64, 16384, None), (128, 32768, 128), (128, 4096, 512))


def main(path, seconds, which="sweep"):
    t0 = time.time()
    gpu = torch.cuda.get_device_name(0)
    kernels = []
    sinks = (Cudnn, lambda: Cudnn(sink=True))
    makers = {"sink": sinks, "sink-held": sinks, "flex": (lambda: Cudnn(sink=True), SdpaCudnn, Flex)}.get(
        which, (Cudnn, SdpaCudnn, Flex))
    for make in makers:
        try:
            kernels.append(make())
        except Exception as e:                     # noqa: BLE001 - record and go on without it
            print(f"{getattr(make, 'name', 'cudnn-sink')}: unavailable: {e!r}")
    with open(path, "a") as f:
        for kernel in kernels:
            if kernel.name == "sdpa-cudnn":
                continue
            try:
                errs = check(kernel)
                print(f"check {kernel.name}: {errs}")
                f.write(json.dumps({"check": kernel.name, "window": 128, "seq": 4096, "head_dim": 64,
                                    "rel_err": errs, "gpu": gpu}) + "\n")
            except Exception as e:                 # noqa: BLE001
                print(f"check {kernel.name} failed: {e!r}")
        plan = [(kn, hd, s, w) for flex in (False, True) for hd in SHAPES for s in SEQS for kn in kernels
                for w in WINDOWS if (kn.name == "flex") == flex and (w is None or w < s)
                and (kn.name != "sdpa-cudnn" or w is None)
                and (not flex or (hd == 64 and s in (4096, 32768) and w in (128, 1024, None)))]
        if which == "sink":
            plan = [(kn, hd, s, w) for hd, s in SINK_CASES for w in (128, None) for kn in kernels]
        if which == "sink-held":
            plan = [(kn, hd, s, w) for hd, s, w in SINK_HELD for kn in kernels]
        if which == "flex":      # FlexAttention again, its gradients returned rather than accumulated
            plan = [(kn, 64, s, w) for s in (4096, 32768) for kn in kernels if kn.name != "cudnn-sink"
                    for w in ((128, 1024, None) if kn.name == "flex" else (None,))]
        print(f"{len(plan)} cases, {seconds} s")
        for kernel, hd, seq, window in plan:
            if time.time() - t0 > seconds:
                print("time's up")
                break
            heads, kv = SHAPES[hd]
            row = {"kernel": kernel.name, "version": kernel.version, "gpu": gpu, "seq": seq, "window": window,
                   "head_dim": hd, "heads": heads, "kv_heads": kv, "batch": max(1, TOKENS // seq)}
            try:
                fwd, bwd, _, _ = kernel.run(seq, hd, window)
                row["fwd_s"], row["fwd_spread"] = timed(fwd)
                if isinstance(kernel, Cudnn):
                    fwd()
                    row["bwd_s"], row["bwd_spread"] = timed(bwd)
                else:
                    both, row["both_spread"] = timed(bwd)
                    row["bwd_s"] = both - row["fwd_s"]
                flops = 2 * pairs(seq, window) * 2 * hd * row["batch"] * heads
                row["fwd_tflops"] = flops / row["fwd_s"] / 1e12
                row["bwd_tflops"] = 2.5 * flops / row["bwd_s"] / 1e12
                print(f"{kernel.name:10} hd{hd} s{seq:6} w{window!s:5} fwd {row['fwd_s'] * 1e3:8.3f} ms "
                      f"{row['fwd_tflops']:6.0f} TF  bwd {row['bwd_s'] * 1e3:8.3f} ms {row['bwd_tflops']:6.0f} TF")
            except Exception as e:                 # noqa: BLE001
                row["error"] = repr(e)[:300]
                print(f"{kernel.name} hd{hd} s{seq} w{window}: {row['error']}")
            f.write(json.dumps(row) + "\n")
            f.flush()
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main(sys.argv[1], float(sys.argv[2]) if len(sys.argv) > 2 else 280.0, sys.argv[3] if len(sys.argv) > 3 else "sweep")
