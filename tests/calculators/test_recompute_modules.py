"""Megatron's recompute modules (`parallel.recompute` "layernorm+moe"): parsing, what each frees
and runs again, and how they export. What each frees is checked against PyTorch in
test_recompute_torch.py."""
from dataclasses import replace

import pytest
from hypothesis import given, settings, strategies as st

from calculators.memory.activations import module_freed, saved_per_layer
from calculators.memory.estimate import estimate_memory
from calculators.planning.export import export
from calculators.specs.errors import ConfigError
from calculators.specs.hardware import GPU_PRESETS, ClusterSpec
from calculators.specs.parallel import ParallelConfig, check_layout
from calculators.specs.presets import model_from_name
from calculators.specs.recompute import MODULES, modules, order, policy, valid
from calculators.time.flops import recomputed_flops_per_token
from calculators.time.profiles import default_profile
from calculators.time.step import estimate_step
from validation.stacks import _recompute

QWEN = model_from_name("qwen3-30b-a3b")
H100 = GPU_PRESETS["H100-80GB"]
CLUSTER = ClusterSpec(H100, nodes=2, gpus_per_node=8)
PAR = ParallelConfig(dp=16, ep=16, gbs=64, seq=4096, framework="megatron")


def test_a_module_list_is_a_policy_of_its_own():
    assert modules("moe+layernorm") == ("layernorm", "moe")          # Megatron's order, whatever the text's
    assert policy("megatron", "layernorm+moe") == ("modules", 1) and policy("fsdp2", "moe_act") == ("modules", 1)
    assert policy("megatron", "core_attn") == ("core_attn", 1) and modules("core_attn") == ()
    assert valid("core_attn+moe_act+layernorm") and valid("mlp")
    for bad in ("moe+moe", "+", "layernorm+", "moe,layernorm", "Moe", "layernorm+op_sac", "x" * 300, None, 3):
        assert not valid(bad) and not modules(bad), bad
    assert order("selective") < order("layernorm") < order("layernorm+moe") < order("op_sac")
    with pytest.raises(ConfigError, match=r"recompute modules joined by '\+' \(e\.g\. moe_act\+layernorm"):
        replace(PAR, recompute="moe+moe")


def test_each_module_frees_its_part_and_moe_covers_its_experts():
    kept = {r: saved_per_layer(QWEN, replace(PAR, recompute=r), True)
            for r in ("none", "layernorm", "moe_act", "moe", "moe_act+moe", "layernorm+moe", "full")}
    freed = module_freed(QWEN, PAR, True)
    assert kept["none"] - kept["layernorm"] == pytest.approx(freed["layernorm"])
    assert kept["none"] - kept["moe_act"] == pytest.approx(freed["moe_act"])
    assert kept["moe_act+moe"] == kept["moe"] < kept["moe_act"] < kept["none"]   # moe already frees moe_act's part
    assert kept["full"] < kept["layernorm+moe"] < kept["moe"]
    assert freed["mlp"] == freed["mla_up_proj"] == freed["shared_experts"] == 0     # Qwen3: no dense, no MLA
    peak = {r: estimate_memory(QWEN, CLUSTER, replace(PAR, recompute=r)).total_gib for r in ("none", "layernorm+moe")}
    assert peak["layernorm+moe"] < peak["none"]


def test_recomputing_moe_runs_its_gemms_and_all_to_alls_again():
    def step(recompute, **kw):
        return estimate_step(QWEN, CLUSTER, replace(PAR, recompute=recompute, **kw), default_profile("H100-80GB"))
    none, act, moe, full = (step(r) for r in ("none", "moe_act", "moe", "full"))
    assert 0 < act.breakdown["recompute"] < 0.1 * moe.breakdown["recompute"]
    assert none.time_s < act.time_s < moe.time_s < full.time_s
    ep = {r: step(r).breakdown for r in ("none", "moe", "full", "moe_act")}
    ep_time = {r: b.get("ep_exposed", 0) + b.get("ep_hidden", 0) for r, b in ep.items()}
    # the forward's dispatch and combine run again before the backward's: 3 of 2 (full too)
    assert ep_time["moe"] == ep_time["full"] == pytest.approx(1.5 * ep_time["none"]) == pytest.approx(
        1.5 * ep_time["moe_act"])
    flops = {r: recomputed_flops_per_token(QWEN, 4096, r) for r in ("layernorm", "moe", "full")}
    assert flops["layernorm"] == 0 < flops["moe"] < flops["full"]


def test_a_module_the_model_lacks_is_named_in_a_warning():
    dense = model_from_name("llama3-8b")
    warned = check_layout(dense, ClusterSpec(H100, 1, 8), ParallelConfig(dp=8, gbs=8, recompute="moe_act+layernorm"))
    assert any("recompute modules moe_act, layernorm free nothing in this model (it has no MoE layer and no "
               "norm of its own" in w for w in warned)
    assert not any("recompute modules" in w for w in check_layout(QWEN, CLUSTER, replace(PAR, recompute="moe")))


