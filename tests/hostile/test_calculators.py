"""Hostile input against the calculators' entry points: `estimate` and `plan` (the CLI and in
process) and config.json import. A corpus of the cases found by hand (corpus/*.jsonl, one case a
line, kept as text so a line may be anything) plus generated ones too large to keep, plus
hypothesis. Each must end in an answer or a clear ConfigError naming the field, within a second,
never a traceback, a hang, a non-finite number or invalid JSON."""
import io
import json
import math
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from calculators import __main__ as cli
from calculators.specs import limits
from calculators.specs.errors import ConfigError
from calculators.specs.hf_config import from_hf_config
from calculators.scenario import answer, evaluate_line, plan_answer

CORPUS = Path(__file__).parent / "corpus"
ROOT = Path(__file__).resolve().parents[2]
SECOND = 1.0


def corpus(name: str) -> list[bytes]:
    return [line for line in (CORPUS / name).read_bytes().splitlines() if line.strip()]


def generated() -> list[bytes]:
    """Cases too large to keep in the repository."""
    return [b"[" * 100_000 + b"]" * 100_000,                                           # RecursionError in json
            b'{"model": {"preset": "llama3-8b"}, "parallel": {"gbs": ' + b"9" * 5000 + b"}}",   # over 4,300 digits
            b'{"model": {"preset": "llama3-8b"}, "parallel": {"gbs": ' + b"9" * 4000 + b"}}",   # readable, absurd
            b'{"model": {"name": "' + b"x" * (2 * 2**20) + b'"}}',                       # over the line limit
            b"\xff\xfe\x00 not utf-8",
            b'{"model": {"preset": "llama3-8b\xed\xa0\x80"}}',                          # a lone surrogate
            b'{"a": ' * 31 + b"1" + b"}" * 31]                                          # deep but legal JSON


def strict_loads(text):
    def refuse(name):
        raise ValueError(f"{name} in the output")
    return json.loads(text, parse_constant=refuse)


def assert_answer(result: dict, what) -> None:
    """An answer is strict JSON: an error naming what to change, or memory and step with finite,
    non-negative numbers (the breakdown's parts included)."""
    json.dumps(result, allow_nan=False)
    if "error" in result:
        assert isinstance(result["error"], str) and result["error"], what
        assert "internal error" not in result["error"], (what, result["error"])
        return
    step, memory = result["step"], result["memory"]
    assert step["time_s"] > 0 and memory["total_gib"] > 0, what
    for key, value in step["breakdown_s"].items():
        assert value >= -1e-9 * step["time_s"], (what, key, value)


def test_estimate_cli_answers_every_line_in_strict_json():
    lines = corpus("estimate.jsonl") + generated()
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "calculators", "estimate"], input=b"\n".join(lines) + b"\n",
                         capture_output=True, cwd=ROOT, timeout=120)
    seconds = time.perf_counter() - t0
    answers = out.stdout.decode().splitlines()
    assert "Traceback" not in out.stderr.decode(), out.stderr.decode()[-2000:]
    assert len(answers) == len(lines), (len(answers), len(lines))
    for line, text in zip(lines, answers):
        assert_answer(strict_loads(text), line[:120])
    assert out.returncode == 1                             # some lines are not JSON: said in the exit code
    assert "memory" in strict_loads(answers[len(corpus("estimate.jsonl")) - 1])    # the valid last corpus line
    assert seconds < 2 * SECOND * len(lines) ** 0.5, seconds


@pytest.mark.parametrize("line", corpus("estimate.jsonl") + generated(), ids=lambda b: b[:40].decode("latin-1"))
def test_each_estimate_case_is_answered_within_a_second(line):
    t0 = time.perf_counter()
    result = evaluate_line(line)
    assert time.perf_counter() - t0 < SECOND, line[:120]
    assert_answer(result, line[:120])


