"""Muon (parallel.optimizer "muon"): its Newton-Schulz FLOPs and element-wise bytes against PyTorch's own
torch.optim.Muon, the state each framework keeps, who orthogonalises which matrix, and the rules each
framework's source imposes (calculators/specs/optimizers.py, calculators/time/muon.py)."""
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

from calculators.memory.estimate import GIB, estimate_memory
from calculators.planning.export import export
from calculators.scenario import plan_answer
from calculators.specs.errors import ConfigError
from calculators.specs.hardware import ClusterSpec, gpu_from_name
from calculators.specs.optimizers import MUON_STEP_BYTES, NS_STEPS, ns_flops
from calculators.specs.parallel import ParallelConfig, check_layout
from calculators.specs.presets import model_from_name
from calculators.time.muon import _ns_seconds, muon_step_time
from calculators.time.profiles import default_profile
from calculators.time.step import estimate_step

H100 = gpu_from_name("H100-80GB")
NODE = ClusterSpec(H100, 1, 8)
MODEL = model_from_name("llama3-8b")
PROFILE = default_profile("H100-80GB")


def _muon_step(rows, cols):
    p = torch.nn.Parameter(torch.randn(rows, cols))
    p.grad = torch.randn(rows, cols)
    return torch.optim.Muon([p]), p


@pytest.mark.parametrize("rows,cols", [(64, 256), (256, 64), (96, 96), (128, 48)])
def test_ns_flops_are_what_pytorch_counts_for_its_muon(rows, cols):
    opt, _ = _muon_step(rows, cols)
    with FlopCounterMode(display=False) as counter:
        opt.step()
    assert counter.get_total_flops() == ns_flops(rows, cols) and NS_STEPS == 5


class _Bytes(TorchDispatchMode):
    """HBM bytes of every op but the GEMMs and the views: what it reads and what it writes."""
    VIEWS = {"t", "transpose", "view", "_unsafe_view", "alias", "detach", "expand", "permute", "as_strided"}

    def __init__(self):
        super().__init__()
        self.total = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = func._schema.name.split("::")[-1]
        if name not in self.VIEWS and name not in ("mm", "addmm"):
            tensors = [a for a in list(args) + list((kwargs or {}).values()) if isinstance(a, torch.Tensor)]
            outs = out if isinstance(out, (tuple, list)) else [out]
            self.total += sum(t.numel() * t.element_size() for t in tensors + [o for o in outs
                                                                             if isinstance(o, torch.Tensor)])
        return out


def test_elementwise_bytes_are_what_pytorchs_muon_moves():
    """torch.optim.Muon over fp32 state moves 54 bytes a parameter outside its GEMMs; the frameworks
    then write the bf16 weight from the master (6): MUON_STEP_BYTES."""
    opt, p = _muon_step(512, 256)
    opt.step()                                   # the momentum buffer exists from here on
    counter = _Bytes()
    with counter:
        opt.step()
    assert counter.total / p.numel() == pytest.approx(MUON_STEP_BYTES - 6, rel=0.01)
    assert opt.state[p]["momentum_buffer"].dtype == torch.float32     # one fp32 buffer: 4 bytes a parameter


def _muon_params(model):
    """Parameters Muon steps: every layer's weight matrices (router and experts included)."""
    return sum(mm.fan_in * mm.fan_out * mm.stored for i in range(model.layers)
               for mm in model.layer_matmuls(model.is_moe_layer(i)))


@pytest.mark.parametrize("framework,zero,momentum", [("megatron", 0, 4), ("megatron", 1, 4), ("fsdp2", 3, 4),
                                                     ("deepspeed", 1, 2), ("deepspeed", 3, 2)])
def test_state_is_one_momentum_on_the_matrices_and_adam_on_the_rest(framework, zero, momentum):
    def optimizer_bytes(optimizer):
        par = ParallelConfig(dp=8, zero=zero, gbs=8, seq=1024, framework=framework, optimizer=optimizer)
        return estimate_memory(MODEL, NODE, par).worst.optimizer_gib * GIB
    shard = 8 if zero else 1
    saved = optimizer_bytes("adamw") - optimizer_bytes("muon")
    assert saved == pytest.approx((8 - momentum) * _muon_params(MODEL) / shard, rel=1e-9)
    # what stays: the embedding, output and norms at Adam's 8 bytes, the matrices at the momentum's
    rest = MODEL.total_params - _muon_params(MODEL)
    assert optimizer_bytes("muon") == pytest.approx((8 * rest + momentum * _muon_params(MODEL)) / shard, rel=1e-9)


def test_ns_work_is_shared_by_the_owners_and_whole_on_every_tp_rank():
    seventy = model_from_name("llama3-70b")
    cluster = ClusterSpec(H100, 8, 8)
    layers = {False: seventy.layers}
    def ns(**kw):
        par = ParallelConfig(gbs=64, seq=4096, optimizer="muon", **kw)
        return muon_step_time(seventy, par, cluster, PROFILE, layers)[0]
    every, shared = ns(dp=8, tp=8, sp=True, zero=0), ns(dp=8, tp=8, sp=True, zero=1)
    assert shared == pytest.approx(every / 8, rel=1e-9)
    # Megatron orthogonalises whole matrices on every TP rank: no less work a GPU for TP
    assert ns(dp=64, zero=0) == pytest.approx(every, rel=1e-9)
    # a matrix is not split: 64 owners of one layer's seven matrices each wait for the largest one
    one = muon_step_time(seventy, ParallelConfig(dp=64, zero=1, gbs=64, optimizer="muon"), cluster, PROFILE,
                         {False: 1})[0]
    largest = max(_ns_seconds(mm.fan_out, mm.fan_in, cluster, PROFILE) for mm in seventy.layer_matmuls(False))
    assert one == pytest.approx(largest, rel=1e-9)
    assert muon_step_time(seventy, ParallelConfig(), cluster, PROFILE, layers) == (0.0, 0.0)


