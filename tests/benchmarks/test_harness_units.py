"""Pieces of the harness checked without launching ranks: the model against the calculators'
parameter count, weight init independent of the layout, stage placement, config validation."""
import pytest
import torch

from benchmarks import pipeline
from benchmarks.config import TINY, TINY_MOE, RunSpec, resolve_model
from benchmarks.model import Transformer, canonical_name, init_weights
from benchmarks.train import build_model, global_batch
from calculators.specs.errors import ConfigError


@pytest.mark.parametrize("spec", [TINY, TINY_MOE, resolve_model("llama3-8b"), resolve_model("mixtral-8x7b")],
                         ids=lambda s: s.name)
def test_model_parameters_equal_the_calculators_count(spec):
    with torch.device("meta"):
        model = Transformer(spec, seq=16)
    assert sum(p.numel() for p in model.parameters()) == spec.total_params


def test_a_pipeline_stage_starts_from_the_full_models_weights():
    full = Transformer(TINY, seq=16)
    init_weights(full, seed=3)
    run = RunSpec(seq=16, seed=3)
    stage = build_model(TINY, run, 1, 2, [2, 3])
    stage.to_empty(device="cpu")
    init_weights(stage, seed=3)
    ref = dict(full.named_parameters())
    for name, p in stage.named_parameters():
        assert torch.equal(p, ref[name]), name
    assert stage.tok_embeddings is None and stage.output is not None


def test_canonical_names_strip_wrappers():
    assert canonical_name("layers.0._checkpoint_wrapped_module.attention.wq.weight") == "layers.0.attention.wq.weight"
    assert canonical_name("module.layers._orig_mod.0.w") == "layers.0.w"


def test_global_batch_is_the_same_for_every_rank_and_learnable():
    run = RunSpec(gbs=4, seq=8)
    a, la = global_batch(run, 2, 256)
    b, _ = global_batch(run, 2, 256)
    assert torch.equal(a, b) and torch.equal(la[:, :-1], a[:, 1:])


def test_stage_placement():
    assert pipeline.stage_ids(1, 4, "interleaved", 2) == [1, 5]
    assert pipeline.stage_ids(1, 4, "zb", 1) == [1, 6]
    assert pipeline.stage_ids(0, 2, "dualpipe", 1) == [0, 3]
    assert pipeline.stage_layers(10, 4) == [[0, 1, 2], [3, 4, 5], [6, 7], [8, 9]]
    assert pipeline.stage_layers(4, 2, (3, 1)) == [[0, 1, 2], [3]]
    with pytest.raises(ConfigError, match="summing to 4"):
        pipeline.stage_layers(4, 2, (2, 1))


def test_schedule_checks_say_what_to_change():
    with pytest.raises(ConfigError, match="at least 2\\*pp = 4 micro-batches"):
        pipeline.check(RunSpec(schedule="zb", pp=2), 4, 2, 2)
    with pytest.raises(ConfigError, match="needs --schedule interleaved"):
        pipeline.check(RunSpec(vpp=2, pp=2), 4, 4, 2)
    with pytest.raises(ConfigError, match="--split lists 2 stages; pp=2 x vpp=2 needs 4"):
        pipeline.check(RunSpec(vpp=2, pp=2, schedule="interleaved", split="3,5"), 8, 4, 2)
    with pytest.raises(ConfigError, match="dualpipe folds its stages into a V"):
        pipeline.check(RunSpec(pp=2, schedule="dualpipe", split="3,5"), 8, 4, 2)
    pipeline.check(RunSpec(vpp=2, pp=2, schedule="interleaved", split="1,3,3,1"), 8, 4, 2)   # uneven interleaved


def test_run_spec_validation():
    with pytest.raises(ConfigError, match="expert parallelism is not built"):
        RunSpec(ep=2)
    with pytest.raises(ConfigError, match="not divisible by tp\\*cp\\*pp = 4"):
        RunSpec(tp=2, pp=2).parallel(6)
    with pytest.raises(ConfigError, match="multiple of dp\\*mbs"):
        RunSpec(gbs=3).parallel(2)
    assert RunSpec(split="3,1").split == (3, 1)
    assert RunSpec(tp=2, gbs=8).parallel(4).dp == 2
    with pytest.raises(ConfigError, match="unknown run option"):
        RunSpec.from_dict({"tpp": 2})


@pytest.mark.parametrize("schedule,vpp", [("gpipe", 1), ("1f1b", 1), ("interleaved", 2), ("zb", 1), ("dualpipe", 1)])
@pytest.mark.parametrize("layers,pp", [(16, 2), (30, 4), (35, 2), (32, 4)])
def test_prediction_counts_the_layers_each_rank_runs(schedule, vpp, layers, pp):
    """The calculators' layout for a run gives every pipeline rank as many layers as the harness
    puts on it (V-shaped schedules through an explicit split)."""
    from dataclasses import replace as dc_replace
    from calculators.memory.estimate import stage_layers as predicted
    run = RunSpec(model="tiny", pp=pp, vpp=vpp, schedule=schedule, mbs=1, gbs=4 * pp, seq=32)
    spec = dc_replace(run.spec(), layers=layers)
    run = dc_replace(run, model=spec)
    n = pipeline.stages_per_rank(schedule, vpp)
    stages = pipeline.stage_layers(layers, pp * n)
    harness = [sum(len(stages[s]) for s in pipeline.stage_ids(r, pp, schedule, vpp)) for r in range(pp)]
    assert [len(x) for x in predicted(spec, run.parallel(pp))] == harness