def test_errors_name_the_field_the_value_and_the_limit():
    said = {line: evaluate_line(line).get("error", "") for line in corpus("estimate.jsonl")}
    expected = {b'"gbs": 1000000000000000000': "parallel.gbs must be from 1 to 16,777,216",
                b'"vocab": 1.5': "model.vocab must be a whole number",
                b'"layers": true': "model.layers must be a whole number",
                b'"flash": "no"': "parallel.flash must be true or false",
                b'"profile": "/tmp"': "is not a regular file",
                b'"profile": {"efficiency": -1}': "profile.efficiency must be an object",
                b'"gbs": NaN': "NaN and Infinity are not JSON numbers",
                b'"gbs": 1e999': "too large for a float",
                b'"nodes": 1000000000': "hardware.nodes must be from 1 to 131,072",
                b'"split": {}': "parallel.split (layers of each pipeline stage) must be a list",
                b'"loss": "fused"': "parallel.loss must be one of",
                b'"moe_every": 2}}': "model.ffn must be positive (got 0): 1 layer(s) have a dense MLP",
                b'"fabric_gbps": 5e-324': "profile.fabric_gbps must be 0 or at least 0.001 GB/s",
                b'"inter_node_gbps": 5e-324': "hardware.inter_node_gbps must be 0 or at least 0.001 GB/s",
                b'"moe_imbalance": 1000000000': "parallel.moe_imbalance must be a number from 1 to 64",
                b'"window": 1000000000': "model.window must be from 0 to 16,777,216",
                b'"window_layers": 999': "model.window_layers=999 must be from 1 to layers=4 with a window",
                b'"deepspeed", "elementwise": "eager-fused-norm"': "deepspeed runs Hugging Face's modules",
                b'"eager-fused-norm<img': "parallel.elementwise must be one of"}
    for fragment, message in expected.items():
        hits = [error for line, error in said.items() if fragment in line]
        assert hits and all(message in e for e in hits), (fragment, hits)


def test_in_process_values_json_cannot_carry_are_refused():
    """answer() takes a dict: an integer of over 4,300 digits (no JSON line carries one past the
    parser) is refused with the part named, not an internal error."""
    said = answer({"model": {"layers": 10**5000, "hidden": 1, "heads": 1, "ffn": 1, "vocab": 1}})
    assert "model holds a value JSON cannot carry" in said["error"]
    said = answer({"model": {"preset": "llama3-8b"}, "hardware": {"profile": {"kernel_us": 10**5000}}})
    assert "hardware.profile holds a value JSON cannot carry" in said["error"]


def test_a_line_over_its_time_budget_is_answered_and_the_next_line_still_runs(monkeypatch):
    """The CLI's wall-clock alarm: a line that runs too long gets an error, the stream goes on."""
    def slow(scenario):
        if scenario.get("slow"):
            while True:
                pass
        return {"ok": True}
    monkeypatch.setattr(cli, "answer", slow)
    stdin = io.TextIOWrapper(io.BytesIO(b'{"slow": true}\n{"fast": true}\n'))
    out = io.StringIO()
    monkeypatch.setattr(sys, "stdin", stdin)
    monkeypatch.setattr(sys, "stdout", out)
    t0 = time.perf_counter()
    assert cli.main(["estimate", "--budget-s", "0.2"]) == 0
    assert time.perf_counter() - t0 < 2
    first, second = map(json.loads, out.getvalue().splitlines())
    assert "0.2 s budget" in first["error"] and second == {"ok": True}


@pytest.mark.parametrize("line", corpus("plan.jsonl"), ids=lambda b: b[:50].decode())
def test_each_plan_request_is_answered_or_refused_within_a_second(line):
    request = json.loads(line, parse_constant=lambda c: float(c))
    t0 = time.perf_counter()
    try:
        with limits.time_budget(SECOND):
            result = plan_answer(request)
        json.dumps(result, allow_nan=False)
        assert result["plans"] or result["impossible"]
    except ConfigError as exc:
        assert str(exc) and "Traceback" not in str(exc)
    # the budget is checked between layouts: a search stops within a fraction of a second past it
    assert time.perf_counter() - t0 < 1.5 * SECOND, line