def test_exports_say_the_modules():
    par = replace(PAR, recompute="moe+layernorm")
    text, _ = export("megatron", QWEN, CLUSTER, par)
    assert "--recompute-granularity selective" in text and "--recompute-modules layernorm moe" in text
    text, notes = export("harness", QWEN, CLUSTER, par)
    assert "--recompute selective" in text and any("'moe+layernorm' exported as 'selective'" in n for n in notes)
    _, notes = export("torchtitan", QWEN, CLUSTER, replace(par, framework="fsdp2", zero=3))
    assert any("no per-module (moe+layernorm) recompute" in n for n in notes)


def test_published_rows_name_their_modules():
    assert _recompute("selective (layernorm, moe)") == "layernorm+moe"
    assert _recompute("selective (moe_act, layernorm)") == "moe_act+layernorm"
    assert set(MODULES) >= set(modules(_recompute("selective (core_attn, mlp)")))
    with pytest.raises(ValueError, match="not model"):
        _recompute("selective (layernorm, mhc)")


def test_the_planner_tries_the_moe_modules_before_a_full_recompute():
    from calculators.planning.space import space
    moe = space(QWEN, CLUSTER, 4096, {})["recompute"]
    assert moe == ["none", "selective", "moe_act+layernorm", "layernorm+moe", "full"]
    assert space(model_from_name("llama3-8b"), CLUSTER, 4096, {})["recompute"] == ["none", "selective", "full"]
    assert space(QWEN, CLUSTER, 4096, {"framework": "fsdp2"})["recompute"] == ["none", "selective", "full"]
    assert space(QWEN, CLUSTER, 4096, {"recompute": ["full", "moe"]})["recompute"] == ["moe", "full"]
    with pytest.raises(ConfigError, match=r"recompute must be one of .* joined by '\+'"):
        space(QWEN, CLUSTER, 4096, {"recompute": "moe+moe"})


def test_a_narrower_search_never_finds_a_faster_moe_plan():
    """The planner prunes a structure whose optimistic time is well behind the leaders; that time
    must count DualPipe, whose paired forward and backward hide the all-to-alls, or a DualPipe
    layout is pruned that a search restricted to DualPipe finds (it was, on Qwen3-30B-A3B)."""
    from calculators.planning.planner import plan
    cluster = ClusterSpec(H100, nodes=4, gpus_per_node=8)
    every = {"schedule": ["1f1b", "zb", "interleaved", "dualpipe"]}     # Megatron plans DualPipe only when asked
    best = plan(QWEN, cluster, 4096, 512, constraints=every).plans
    for narrow in ({"schedule": "dualpipe"}, {"cp": 2, "ep": 8}, {"recompute": ["none", "selective", "full"]}):
        found = plan(QWEN, cluster, 4096, 512, constraints={**every, **narrow}).plans
        assert best[0].step.time_s <= found[0].step.time_s * (1 + 1e-9), narrow
    assert any(p.par.cp == 2 and p.par.ep == 8 and p.par.schedule == "dualpipe" for p in best)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(["qwen3-30b-a3b", "mixtral-8x7b", "deepseek-v3", "llama3-8b"]),
       st.sets(st.sampled_from(MODULES), min_size=1), st.sampled_from(["megatron", "fsdp2", "deepspeed"]),
       st.sampled_from([1, 2]), st.booleans())
def test_recomputing_a_module_never_costs_memory_nor_saves_time(name, mods, framework, tp, flash):
    """Whatever the modules, the model or the stack: the peak is no higher than without recompute
    and no lower than with a full one, and the step no faster than without."""
    model = model_from_name(name)
    cluster = ClusterSpec(H100, nodes=4, gpus_per_node=8)
    ep = 8 if model.moe else 1
    par = ParallelConfig(dp=32 // tp, tp=tp, sp=tp > 1, ep=ep, etp=1, gbs=64, seq=4096, framework=framework,
                         zero=3 if framework == "fsdp2" else 1, flash=flash, recompute="+".join(sorted(mods)))
    profile = default_profile("H100-80GB")
    peak = {r: estimate_memory(model, cluster, replace(par, recompute=r)).total_gib
            for r in ("none", par.recompute, "full")}
    assert peak["full"] <= peak[par.recompute] * (1 + 1e-9) and peak[par.recompute] <= peak["none"] * (1 + 1e-9)
    steps = {r: estimate_step(model, cluster, replace(par, recompute=r), profile).time_s for r in ("none", par.recompute)}
    assert steps[par.recompute] >= steps["none"] * (1 - 1e-9)


def test_megatron_layernorm_on_a_dense_model_is_named_as_freeing_nothing():
    """Megatron fuses a dense GQA layer's norms into its linears, so "layernorm" reruns nothing
    there: the answer says so; a MoE model's pre-MLP norm and other frameworks' norms are rerun."""
    llama = model_from_name("llama3-8b")
    warned = check_layout(llama, CLUSTER, ParallelConfig(dp=16, gbs=64, seq=4096, recompute="layernorm"))
    assert any("layernorm free nothing" in w and "fuses a dense layer's norms" in w for w in warned)
    assert not any("free nothing" in w for w in check_layout(QWEN, CLUSTER, replace(PAR, recompute="layernorm")))
    other = ParallelConfig(dp=16, gbs=64, seq=4096, recompute="layernorm", framework="deepspeed")
    assert not any("free nothing" in w for w in check_layout(llama, CLUSTER, other))
