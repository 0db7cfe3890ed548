"""The time model against runs another framework published (validation/published.py).

Nothing is fitted to these runs: they check that the model, developed on nanotron's, carries to
Megatron-Core on DGX H100 and B200 with FP8, interleaved pipelines (Megatron's uneven split
included) and context parallelism. The dense runs meet the time-model issue's 15% / 35%, and Megatron-LM's 2026
Qwen3-30B-A3B recipes come within 20%. The Bridge's MoE rows on B200 come within -10 to +35%; its
H100 rows with DeepEP do not (its Qwen3-30B-A3B ran at half the recipes' throughput on the same
GPUs; README), so those are reported, not asserted on.
"""
from dataclasses import replace
import subprocess
import sys

import pytest

from validation.published import DATA, check, flops_convention, load_runs, predict, summary


def test_dense_runs_of_another_framework_meet_the_targets():
    results = check()
    runs, median, worst, _ = summary(results)["dense"]
    assert runs >= 10
    assert median <= 0.15 and worst <= 0.35
    assert median <= 0.08 and worst <= 0.19        # chapters 4 and 13 render these (playbook/numbers.published)
    # the TP-overlapped runs of Llama 3 70B and GPT-3 175B within 12% (405B's are bounded below)
    overlapped = [r for r in results if r.run.par.tp_overlap and r.error is not None
                  and r.run.model.name != "llama3-405b"]
    assert len(overlapped) >= 5 and all(abs(r.error) <= 0.12 for r in overlapped)
    # what cannot be expressed says why, and every other row is scored
    for r in results:
        assert (r.predicted is None) == bool(r.reason)
        assert r.predicted is None or r.predicted > 0
    # Llama 3 405B: 126 layers over 64 virtual stages, Megatron's embedding-and-loss split
    l405 = [r for r in results if r.run.model.name == "llama3-405b"]
    assert len(l405) == 3 and all(r.run.par.split and abs(r.error) <= 0.15 for r in l405)


def test_later_moe_recipes_within_20_percent_with_the_expert_loops_host_time():
    """Qwen3-30B-A3B, 128 experts of 768, top 8, EP 8 on 32 H100 (4 nodes), 16 local experts. Both
    came out too fast (+20% BF16, +35% FP8) once all-gather and reduce-scatter crossed nodes at the
    rate NCCL reaches on InfiniBand (profiles.py). The FP8 one runs each local expert's
    quantization and GEMM from a Python loop after a host sync (host.EXPERT_LOOP_FP8_MS, fitted on
    Megatron-Bridge's Qwen3-30B-A3B runs in validation.stacks, not on these): -13% with it. BF16
    has no per-expert quantization and pays none; it stays +20%."""
    rows = {r.run.par.precision: r for r in check() if r.run.source == "megatron-lm"}
    assert set(rows) == {"bf16", "fp8"} and all(r.run.model.moe is not None for r in rows.values())
    assert 0.1 <= rows["bf16"].error <= 0.21 and -0.2 <= rows["fp8"].error <= -0.05, \
        {k: r.error for k, r in rows.items()}


def test_cross_node_expert_parallelism_with_deepep_and_the_all_to_all():
    """Qwen3-235B-A22B, EP 32 over 4 nodes of H100 (Megatron-Bridge, DeepEP): the model puts the
    plain all-to-all (a copy per expert, 6 of a token's 8 across the network) well behind DeepEP's
    per-node dispatch (2.7). Megatron-Bridge measured the two within 6% of each other (26.04's
    all-to-all rows are in validation.stacks, +5 to +6%), so these DeepEP rows come out 1.6 times
    too fast: a known miss, like the same tables' Qwen3-30B-A3B rows (the README's MoE
    paragraph); they had come out within 15% only while an expert compute counted twice and an
    overlap left out cancelled."""
    rows = [r for r in check() if r.run.source == "megatron-bridge" and r.run.model.name == "qwen3-235b-a22b"
            and r.run.system == "DGX-H100"]
    assert len(rows) == 2 and all(r.run.par.dispatcher == "deepep" and r.run.par.ep_overlap for r in rows)
    for r in rows:
        a2a = predict(replace(r.run, par=replace(r.run.par, dispatcher="alltoall")))
        assert a2a.predicted < 0.7 * r.predicted and r.error > 0.5


def test_flops_per_token_match_the_frameworks_own_count():
    """Model TFLOP/s over tokens/s is the framework's FLOPs per token. Ours agree within 2% on
    every dense run, under one of two attention conventions: Megatron-Bridge counts causal
    attention as half the square (ours); NeMo 24.12's Llama rows count the full square."""
    for r in check():
        if r.run.model.moe is None:
            assert not flops_convention(r).startswith("neither"), (r.run.label, r.flops_ratio)
        if r.run.source == "megatron-bridge" and r.run.model.name.startswith("llama"):
            assert flops_convention(r) == "causal"


def test_a_malformed_row_names_its_line(tmp_path):
    lines = DATA.read_text().splitlines()
    bad = tmp_path / "runs.csv"
    bad.write_text("\n".join([lines[0], lines[1].replace("DGX-H100", "DGX-Z9")]) + "\n")
    with pytest.raises(ValueError, match="line 2: system 'DGX-Z9'"):
        load_runs(bad)
    bad.write_text("\n".join([lines[0], lines[1].replace(",fp8,", ",fp4,")]) + "\n")
    with pytest.raises(ValueError, match="line 2: .*precision"):
        load_runs(bad)
    moe = next(line for line in lines if ",deepep," in line)
    bad.write_text("\n".join([lines[0], moe.replace(",deepep,", ",nccl,")]) + "\n")
    with pytest.raises(ValueError, match="line 2: dispatcher must be"):
        load_runs(bad)
    bad.write_text("model,gpus\nllama3-8b,8\n")
    with pytest.raises(ValueError, match="missing columns"):
        load_runs(bad)


def test_script_prints_the_table():
    out = subprocess.run([sys.executable, "-m", "validation.published"], capture_output=True, text=True,
                         timeout=120, check=True).stdout
    assert "| dense |" in out and "| mixture of experts, megatron-lm |" in out and "megatron-bridge" in out