@pytest.mark.parametrize("request_text, says", [
    ('{"model": {"preset": "llama3-8b"}, "seq": 4096, "gbs": 64, "top": "x"}', "plan.top must be a whole number"),
    ('{"model": {"preset": "llama3-8b"}, "seq": 4096, "gbs": 64, "top": null}', "plan.top must be a whole number"),
    ('{"model": {"preset": "llama3-8b"}, "seq": 4096, "gbs": 64, "constraints": {"tp_across_nodes": "false"}}',
     "tp_across_nodes must be true or false"),
    ('[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]', "not valid JSON"),
    ('{"model": {"preset": "llama3-8b"}, "hardware": {"nodes": 1000000000}, "seq": 4096, "gbs": 64}',
     "hardware.nodes must be from 1 to 131,072")])
def test_plan_cli_refuses_with_one_clear_line(request_text, says):
    out = subprocess.run([sys.executable, "-m", "calculators", "plan"], input=request_text, text=True,
                         capture_output=True, cwd=ROOT, timeout=60)
    assert out.returncode == 2 and "Traceback" not in out.stderr and says in out.stderr, out.stderr[-500:]
    assert out.stderr.count("\n") == 1


@pytest.mark.parametrize("line", corpus("hf_config.jsonl") + generated(), ids=lambda b: b[:40].decode("latin-1"))
def test_each_config_json_is_read_or_refused_within_a_second(line):
    t0 = time.perf_counter()
    try:
        model = from_hf_config(line)
        assert model.total_params > 0
    except ConfigError as exc:
        assert "config.json" in str(exc) or "model." in str(exc), str(exc)
    assert time.perf_counter() - t0 < SECOND


def test_config_json_errors_name_the_config_key():
    said = {}
    for line in corpus("hf_config.jsonl"):
        try:
            from_hf_config(line)
        except ConfigError as exc:
            said[line] = str(exc)
    assert "config.json num_hidden_layers must be a whole number from 1 to 1,024 (got 1000000000.0)" in \
        said[corpus("hf_config.jsonl")[0]]
    assert any("config.json tie_word_embeddings must be true or false (got 'no')" in s for s in said.values())
    assert any("config.json vocab_size must be a whole number" in s for s in said.values())
    assert any("model_type '<img src=" in s for s in said.values())     # quoted as text: widgets escape it


# ---------------------------------------------------------------------------------- hypothesis
JSON = st.recursive(st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.text(max_size=20)
                    | st.floats(allow_nan=True, allow_infinity=True),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
                    max_leaves=12)
VALID = {"model": {"preset": "llama3-8b"}, "hardware": {"gpu": "H100-80GB", "nodes": 2},
         "parallel": {"dp": 4, "tp": 4, "pp": 1, "zero": 1, "sp": True, "mbs": 1, "gbs": 64, "seq": 4096}}
PATHS = [("model", "preset"), ("hardware", "gpu"), ("hardware", "nodes"), ("hardware", "gpus_per_node"),
         ("hardware", "profile")] + [("parallel", k) for k in (
             "dp", "tp", "pp", "cp", "ep", "etp", "vpp", "zero", "sp", "mbs", "gbs", "seq", "recompute", "schedule",
             "precision", "framework", "split", "recompute_ranks", "flash", "tp_overlap", "dispatcher", "experts",
             "grad_dtype", "moment_dtype", "offload_layers", "attention", "loss", "elementwise", "master_dtype",
             "fp8_recipe", "fp8_weights", "offload_modules")]
FAST = settings(max_examples=150, deadline=int(SECOND * 1000), suppress_health_check=[HealthCheck.too_slow])


def _serialisable(value):
    """What a JSON line can carry (json.dumps writes NaN, inf; the CLI's parser refuses them)."""
    return json.dumps(value, allow_nan=True)


@FAST
@given(st.lists(st.tuples(st.sampled_from(PATHS), JSON | st.integers(0, 2**25)), min_size=1, max_size=4))
def test_any_scenario_is_answered_in_strict_json(changes):
    scenario = json.loads(json.dumps(VALID))
    for (part, key), value in changes:
        scenario[part][key] = value
    assert_answer(evaluate_line(_serialisable(scenario)), scenario)
    assert_answer(answer(scenario), scenario)            # in process too: no parser in front of it


