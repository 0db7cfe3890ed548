"""What one harness block saves for backward on a GPU, tensor by tensor (saved-tensor hooks on real
CUDA tensors): under FSDP2's bf16 mixed precision (bf16 weights, no autocast) and under autocast
over fp32 weights (the one-GPU harness), eager and torch.compile'd. Prints bytes per token x hidden
and which autograd node each tensor belongs to.
    python benchmarks/sessions/saved_bytes.py OUTDIR [model] [seq]"""
import json
import sys

import torch

from benchmarks.model import Block, rope_table
from calculators.specs.presets import model_from_name

out = sys.argv[1]
spec = model_from_name(sys.argv[2] if len(sys.argv) > 2 else "llama3-8b")
seq = int(sys.argv[3]) if len(sys.argv) > 3 else 2048
dev = torch.device("cuda")
results = {}
x_norm = torch.randn(4, 8, device=dev, requires_grad=True)
results["rms_norm_grad_fn"] = type(torch.nn.functional.rms_norm(x_norm, (8,), torch.ones(8, device=dev), 1e-5).grad_fn).__name__


def measure(name, dtype, autocast, compiled):
    torch.manual_seed(0)
    block = Block(spec).to(dev, dtype)
    if compiled:
        block = torch.compile(block)
    rope = rope_table(seq, spec.head_dim).to(dev)
    x = torch.randn(1, seq, spec.hidden, device=dev, dtype=torch.bfloat16 if dtype == torch.bfloat16 else torch.float32,
                    requires_grad=True)
    params = {p.untyped_storage().data_ptr() for p in block.parameters()} | {rope.untyped_storage().data_ptr(),
                                                                              x.untyped_storage().data_ptr()}
    for _ in range(2 if compiled else 1):        # compile on the first pass
        seen = {}

        def pack(t):
            ptr = t.untyped_storage().data_ptr()
            if ptr not in params and ptr not in seen:
                seen[ptr] = (t.untyped_storage().nbytes(), list(t.shape), str(t.dtype).replace("torch.", ""))
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
                y = block(x, rope)
        y.float().sum().backward()
    total = sum(v[0] for v in seen.values())
    results[name] = {"bytes_per_token_hidden": total / (seq * spec.hidden), "bytes": total,
                     "tensors": sorted(seen.values(), key=lambda v: -v[0])}
    print(f"{name:28s} {total / 2**20:9.1f} MiB  {total / (seq * spec.hidden):6.2f} B per token x hidden", flush=True)


measure("bf16 weights (fsdp2 MP)", torch.bfloat16, False, False)
measure("fp32 weights + autocast", torch.float32, True, False)
measure("bf16 weights, compiled", torch.bfloat16, False, True)
measure("fp32 + autocast, compiled", torch.float32, True, True)
print("rms_norm grad_fn on CUDA:", results["rms_norm_grad_fn"])
json.dump(results, open(f"{out}/saved_bytes_{spec.name}_{seq}.json", "w"), indent=1)
