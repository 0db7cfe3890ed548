"""Memory through a step: the phases' roles follow what PyTorch itself allocates (a real training
loop on CPU, roles counted phase by phase), and the second step's backward is the estimate's peak."""
import weakref

import pytest
import torch

from calculators.specs.hardware import ClusterSpec, gpu_from_name
from calculators.memory.estimate import estimate_memory
from calculators.specs.parallel import ParallelConfig
from calculators.specs.presets import model_from_name
from calculators.time.timeline import step_timeline

ROLES = ("gradients", "Adam moments", "activations")


def measured_phases() -> list[tuple[str, dict]]:
    """Which of gradients, Adam moments and saved activations exist at each phase of two steps of
    AdamW with zero_grad(set_to_none=True), PyTorch's default (FSDP2's layout). Saved activations
    are the tensors autograd saved for backward (not parameters) and still alive."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 64))
    opt = torch.optim.AdamW(model.parameters())
    params = {p.data_ptr() for p in model.parameters()}
    saved, phases = [], []

    def pack(t):
        if t.data_ptr() not in params:
            saved.append(weakref.ref(t))
        return t

    def roles():
        return {"gradients": sum(p.grad.numel() for p in model.parameters() if p.grad is not None),
                "Adam moments": sum(t.numel() for s in opt.state.values() for k, t in s.items() if k != "step"),
                "activations": sum(r().numel() for r in saved if r() is not None)}

    phases.append(("init", roles()))
    for step in (1, 2):
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            out = model(torch.randn(8, 64))
            # fires first in backward, before any layer's: every activation saved, no gradient yet
            out.register_hook(lambda g, step=step: phases.append((f"step {step} backward peak", roles())))
            loss = out.square().mean()
        phases.append((f"step {step} forward peak", roles()))
        loss.backward()
        del loss, out
        phases.append((f"step {step} backward end", roles()))
        opt.step()
        phases.append((f"step {step} optimizer", roles()))
        opt.zero_grad(set_to_none=True)
    return phases


def test_phases_hold_the_roles_pytorch_allocates():
    par = ParallelConfig(dp=8, zero=3, gbs=8, seq=4096, framework="fsdp2")
    est = estimate_memory(model_from_name("llama3-8b"), ClusterSpec(gpu_from_name("H100-80GB"), nodes=1), par)
    predicted = step_timeline(est, par)
    measured = dict(measured_phases())
    assert [p for p, _ in predicted] == ["init", "step 1 forward peak", "step 1 backward end", "step 1 optimizer",
                                         "step 2 forward peak", "step 2 backward peak", "step 2 optimizer"]
    for phase, gib in predicted:
        present = {r: gib[r] > 0 for r in ROLES}
        assert present == {r: measured[phase][r] > 0 for r in ROLES}, phase


@pytest.mark.parametrize("framework", ["megatron", "fsdp2", "deepspeed", "nanotron"])
def test_second_step_backward_is_the_estimate_and_the_peak(framework):
    for zero in (1, 3):
        par = ParallelConfig(dp=8, zero=zero, gbs=8, seq=4096, framework=framework)
        est = estimate_memory(model_from_name("llama3-8b"), ClusterSpec(gpu_from_name("H100-80GB"), nodes=1), par)
        totals = {phase: sum(gib.values()) for phase, gib in step_timeline(est, par)}
        assert totals["step 2 backward peak"] == pytest.approx(est.worst.total_gib)
        assert max(totals.values()) == totals["step 2 backward peak"]
        assert totals["step 1 forward peak"] < totals["step 2 forward peak"]      # no Adam moments yet
        # one gradient buffer allocated at init: every framework's but FSDP2's (at ZeRO 1 over eight
        # replicas fsdp2 is DDP, whose buckets are one)
        persistent = framework != "fsdp2" or zero == 1
        assert (dict(step_timeline(est, par))["init"]["gradients"] > 0) == persistent


def test_fsdp2_trades_gradients_for_activations_without_accumulation():
    """FSDP2 creates the gradients its backward writes as it frees the activations: with one
    micro-batch per step the peak holds the larger of the two; with two, the first micro-batch's
    gradients stay through the second's backward, as a persistent buffer's do."""
    model, cluster = model_from_name("llama3-8b"), ClusterSpec(gpu_from_name("H100-80GB"), nodes=1)
    one = ParallelConfig(dp=8, zero=3, gbs=8, seq=4096, framework="fsdp2")
    late, kept = (estimate_memory(model, cluster, p).worst for p in (one, ParallelConfig(
        dp=8, zero=3, gbs=16, seq=4096, framework="fsdp2")))
    assert late.grads_gib == 0 < late.grads_full_gib == pytest.approx(kept.grads_gib)
    assert late.total_gib == pytest.approx(kept.total_gib - kept.grads_gib)
    tiny = estimate_memory(model, cluster, ParallelConfig(dp=8, zero=3, gbs=8, seq=128, framework="fsdp2")).worst
    # more gradients than activations: the peak is the finished backward's
    assert tiny.grads_gib == pytest.approx(tiny.grads_full_gib - tiny.activations_gib)
    for framework in ("megatron", "deepspeed"):
        s = estimate_memory(model, cluster, ParallelConfig(dp=8, zero=3 if framework == "deepspeed" else 1, gbs=8,
                                                           seq=4096, framework=framework)).worst
        assert s.grads_gib == s.grads_full_gib > 0


def test_ddp_keeps_its_gradient_buckets():
    """fsdp2 at ZeRO 0/1 with dp > 1 is PyTorch's DDP, whose gradient buckets (as large as every
    gradient) are allocated when the model is wrapped: at the peak they are all there, and the
    parameters' own .grad come as the activations go (here fewer than the activations); after the
    backward both."""
    model, cluster = model_from_name("llama3-8b"), ClusterSpec(gpu_from_name("H200-141GB"), nodes=1)
    ddp = estimate_memory(model, cluster, ParallelConfig(dp=8, zero=1, gbs=8, seq=4096, framework="fsdp2")).worst
    assert ddp.activations_gib > ddp.grads_gib
    assert 2 * ddp.grads_gib == ddp.grads_full_gib > 0
    one = estimate_memory(model, ClusterSpec(gpu_from_name("H200-141GB"), nodes=1, gpus_per_node=1),
                          ParallelConfig(dp=1, zero=0, gbs=1, seq=4096, framework="fsdp2")).worst
    assert one.grads_gib == 0 < one.grads_full_gib                  # one GPU: no DDP, PyTorch's own grads