@FAST
@given(JSON)
def test_any_json_line_is_answered(value):
    assert_answer(evaluate_line(_serialisable(value)), value)


HF_KEYS = ["model_type", "num_hidden_layers", "hidden_size", "num_attention_heads", "num_key_value_heads",
           "intermediate_size", "vocab_size", "head_dim", "tie_word_embeddings", "num_local_experts",
           "num_experts_per_tok", "num_experts", "moe_intermediate_size", "mlp_only_layers", "n_routed_experts",
           "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "text_config", "_name_or_path",
           "n_group", "topk_group", "topk_method", "sliding_window", "layer_types", "attention_chunk_size",
           "no_rope_layers", "no_rope_layer_interval", "interleave_moe_layer_step", "intermediate_size_mlp",
           "moe_layers", "use_qk_norm", "attention_bias", "experts_per_token", "shared_intermediate_size",
           "first_k_dense_replace", "n_shared_experts"]


@FAST
@given(st.sampled_from(["llama", "mixtral", "qwen3_moe", "deepseek_v3", "gpt2", "gpt_neox", "bert", "gpt_oss",
                        "llama4", "llama4_text", "glm4_moe", "minimax_m2", "kimi_k2", "qwen3_next"]),
       st.dictionaries(st.sampled_from(HF_KEYS), JSON | st.integers(-10, 2**31), max_size=10))
def test_any_config_json_is_read_or_refused(kind, fields):
    cfg = {"model_type": kind, "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
           "intermediate_size": 128, "vocab_size": 1000, **fields}
    try:
        model = from_hf_config(_serialisable(cfg))
    except ConfigError:
        return
    assert model.total_params > 0 and math.isfinite(model.active_params)


PLAN_PATHS = ["seq", "gbs", "top", "hardware", "constraints"]


@FAST
@given(st.dictionaries(st.sampled_from(PLAN_PATHS), JSON | st.integers(0, 2**25), max_size=3),
       st.dictionaries(st.sampled_from(["tp", "pp", "mbs", "zero", "recompute", "schedule", "framework",
                                        "tp_across_nodes", "uneven_split", "top", "precision", "master_dtype",
                                        "fp8_recipe", "fp8_weights", "offload_modules"]), JSON, max_size=3))
def test_any_plan_request_is_answered_or_refused_within_its_budget(fields, constraints):
    request = {"model": {"preset": "llama3-8b"}, "hardware": {"nodes": 1}, "seq": 4096, "gbs": 64, **fields}
    if "constraints" not in fields:
        request["constraints"] = constraints
    try:
        with limits.time_budget(SECOND / 2):
            json.dumps(plan_answer(json.loads(_serialisable(request))), allow_nan=False)
    except ConfigError:
        pass


def test_readme_states_every_limit():
    from calculators.pipeline.simulate import SIM_OPS
    from calculators.specs.validate import _fmt
    from playbook.url import MAX_VALUE
    from playbook.values import MAX_CONFIG_CHARS
    from playbook.widgets import WIDGET_BUDGET_S
    section = (ROOT / "README.md").read_text().split("## Input limits")[1].split("\n## ")[0]
    for field, _, hi in limits.table():
        assert _fmt(hi) in section, field
    for value in (limits.MAX_JSON_BYTES, limits.MAX_JSON_DEPTH, SIM_OPS, MAX_CONFIG_CHARS, MAX_VALUE):
        assert _fmt(value) in section, value
    assert f"a widget call in the app: {WIDGET_BUDGET_S:g} s" in section


