"""loss="chunked": Liger-Kernel's fused linear cross-entropy (src/liger_kernel/ops/
fused_linear_cross_entropy.py), which ALST's tiled logits and loss run. Its algorithm, written here
in PyTorch ops: tokens a chunk at a time, the chunk's logits, their cross-entropy and its gradient in
their place, and the input's and the weight's gradients, all in the forward; backward returns
what the forward kept. What it keeps for backward is counted with PyTorch's saved-tensor hooks and
held to the calculators' output-layer activations."""
import math

import pytest
import torch
import torch.nn.functional as F

from calculators.memory.activations import output_layer_activations
from calculators.specs.models import ModelSpec
from calculators.specs.parallel import ParallelConfig
from calculators.specs.kernels import loss_bytes_per_logit


class ChunkedLinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, target):
        T, h = x.shape
        V = weight.shape[0]
        chunk = min(T, 2 ** math.ceil(math.log2(math.ceil(T / math.ceil(V / h)))))   # Liger's chunk_size
        grad_x, grad_w = torch.zeros_like(x), torch.zeros_like(weight)
        total = torch.zeros((), dtype=torch.float32)
        for start in range(0, T, chunk):
            xc = x[start:start + chunk]
            logits = (xc @ weight.t()).float()
            total += F.cross_entropy(logits, target[start:start + chunk], reduction="sum")
            grad = torch.softmax(logits, dim=-1)
            grad[torch.arange(len(xc)), target[start:start + chunk]] -= 1
            grad = (grad / T).to(x.dtype)
            grad_x[start:start + chunk] = grad @ weight
            grad_w += grad.t() @ xc
        ctx.save_for_backward(grad_x, grad_w)
        return total / T

    @staticmethod
    def backward(ctx, grad_output):
        grad_x, grad_w = ctx.saved_tensors
        return grad_x * grad_output, grad_w * grad_output, None


def test_the_algorithm_is_cross_entropy_with_its_gradients():
    torch.manual_seed(0)
    x = torch.randn(64, 16, dtype=torch.float64, requires_grad=True)
    w = torch.randn(40, 16, dtype=torch.float64, requires_grad=True)
    target = torch.randint(0, 40, (64,))
    ChunkedLinearCrossEntropy.apply(x, w, target).backward()
    x2, w2 = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    F.cross_entropy(x2 @ w2.t(), target).backward()
    assert torch.allclose(x.grad, x2.grad) and torch.allclose(w.grad, w2.grad)


@pytest.mark.parametrize("T, h, V", [(512, 64, 1000), (256, 128, 96)])
def test_kept_bytes_are_what_pytorch_saves(T, h, V):
    """The loss keeps no logit: the input's gradient (T x h) and the weight's (V x h), bf16."""
    x = torch.randn(T, h, dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(V, h, dtype=torch.bfloat16, requires_grad=True)
    saved = []

    def pack(t):
        saved.append(t.untyped_storage().nbytes())
        return t
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        ChunkedLinearCrossEntropy.apply(x, w, torch.randint(0, V, (T,)))
    model = ModelSpec(layers=1, hidden=h, heads=4, kv_heads=4, ffn=4 * h, vocab=V)
    chunked = output_layer_activations(model, ParallelConfig(seq=T, gbs=1, loss="chunked"))[0]
    eager = output_layer_activations(model, ParallelConfig(seq=T, gbs=1, loss="eager"))[0]
    norm = 2 * 2 * T * h + 4 * T                 # the final norm's input and output, its rstd: both kernels
    assert chunked - norm == sum(saved) == 2 * T * h + 2 * V * h
    assert eager - norm == 4 * T * V             # the eager loss keeps its fp32 log-softmax


def test_chunked_costs_one_pass_over_the_logits_and_no_backward():
    assert loss_bytes_per_logit("chunked") == ((6.0, 1), (0.0, 0))