def test_recompute_per_rank_from_the_command_line():
    run = RunSpec(model="tiny", pp=2, recompute_ranks="full,none", mbs=1, gbs=8, seq=32)
    assert run.recompute == "full" and run.recompute_ranks == ("full", "none")
    assert run.for_rank(0).recompute == "full" and run.for_rank(1).recompute == "none"
    assert run.parallel(2).recompute_ranks == ("full", "none")
    with pytest.raises(ConfigError, match="2 modes for pp=4"):
        RunSpec(model="tiny", pp=4, recompute_ranks="full,none")
    with pytest.raises(ConfigError, match="disagrees"):
        RunSpec(model="tiny", pp=2, recompute="selective", recompute_ranks="full,none")


def test_gemm_and_attention_size_lists_refuse_what_is_not_a_whole_number():
    import pytest

    from benchmarks import attention, gemm
    from calculators.specs.errors import ConfigError
    for call, says in ((lambda: gemm.cases("", ["bf16"], 1, "llama3-8b", "0"), "--tps"),
                       (lambda: gemm.cases("", ["bf16"], 1, "llama3-8b", "1", -5), "--tokens"),
                       (lambda: attention.cases("x", "128", "1", "flash"), "--seqs"),
                       (lambda: attention.cases("1024", "128", "1.5", "flash"), "--gqa")):
        with pytest.raises(ConfigError, match=says):
            call()
    assert [c["kv_heads"] for c in attention.cases("1024", "128", "1,8", "flash")] == [16, 2]
    assert {c["n"] for c in gemm.cases("", ["bf16"], 1, "llama3-8b", "8")} == {768, 4096, 3584}


@pytest.mark.parametrize("argv,says", [
    (["train", "--split", "a,b", "--device", "cpu"], "split must list whole numbers"),
    (["train", "--lr", "nan", "--device", "cpu"], "lr must be a learning rate"),
    (["memory", "--world", "0", "--device", "cpu"], "--world must be"),
    (["memory", "--world", "99999999999999999999", "--device", "cpu"], "--world must be"),
    (["collectives", "--sizes", "abc"], "--sizes must list"),
    (["collectives", "--sizes", "1e400"], "--sizes must list"),
    (["sweep", "/nonexistent/configs.jsonl", "--out", "x.jsonl"], "cannot read the sweep file"),
    (["launch", "/nonexistent/configs.jsonl", "--out", "x", "--dry-run"], "cannot read the sweep file"),
    (["smoke", "--nproc", "0"], "--nproc must be"),
])
def test_bad_arguments_get_a_message_and_exit_2(argv, says, capsys, tmp_path, monkeypatch):
    """Each had ended in a traceback (ValueError, ZeroDivisionError, OverflowError, FileNotFoundError,
    AssertionError), found by a fuzzing review; nothing runs."""
    from benchmarks.__main__ import main
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    assert says in capsys.readouterr().err


def test_the_harness_costs_its_eager_norms_as_its_pytorch_runs_them():
    """PyTorch 2.8 and later run nn.RMSNorm as one fused kernel on a GPU: an eager harness run on one
    is costed with elementwise="eager-fused-norm", an earlier one with the composite norm; compiled
    runs with Inductor's fused counts. A recorded row gives the version it ran (validation.bundle)."""
    from benchmarks.config import _fused_rms_norm
    for version, fused in (("2.11.0+cu130", True), ("2.8.0a0+gitabc123", True), ("2.10.0.dev20250101", True),
                           ("2.7.1+cu126", False), ("2.4.0", False), ("1.13.1", False), ("nightly", False)):
        assert _fused_rms_norm(version) is fused, version
        assert RunSpec(gbs=1).parallel(1, version).elementwise == ("eager-fused-norm" if fused else "")
        assert RunSpec(gbs=1, compile=True).parallel(1, version).elementwise == ""


def test_one_process_runs_fp32_weights_under_autocast_whatever_zero_says():
    """train.py builds no FSDP in one process and autocasts over its fp32 weights: the calculators
    get zero 0 there (autocast_over_fp32), and the ZeRO stage asked for on several ranks."""
    from calculators.memory.activations import autocast_over_fp32
    one = RunSpec(zero=3, gbs=8, mbs=1, seq=16).parallel(1)
    assert one.zero == 0 and autocast_over_fp32(one)
    assert RunSpec(zero=3, gbs=8, mbs=1, seq=16).parallel(2).zero == 3
