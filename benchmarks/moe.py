"""The moe suite: the parts of one mixture-of-experts layer that expert parallelism leaves to
one GPU, timed forward and forward + backward, against the calculators' cost of each part.

For a preset's MoE layer (or the harness's tiny-moe), `tokens` tokens on this GPU and expert
parallelism `ep` (E/ep local experts), with balanced routing (as the forced-balance benchmarks
run; each GPU then receives T*K token copies, ep*T*K/E for each local expert):
- router: the gate's logits (T x h by h x E), softmax in fp32, top-k. The calculators cost the
  GEMM only.
- permute: torchtitan's eager sequence as of mid-2025: the K*T copies of the tokens gathered in
  expert order (torch.gather), each scaled by its routing score through fp32, and summed back into
  its token (atomic scatter_add; torchtitan 0.3 gathers by x[idx] and sums with PyTorch's
  deterministic kernel, both timed in benchmarks/sessions/moe_permute.py); with ep > 1 the copies
  are reordered rank-major to expert-major and back, as torchtitan does around its all-to-alls.
  The scores are fixed here (training also forms their gradient). The calculators:
  elementwise.eager_permute_bytes(score_grad=False) at the HBM rate.
- experts: gate and up as one GEMM of width 2*ffn, SiLU(gate) * up, down; as one grouped GEMM per
  projection (`torch._grouped_mm`, torchtitan's kernel; Megatron's TE GroupedLinear is another
  grouped kernel) and as a loop of per-expert matmuls (an eager stack without a grouped kernel).
  The calculators: compute.gemm_time per local expert on compute.expert_tokens, the activation's
  bytes at the HBM rate.
The dispatch and combine all-to-alls are not here (they need several GPUs: the collectives suite).
On a CPU the suite runs fp32 on small shapes, to check the suite, not to measure anything.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from calculators.specs.errors import ConfigError

from . import host, predict
from .gemm import DTYPES, time_fn, whole_numbers

MOE_DTYPES = ("bf16", "fp32")
CPU_MAX_FLOP = 2e12            # a CPU run is a check of the suite: minutes at most
PARTS = ("router", "permute", "experts", "experts_loop")


def cases(models: str, eps: str, tokens: str, dtypes, iters: int = 10) -> tuple[list[dict], list[str]]:
    """(the cases, a note for each (model, ep, tokens) left out because it does not divide)."""
    for dt in dtypes:
        if dt not in MOE_DTYPES:
            raise ConfigError(f"dtype {dt!r} must be one of {', '.join(MOE_DTYPES)} (FP8 experts are not timed yet)")
    out, skipped = [], []
    for name in (m.strip() for m in models.split(",") if m.strip()):
        spec = predict.moe_model(name)
        if spec.moe is None:
            raise ConfigError(f"model {name!r} has no experts; choose a mixture-of-experts preset")
        e = spec.moe
        for ep in whole_numbers(eps, "--eps", 1 << 16):
            for t in whole_numbers(tokens, "--tokens", 1 << 20):
                per_expert = ep * t * e.top_k / e.experts
                if e.experts % ep or per_expert != int(per_expert):
                    skipped.append(f"{name} ep {ep} tokens {t}: ep must divide the {e.experts} experts and "
                                   f"ep x tokens x {e.top_k} must divide among them evenly")
                    continue
                out += [{"name": f"{name} ep{ep} T{t}", "model": name, "ep": ep, "tokens": t, "dtype": dt,
                         "iters": iters} for dt in dtypes]
    if not out:
        raise ConfigError("no case left: " + "; ".join(skipped))
    return out, skipped


def _routing(tokens: int, k: int, experts: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Balanced routing: token t's j-th copy to expert (t*K + j) mod E; (the copies' token indices
    in expert order, their routing weights)."""
    slot = torch.arange(tokens * k, device=device)
    order = torch.argsort(slot % experts, stable=True)
    return order // k, torch.full((tokens * k,), 1.0 / k, device=device)


def eager_permute(x: torch.Tensor, idx: torch.Tensor, score: torch.Tensor, reorder=None) -> torch.Tensor:
    """torchtitan's eager permutation and combine, the experts left out: x's rows gathered as
    copies in expert order (idx: each copy's token, expanded over the hidden dimension), with
    expert parallelism reordered rank-major to expert-major and back (`reorder`), each copy scaled
    by its routing score through fp32 and summed back into its token."""
    copies = torch.gather(x, 0, idx)
    if reorder is not None:
        copies = copies[reorder]
        back = torch.empty_like(copies)
        back[reorder] = copies
        copies = back
    return torch.zeros_like(x).scatter_add(0, idx, (copies.float() * score[:, None]).to(x.dtype))


def _swiglu(a: torch.Tensor) -> torch.Tensor:
    gate, up = a.chunk(2, dim=-1)
    return F.silu(gate) * up


