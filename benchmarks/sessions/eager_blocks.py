"""The eager element-wise work of the PyTorch-native stacks' Llama blocks on one GPU: torchtitan's
(nn.RMSNorm, complex RoPE in fp32) and Hugging Face's (LlamaRMSNorm upcasting to fp32, rotate_half
RoPE), the blocks of tests/calculators/reference_eager.py whose bytes the calculators count from
PyTorch's trace (calculators/time/elementwise.py's EAGER table). torchtitan's runs in two forms:
TitanBlock with PyTorch's nn.RMSNorm (one fused kernel on a GPU since PyTorch 2.8) and
TitanBlockComposite with the composite norm that PyTorch 2.7 and earlier ran, which EAGER counts.

    PYTHONPATH=. python benchmarks/sessions/eager_blocks.py OUT.jsonl [compiled]

`compiled` runs torch.compile'd blocks instead (Inductor's fused kernels: the FUSED table's case),
torchtitan's at two shapes and Hugging Face's at one.

Each block runs forward + backward (the gradients of its input and weights returned, as a first
micro-batch's are), and the forward alone, under torch.profiler, 5 times after a warm-up; each row
gives the GPU time of its kernels by kind (fwd_: the forward's): GEMMs, attention, and the rest
(norms, RoPE, SiLU and product, residual adds, casts, the norms' weight-gradient reductions), with
the rest's kernels by name. A device-to-device copy gives the streaming rate beside them.
"""
import json
import sys

import torch

from tests.calculators.reference_eager import HFBlock, TitanBlock, TitanBlockComposite
from timing import kernel_times

SHAPES = {"llama3-8b": (4096, 32, 8, 14336, 128), "llama3.2-1b": (2048, 32, 8, 8192, 64)}
CASES = (("llama3-8b", 8192), ("llama3-8b", 4096), ("llama3.2-1b", 16384))
GEMM = ("gemm", "nvjet", "sm90_", "sm100_", "cutlass", "xmma", "cublas")
ATTENTION = ("flash", "fmha", "attention", "cudnn")


def kind(name: str) -> str:
    low = name.lower()
    if any(k in low for k in ATTENTION):
        return "attention"
    return "gemm" if any(k in low for k in GEMM) else "rest"


def by_kind(fn, runs=5, prefix="") -> dict:
    """fn's kernels' GPU seconds per run by kind ({prefix}gemm_s, attention_s, rest_s) and the rest's
    by kernel name ({prefix}rest_by_kernel_us), under torch.profiler."""
    by = kernel_times(fn, runs)
    row = {f"{prefix}{k}_s": 0.0 for k in ("gemm", "attention", "rest")}
    for k, t in by.items():
        row[f"{prefix}{kind(k)}_s"] += t
    row[f"{prefix}rest_by_kernel_us"] = {k: round(t * 1e6, 1) for k, t in sorted(by.items(), key=lambda kv: -kv[1])
                                         if kind(k) == "rest"}
    return row


def run_case(cls, name, seq, gpu, compiled=False):
    h, heads, kv, ffn, d = SHAPES[name]
    block = cls(h, heads, kv, ffn, d).cuda().to(torch.bfloat16)
    run = torch.compile(block, dynamic=False) if compiled else block
    x = torch.randn(1, seq, h, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    tables = block.tables(seq)
    tables = tuple(t.cuda() for t in tables) if isinstance(tables, tuple) else tables.cuda()
    params = list(block.parameters())
    grad = torch.randn_like(x)

    def step():
        torch.autograd.grad(run(x, tables), [x] + params, grad)

    def forward():
        run(x, tables)
    row = {"block": cls.__name__, "model": name, "seq": seq, "batch": 1, "gpu": gpu, "torch": torch.__version__,
           "compiled": compiled}
    for way, fn in (("", step), ("fwd_", forward)):
        row.update(by_kind(fn, prefix=way))
    return row


COMPILED = ((TitanBlock, "llama3-8b", 8192), (HFBlock, "llama3-8b", 8192), (TitanBlock, "llama3.2-1b", 16384))


def main(path, compiled=False):
    gpu = torch.cuda.get_device_name(0)
    todo = COMPILED if compiled else [(cls, name, seq) for name, seq in CASES
                                      for cls in (TitanBlockComposite, TitanBlock, HFBlock)]
    with open(path, "a") as f:
        for cls, name, seq in todo:
            row = run_case(cls, name, seq, gpu, compiled)
            print(json.dumps({k: v for k, v in row.items() if not k.endswith("by_kernel_us")}))
            f.write(json.dumps(row) + "\n")
            f.flush()
            torch.cuda.empty_cache()
        src = torch.randn(8192, 14336, device="cuda", dtype=torch.bfloat16)
        dst = torch.empty_like(src)
        dst.copy_(src)
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(20):
            dst.copy_(src)
        end.record()
        torch.cuda.synchronize()
        s = start.elapsed_time(end) / 20 / 1e3
        row = {"part": "copy", "bytes": 2 * src.numel() * 2, "s": s, "gbps": 4 * src.numel() / s / 1e9, "gpu": gpu}
        print(json.dumps(row))
        f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main(sys.argv[1], len(sys.argv) > 2 and sys.argv[2] == "compiled")
