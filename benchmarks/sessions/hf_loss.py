"""The output layer and loss as Hugging Face's LlamaForCausalLM runs them (lm_head in bf16, then
the loss function's fp32 upcast of the logits and F.cross_entropy), forward + backward and forward
alone under torch.profiler on one GPU: GPU time of the GEMMs and of the rest (the loss's passes),
against the calculators' output GEMM and kernels.loss_bytes_per_logit("eager").

    PYTHONPATH=. python benchmarks/sessions/hf_loss.py OUT.jsonl
"""
import json
import sys

import torch
import torch.nn.functional as F

from eager_blocks import by_kind

CASES = (("llama3.2-1b", 2048, 128256, 16384), ("llama3.2-1b", 2048, 128256, 4096), ("llama3-8b", 4096, 128256, 8192))


def run_case(name, hidden, vocab, tokens, gpu):
    h = torch.randn(tokens, hidden, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    w = (torch.randn(vocab, hidden, device="cuda") * hidden ** -0.5).to(torch.bfloat16).requires_grad_()
    labels = torch.randint(0, vocab, (tokens,), device="cuda")

    def forward():
        return F.cross_entropy((h @ w.t()).float(), labels)

    def step():
        torch.autograd.grad(forward(), [h, w])
    row = {"model": name, "hidden": hidden, "vocab": vocab, "tokens": tokens, "gpu": gpu, "torch": torch.__version__}
    for way, fn in (("", step), ("fwd_", forward)):
        row.update(by_kind(fn, prefix=way))
    return row


def main(path):
    gpu = torch.cuda.get_device_name(0)
    with open(path, "a") as f:
        for case in CASES:
            row = run_case(*case, gpu)
            print(json.dumps({k: v for k, v in row.items() if not k.endswith("by_kernel_us")}))
            f.write(json.dumps(row) + "\n")
            f.flush()
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main(sys.argv[1])