def test_json_is_read_without_a_garbage_collection_in_its_recursion(monkeypatch):
    """json recurses once per nesting level up to Python's recursion limit; a garbage collection
    down there would run other objects' finalizers with no stack left (unraisable errors, which
    once failed this suite at random). validate.loads keeps the collector off while json reads,
    and on again after, whether the text was read or refused."""
    import gc
    import json
    from types import SimpleNamespace
    from calculators.specs import validate
    from calculators.specs.errors import ConfigError
    reading, collected = [False], []

    def read(*args, **kwargs):
        reading[0] = True
        try:
            return json.loads(*args, **kwargs)
        finally:
            reading[0] = False
    monkeypatch.setattr(validate, "json", SimpleNamespace(loads=read, JSONDecodeError=json.JSONDecodeError))
    callback = lambda phase, info: collected.append(phase) if reading[0] else None   # noqa: E731
    threshold = gc.get_threshold()
    gc.set_threshold(1)                    # any allocation would collect
    gc.callbacks.append(callback)
    try:
        for text in (b"[" * 5000 + b"]" * 5000, b"[" * 40 + b"]" * 40, b'{"a": [1, 2, {"b": 3}]}'):
            try:
                validate.loads(text, "text")
            except ConfigError:
                pass
            assert gc.isenabled()
    finally:
        gc.callbacks.remove(callback)
        gc.set_threshold(*threshold)
    assert collected == []


def test_parsed_models_and_clusters_are_cached_only_from_short_texts():
    """A sweep's repeated model and hardware are parsed once (kept by their JSON text), but a client
    sending large configs cannot fill the caches: texts over CACHED_TEXT are parsed every time and
    kept nowhere, and give the same answer as a short one."""
    from calculators import scenario
    for cache in (scenario._model_cached, scenario._hardware_cached):
        cache.cache_clear()
    padding = {"name_or_path": "x" * scenario.CACHED_TEXT}
    config = {"model_type": "llama", "hidden_size": 1024, "num_hidden_layers": 4, "num_attention_heads": 16,
              "intermediate_size": 4096, "vocab_size": 32000, "max_position_embeddings": 4096}
    small = scenario.parse_model({"hf_config": config})
    large = scenario.parse_model({"hf_config": {**config, **padding}})
    assert (large.layers, large.hidden, large.vocab) == (small.layers, small.hidden, small.vocab)
    gpu = {"name": "custom", "memory_gib": 80, "bf16_tflops": 900, "fp8_tflops": 0, "hbm_tbps": 3.0}
    cluster = scenario.parse_hardware({"gpu": gpu, "nodes": 2})
    with pytest.raises(ConfigError):
        scenario.parse_hardware({"gpu": gpu, "nodes": 2, "x": "y" * scenario.CACHED_TEXT})
    assert scenario.parse_hardware({"gpu": gpu, "nodes": 2}) is cluster                # the cached one
    assert scenario._model_cached.cache_info().currsize == 1
    assert scenario._hardware_cached.cache_info().currsize == 1


@pytest.mark.parametrize("budget", ["1e10", "inf", "1e308", "nan", "-1", "ten"])
def test_a_budget_the_alarm_cannot_hold_is_refused_by_name(budget, capsys):
    """--budget-s 1e10 overflowed the alarm timer (no line answered) and nan meant no limit."""
    with pytest.raises(SystemExit) as stop:
        cli.main(["estimate", "--budget-s", budget])
    assert stop.value.code == 2 and "argument --budget-s" in capsys.readouterr().err


def test_a_config_whose_fields_cannot_go_together_names_their_config_keys():
    """A check of fields together names the model's fields; a config's reader gets its own keys too
    ('model.moe.groups' is nowhere in a DeepSeek config.json: n_group is)."""
    moe = {"model_type": "deepseek_v3", "num_hidden_layers": 4, "hidden_size": 256, "num_attention_heads": 4,
           "intermediate_size": 512, "vocab_size": 1000, "n_routed_experts": 8, "num_experts_per_tok": 2,
           "moe_intermediate_size": 64, "n_group": 3, "topk_group": 1, "kv_lora_rank": 64, "q_lora_rank": 64,
           "qk_rope_head_dim": 16, "qk_nope_head_dim": 32, "v_head_dim": 32}
    gpt2 = {"model_type": "gpt2", "n_layer": 2, "n_embd": 64, "n_head": 4, "vocab_size": 100, "n_positions": 128,
            "n_inner": 0}
    for cfg, says in ((moe, "model.moe.groups is config.json's n_group"), (gpt2, "GPT-2's n_inner")):
        with pytest.raises(ConfigError, match=re.escape(says)):
            from_hf_config(json.dumps(cfg))