def test_step_pays_for_ns_in_its_optimizer():
    base = dict(dp=8, zero=1, gbs=64, seq=4096)
    adam = estimate_step(MODEL, NODE, ParallelConfig(**base), PROFILE)
    muon = estimate_step(MODEL, NODE, ParallelConfig(**base, optimizer="muon"), PROFILE)
    ns = muon_step_time(MODEL, ParallelConfig(**base, optimizer="muon"), NODE, PROFILE, {False: MODEL.layers})[0]
    assert muon.breakdown["optimizer"] > adam.breakdown["optimizer"] + ns * 0.99
    assert muon.time_s == pytest.approx(adam.time_s + muon.breakdown["optimizer"] - adam.breakdown["optimizer"],
                                        rel=1e-6)


@pytest.mark.parametrize("kw,needle", [
    (dict(framework="nanotron"), "nanotron has no Muon"),
    (dict(framework="megatron", zero=3), "zero 0 or 1"),
    (dict(framework="fsdp2", zero=1), "zero 2 or 3"),
    (dict(framework="fsdp2", zero=3, tp=2, sp=True), "tensor and context parallelism"),
    (dict(framework="deepspeed", zero=0), "plain SGD"),
    (dict(framework="deepspeed", zero=3, optimizer_offload=1.0), "no host offload"),
    (dict(framework="megatron", zero=1, moment_dtype="bf16"), "moment_dtype fp32"),
])
def test_each_frameworks_refusals_name_the_field(kw, needle):
    par = ParallelConfig(**{"dp": 4, "gbs": 8, "seq": 1024, "optimizer": "muon", **kw})
    with pytest.raises(ConfigError, match="optimizer muon|no Muon") as exc:
        check_layout(MODEL, ClusterSpec(H100, 1, 8), par)
    assert needle in str(exc.value)


def test_plans_keep_muon_at_the_stages_each_framework_runs_it_and_export_it():
    request = {"model": {"preset": "llama3-8b"}, "hardware": {"gpu": "H100-80GB", "nodes": 1, "gpus_per_node": 8},
               "seq": 4096, "gbs": 64, "top": 3}
    for framework, stages in (("megatron", (0, 1)), ("fsdp2", (2, 3)), ("deepspeed", (1, 2, 3))):
        answer = plan_answer({**request, "constraints": {"framework": framework, "optimizer": "muon"}})
        assert answer["plans"]
        assert all(p["parallel"]["zero"] in stages and p["parallel"]["optimizer"] == "muon" for p in answer["plans"])
    assert all(p["parallel"]["optimizer"] == "adamw" for p in plan_answer(request)["plans"])
    with pytest.raises(ConfigError, match="plan constraints: optimizer"):
        plan_answer({**request, "constraints": {"optimizer": "sgd"}})
    with pytest.raises(ConfigError, match="optimizer takes one value"):
        plan_answer({**request, "constraints": {"optimizer": ["adamw", "muon"]}})
    megatron, _ = export("megatron", MODEL, NODE, ParallelConfig(dp=8, gbs=8, zero=1, optimizer="muon"))
    assert "--optimizer muon" in megatron and "--use-distributed-optimizer" in megatron
    ds, _ = export("deepspeed", MODEL, NODE, ParallelConfig(dp=8, gbs=8, zero=3, framework="deepspeed",
                                                             optimizer="muon"))
    assert '"type": "Muon"' in ds and '"reduce_scatter": false' in ds
    _, notes = export("torchtitan", MODEL, NODE, ParallelConfig(dp=8, gbs=8, zero=3, framework="fsdp2",
                                                                 optimizer="muon"))
    assert any("DistMuon" in n for n in notes)


@pytest.mark.parametrize("value", ["sgd", "", None, 1, True, ["muon"], "<b>muon</b>"])
def test_hostile_optimizer_values_get_a_message(value):
    from playbook.values import scenario_from
    with pytest.raises(ConfigError, match="optimizer"):
        scenario_from({"model": "llama3-8b", "gpu": "H100-80GB", "nodes": 1, "dp": 8, "gbs": 8, "optimizer": value})


def test_deepspeed_zero3_runs_its_muon_on_every_micro_batch():
    """DeepSpeed's ZeRO-3 Muon sits on its gradient reduction path (stage3's reduce, every backward), not in
    the step; its momentum follows the gradients' dtype."""
    def cost(gbs, **kw):
        par = ParallelConfig(dp=8, zero=3, gbs=gbs, seq=1024, framework="deepspeed", optimizer="muon", **kw)
        return muon_step_time(MODEL, par, NODE, PROFILE, {False: MODEL.layers})
    (ns1, comm1), (ns4, comm4) = cost(8), cost(32)
    assert ns4 == pytest.approx(4 * ns1) and comm4 == pytest.approx(4 * comm1) and comm1 > 0
    assert cost(8, grad_dtype="fp32")[1] == pytest.approx(2 * comm1, rel=1e-3)      # twice the bytes


def test_step_widget_says_the_optimizer_bar_holds_muons_work():
    from playbook.widgets.step import compute
    values = {"model": "llama3-8b", "gpu": "H100-80GB", "nodes": 1, "dp": 8, "zero": 1, "gbs": 64, "seq": 4096}
    _, text = compute({**values, "optimizer": "muon"})
    assert "Optimizer: Muon" in text and "Newton-Schulz" in text
    assert "Muon" not in compute(values)[1]
