"""Activation bytes and FLOPs of one layer vs PyTorch itself (FakeTensorMode: nothing is allocated).

Every distinct storage autograd saves during a forward is recorded with saved-tensor hooks and
compared with calculators.memory.activations; FlopCounterMode's count is compared with calculators.time.flops.
"""
import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils.flop_counter import FlopCounterMode

from calculators.memory.activations import layer_activations
from calculators.time.flops import attention_flops, layer_matmul_flops
from calculators.specs.models import ModelSpec, MoESpec
from calculators.specs.parallel import ParallelConfig
from tests.calculators.reference_block import ReferenceLayer, saved_activation_bytes

GQA = ModelSpec(layers=1, hidden=512, heads=8, kv_heads=2, ffn=1536, vocab=1000)
MHA = ModelSpec(layers=1, hidden=1024, heads=16, ffn=2816, vocab=1000)
MOE = ModelSpec(layers=1, hidden=512, heads=8, kv_heads=4, ffn=1536, vocab=1000,
                moe=MoESpec(experts=8, top_k=2, expert_ffn=768))
MOE_TOP1 = ModelSpec(layers=1, hidden=256, heads=4, ffn=512, vocab=1000, moe=MoESpec(experts=4, top_k=1, expert_ffn=384))

# (name, model, seq, mbs, tp, sp, flash, recompute): the reference runs flash attention whenever the
# layout recomputes the attention core (selective), as Megatron's selective recompute keeps the same.
CASES = [
    ("gqa-tp1-flash", GQA, 256, 2, 1, False, True, "none"),
    ("gqa-tp2-sp", GQA, 256, 2, 2, True, True, "none"),
    ("gqa-tp2-nosp", GQA, 512, 1, 2, False, True, "none"),
    ("gqa-no-flash", GQA, 256, 2, 1, False, False, "none"),
    ("gqa-no-flash-selective", GQA, 256, 2, 1, False, False, "selective"),
    ("mha-tp4-sp-long", MHA, 1024, 1, 4, True, True, "none"),
    ("mha-tp2-sp-no-flash", MHA, 256, 4, 2, True, False, "none"),
    ("moe-top2", MOE, 256, 2, 1, False, True, "none"),
    ("moe-top1-b4", MOE_TOP1, 128, 4, 1, False, True, "none"),
]


def _layer(model, tp, sp, flash, moe):
    with torch.device("meta"):
        return ReferenceLayer(model, tp=tp, sp=sp, moe=moe, flash=flash)


@pytest.mark.parametrize("name,model,seq,mbs,tp,sp,flash,recompute", CASES, ids=[c[0] for c in CASES])
def test_activation_bytes_match_pytorch(name, model, seq, mbs, tp, sp, flash, recompute):
    moe = model.moe is not None
    par = ParallelConfig(tp=tp, sp=sp, mbs=mbs, seq=seq, flash=flash, recompute=recompute, framework="nanotron")
    predicted = layer_activations(model, par, moe).total
    measured = saved_activation_bytes(_layer(model, tp, sp, flash or recompute == "selective", moe), mbs, seq)
    assert predicted == pytest.approx(measured, rel=0.05), f"{name}: predicted {predicted:,.0f} B, PyTorch saved {measured:,.0f} B"


def test_selective_recompute_frees_the_score_matrix_only():
    par = dict(seq=1024, mbs=1, flash=False, framework="nanotron")
    none = layer_activations(GQA, ParallelConfig(**par), False)
    sel = layer_activations(GQA, ParallelConfig(**par, recompute="selective"), False)
    assert none.scores == 2 * 8 * 1024 * 1024 and sel.scores == 0
    assert none.total > sel.total


@pytest.mark.parametrize("model,moe", [(GQA, False), (MHA, False), (MOE, True), (MOE_TOP1, True)])
def test_flops_match_flop_counter(model, moe):
    seq, mbs = 256, 2
    layer = _layer(model, 1, False, False, moe)
    with FakeTensorMode(allow_non_fake_inputs=True):
        layer.batch, layer.seq = mbs, seq
        params = {n: torch.empty(p.shape, dtype=p.dtype, requires_grad=True) for n, p in layer.named_parameters()}
        x = torch.randn(mbs * seq, model.hidden, dtype=torch.bfloat16)
        cos = torch.randn(seq, model.head_dim, dtype=torch.bfloat16)
        mask = torch.ones(seq, seq, dtype=torch.bool).triu(1)
        with FlopCounterMode(display=False) as counter:
            torch.func.functional_call(layer, params, (x, cos, cos, mask))
    predicted = mbs * seq * (layer_matmul_flops(model, moe) + attention_flops(model, seq, causal=False))
    assert counter.get_total_flops() == pytest.approx(predicted, rel=1e-9)


def _loss_saved_per_logit(loss_fn) -> tuple[float, torch.dtype]:
    """Distinct bytes autograd keeps per logit from a cross-entropy's forward to its backward, and
    the dtype of the logits' gradient (the backward's transient)."""
    logits = torch.randn(2, 128, 1000, dtype=torch.bfloat16, requires_grad=True)
    labels = torch.randint(0, 1000, (2, 128))
    storages = {}

    def pack(t):
        storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = loss_fn(logits, labels)
    loss.backward()
    return sum(storages.values()) / logits.numel(), logits.grad.dtype


def _cross_entropy(pred, labels):   # torchtitan's loss (torchtitan/components/loss.py)
    return torch.nn.functional.cross_entropy(pred.flatten(0, 1).float(), labels.flatten(0, 1))


def _cross_entropy_bf16(pred, labels):   # NeMo Automodel's MaskedCrossEntropy(fp32_upcast=False)
    return torch.nn.functional.cross_entropy(pred.flatten(0, 1), labels.flatten(0, 1))


@pytest.mark.parametrize("kernel", ["eager", "compiled", "bf16"])
def test_loss_keeps_what_pytorch_keeps(kernel):
    """kernels.loss_activation_bytes: eager F.cross_entropy on the fp32 upcast keeps its fp32
    log-softmax, on the bf16 logits themselves its bf16 one; compiled by Inductor, it keeps the
    bf16 logits (and a per-token log-sum-exp) and recomputes the softmax; the gradient comes back
    in bf16 either way."""
    from calculators.specs.kernels import loss_activation_bytes
    fn = {"compiled": torch.compile(_cross_entropy), "bf16": _cross_entropy_bf16}.get(kernel, _cross_entropy)
    per_logit, grad_dtype = _loss_saved_per_logit(fn)
    kept, transient = loss_activation_bytes(kernel)
    assert per_logit == pytest.approx(kept, rel=0.03)     # the per-token terms are 1/1000 of it
    assert grad_dtype == torch.bfloat16 and (kernel == "eager" or transient == 2)
