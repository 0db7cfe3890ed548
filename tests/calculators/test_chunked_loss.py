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
    norm = 2 * T * h + 4 * T                     # the final norm's input and its rstd
    assert chunked - norm == sum(saved) == 2 * T * h + 2 * V * h     # not the norm's output: no GEMM reads it later
    assert eager - norm - 2 * T * h == 4 * T * V  # the output GEMM's input, the eager loss's fp32 log-softmax
    # under autocast over fp32 weights (fsdp2 at ZeRO 0) the gradients take the fp32 weight's and input's dtype
    fp32 = output_layer_activations(model, ParallelConfig(seq=T, gbs=1, loss="chunked", framework="fsdp2"))[0]
    assert fp32 - output_layer_activations(model, ParallelConfig(seq=T, gbs=1, loss="chunked",
                                                                 framework="fsdp2", zero=3))[0] == 2 * T * h + 2 * V * h


def test_chunked_costs_one_pass_over_the_logits_and_its_gemms_in_the_forward():
    """All three GEMMs run in Liger's forward, the weight's gradient a chunk at a time (K = the chunk's
    tokens, each adding into the V x h accumulator: slower than one GEMM over every token); backward
    only scales what it kept, and not at all for a loss gradient of 1 (one micro-batch a step)."""
    from calculators.specs.hardware import gpu_from_name
    from calculators.specs.kernels import liger_chunk
    from calculators.specs.presets import model_from_name
    from calculators.time.compute import gemm_time, output_layer_time
    from calculators.time.profiles import default_profile
    assert loss_bytes_per_logit("chunked") == ((6.0, 1), (0.0, 0))
    assert liger_chunk(8192, 128256, 4096) == 256 and liger_chunk(100, 1000, 4096) == 100
    gpu, model = gpu_from_name("H100-80GB"), model_from_name("llama3-8b")
    profile = default_profile(gpu.name)
    f, b, w = output_layer_time(model, ParallelConfig(seq=8192, gbs=1, loss="chunked"), gpu, profile)
    fe, be, we = output_layer_time(model, ParallelConfig(seq=8192, gbs=1, loss="compiled"), gpu, profile)
    one = gemm_time(8192, model.vocab, model.hidden, gpu, profile)
    assert (b, w) == (0.0, 0.0) and we == one
    assert f > fe + be - one + 0.5 * one          # the chunked weight gradient costs more than one GEMM
    assert output_layer_time(model, ParallelConfig(seq=8192, gbs=2, loss="chunked"), gpu, profile)[1] > 0


def test_chunked_refuses_a_tensor_parallel_output_layer():
    from calculators.memory.estimate import estimate_memory
    from calculators.specs.errors import ConfigError
    from calculators.specs.hardware import ClusterSpec, gpu_from_name
    from calculators.specs.presets import model_from_name
    with pytest.raises(ConfigError, match="loss chunked"):
        estimate_memory(model_from_name("llama3-8b"), ClusterSpec(gpu_from_name("H100-80GB"), 1, 8),
                        ParallelConfig(dp=4, tp=2, sp=True, gbs=4, loss="chunked"))
