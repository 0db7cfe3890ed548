"""The eager loss over the logits (fp32 upcast, F.cross_entropy), as Hugging Face's models and an
uncompiled torchtitan run it: its bytes from PyTorch's trace, and the GPU time our H200 took for it
(call 24, benchmarks/sessions/hf_loss.py), which kernels.loss_bytes_per_logit("eager") takes."""
import json
import pathlib

import pytest
import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode

from calculators.specs.hardware import gpu_from_name
from calculators.specs.kernels import loss_bytes_per_logit
from calculators.time.compute import memory_time
from calculators.time.profiles import default_profile
from tests.calculators.reference_eager import _Bytes

DATA = pathlib.Path(__file__).parents[2] / "validation" / "data" / "h100_harness" / "hf_loss_h200.jsonl"


def test_the_eager_loss_moves_its_traced_bytes_at_about_the_streaming_rate():
    with FakeTensorMode():
        logits = torch.randn(256, 4096, dtype=torch.bfloat16, requires_grad=True)
        labels = torch.randint(0, 4096, (256,))
        with _Bytes() as fwd:
            loss = F.cross_entropy(logits.float(), labels)
        with _Bytes() as bwd:
            loss.backward()
    traced = fwd.bytes / logits.numel(), bwd.bytes / logits.numel()
    assert traced == (pytest.approx(18, abs=0.01), pytest.approx(26, abs=0.01))
    rows = [json.loads(line) for line in DATA.read_text().splitlines()]
    assert len(rows) == 3
    gpu = gpu_from_name("H200-141GB")
    rate = 1e12 / memory_time(1e12, 1, gpu, default_profile(gpu.name))     # the calculators' streaming rate
    for r in rows:
        logits_n = r["tokens"] * r["vocab"]
        forward = r["fwd_rest_s"] * rate / logits_n
        backward = (r["rest_s"] - r["fwd_rest_s"]) * rate / logits_n
        # forward: the upcast's copy kernel and the softmax took longer than their bytes (25 against 18);
        # backward about the trace (24 against 26)
        assert 1.3 < forward / traced[0] < 1.5 and 0.85 < backward / traced[1] < 1.0, (r, forward, backward)
        # the calculators' counts: taken from Llama 3.2 1B at 16,384 tokens, the others held out
        (f, _), (b, _) = loss_bytes_per_logit("eager")
        bound = 0.02 if (r["model"], r["tokens"]) == ("llama3.2-1b", 16384) else 0.08
        assert forward == pytest.approx(f, rel=bound) and backward == pytest.approx(b, rel=bound), r