def _timed(fn, inputs, grad, iters, device) -> tuple[float, float]:
    """(forward seconds, forward + backward seconds) of fn(*inputs)."""
    def forward(_):
        with torch.no_grad():
            fn(*inputs)

    def both(_):
        torch.autograd.grad(fn(*inputs), inputs, grad)

    return time_fn(forward, 1, iters, device), time_fn(both, 1, iters, device)


def measure(case: dict, g: host.Grid, device: torch.device) -> tuple[dict, dict]:
    spec = predict.moe_model(case["model"])
    e, h, dtype = spec.moe, spec.hidden, DTYPES[case["dtype"]]
    if device.type == "cpu" and dtype != torch.float32:
        raise ConfigError("on CPU run fp32 (--dtypes fp32): bf16 CPU kernels say nothing about GPUs")
    T, ep, K, E, f = case["tokens"], case["ep"], e.top_k, e.experts, e.expert_ffn
    local, n = E // ep, ep * T * K // E
    iters = case.get("iters", 10)
    if device.type == "cpu":
        work = 2 * local * n * 3 * f * h * 3 * (2 * iters + 2)        # the experts' GEMMs, fwd + bwd, both kernels
        if work > CPU_MAX_FLOP:
            raise ConfigError(f"{case['name']}: about {work / 1e12:,.0f} TFLOP of expert GEMMs, hours on a CPU "
                              f"(the limit on a CPU is {CPU_MAX_FLOP / 1e12:g} TFLOP); check the suite there with "
                              "--models tiny-moe --eps 2 --tokens 64, or time it on a GPU")

    def leaf(*shape, scale=1.0):
        return (torch.randn(*shape, device=device, dtype=torch.float32) * scale).to(dtype).requires_grad_()

    x, gate = leaf(T, h), leaf(E, h, scale=h ** -0.5)
    # stored (out, in) per expert as nn.Linear and torchtitan's GroupedExperts keep them; the
    # products read them transposed (column-major, as the grouped kernel takes its second operand)
    w1, w2 = leaf(local, 2 * f, h, scale=h ** -0.5), leaf(local, h, f, scale=f ** -0.5)
    xs = leaf(local * n, h)                                  # the copies this GPU receives, in expert order
    src, weight = _routing(T, K, E, device)
    offs = torch.arange(1, local + 1, device=device, dtype=torch.int32) * n

    def router(x_, gate_):
        logits = x_ @ gate_.t()
        probs, _ = torch.topk(logits.float().softmax(dim=-1), K, dim=-1)
        return probs

    idx = src[:, None].expand(-1, h)
    reorder = torch.arange(T * K, device=device).view(ep, local, -1).transpose(0, 1).reshape(-1)

    def permute(x_):
        return eager_permute(x_, idx, weight, reorder if ep > 1 else None)

    def grouped(xs_, w1_, w2_):
        a = torch._grouped_mm(xs_, w1_.transpose(-2, -1), offs=offs)
        return torch._grouped_mm(_swiglu(a), w2_.transpose(-2, -1), offs=offs)

    def loop(xs_, w1_, w2_):
        return torch.cat([_swiglu(xs_[i * n:(i + 1) * n] @ w1_[i].t()) @ w2_[i].t() for i in range(local)])

    out = {}
    out["router"] = _timed(router, (x, gate), torch.randn(T, K, device=device), iters, device)
    out["permute"] = _timed(permute, (x,), torch.randn_like(x), iters, device)
    grad = torch.randn_like(xs)
    out["experts_loop"] = _timed(loop, (xs, w1, w2), grad, iters, device)
    metrics = {"model": case["model"], "ep": ep, "tokens": T, "dtype": case["dtype"], "local_experts": local,
               "tokens_per_expert": n, "hidden": h, "expert_ffn": f, "top_k": K, "grouped_error": ""}
    try:
        with torch.no_grad():          # the two kernels round differently: compare the whole output
            ours, ref = grouped(xs, w1, w2).float(), loop(xs, w1, w2).float()
            off = ((ours - ref).norm() / ref.norm()).item()
        if not off < 1e-2:
            raise RuntimeError(f"its output differs from the per-expert loop's by {off:.2g} (relative norm)")
        out["experts"] = _timed(grouped, (xs, w1, w2), grad, iters, device)
    except RuntimeError as exc:                 # no grouped kernel for this device or dtype
        metrics["grouped_error"] = str(exc).splitlines()[0][:200]
    expert_flops = 6.0 * local * n * h * f      # forward: 2*n*h*2f + 2*n*f*h per expert
    for part, (fwd, both) in out.items():
        metrics[f"{part}_forward_s"], metrics[f"{part}_s"] = fwd, both
    for part in ("experts", "experts_loop"):
        if part in out:
            metrics[f"{part}_tflops"] = 3 * expert_flops / out[part][1] / 1e12
    hw = host.hardware(device, g)
    return metrics, predict.moe(case["model"], ep, T, case["dtype"], hw)
