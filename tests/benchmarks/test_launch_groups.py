"""`launch` without an engine: how configs are placed and grouped, the errors that name a config's
line, the resume rule (keys, skipped groups) and the rows a failed launch leaves."""
import json
import re

import pytest

from benchmarks import groups, results
from benchmarks.__main__ import main
from benchmarks.config import numbered_configs
from benchmarks.launch import Options, launch, record_missing
from benchmarks.sweep import pending
from calculators.specs.errors import ConfigError


@pytest.mark.parametrize("config, world", [
    ({"world": 4, "tp": 2}, 4),
    ({"nodes": 2, "gpus_per_node": 8}, 16),
    ({"dp": 2, "tp": 4, "pp": 2}, 16),
    ({"tp": 4, "pp": 2}, 8),                       # dp 1 when the config says nothing
    ({"model": "tiny"}, 1),
    ({"suite": "gemm", "m": 64, "n": 64, "k": 64}, 1),
    ({"suite": "collectives", "op": "all_reduce", "world": 8}, 8),
    ({"world": 8, "dp": 2, "tp": 4}, 8),
])
def test_the_world_a_config_needs(config, world):
    assert groups.world(config) == world


@pytest.mark.parametrize("config, message", [
    ({"world": 8, "dp": 4, "tp": 4}, "dp*tp*cp*pp = 16 disagrees with the 8 processes it asks for"),
    ({"nodes": 2}, "say nodes and gpus_per_node together, or world"),
    ({"nodes": 512, "gpus_per_node": 256}, "nodes*gpus_per_node = 131072 processes, more than 65536"),
    ({"tp": True}, "tp must be a whole number from 1 to 65536 (got True)"),
])
def test_launch_fields_that_cannot_be_placed(config, message):
    with pytest.raises(ConfigError, match=re.escape(f"c.jsonl:1: {message}")):
        groups.placement(config, "c.jsonl:1", 8)


def test_world_and_nodes_split_the_processes_evenly():
    assert groups.placement({"world": 8, "nodes": 2}, "c", 8) == (2, 4)
    with pytest.raises(ConfigError, match=re.escape("c: 8 processes are not nodes*gpus_per_node = 3*2")):
        groups.placement({"world": 8, "nodes": 3}, "c", 8)


def _write(tmp_path, configs, name="c.jsonl"):
    path = tmp_path / name
    path.write_text("# a sweep\n" + "".join(json.dumps(c) + "\n" for c in configs))
    return path


def test_configs_group_by_nodes_smallest_world_first(tmp_path):
    path = _write(tmp_path, [{"tp": 8, "pp": 2}, {"suite": "gemm"}, {"world": 16, "tp": 4},
                             {"nodes": 4, "gpus_per_node": 4}, {"tp": 2}])
    plan = groups.plan(numbered_configs(path), gpus_per_node=8)
    assert [(g.name, g.nodes, g.per_node) for g in plan] == [
        ("world1-nodes1", 1, 1), ("world2-nodes1", 1, 2), ("world16-nodes2", 2, 8), ("world16-nodes4", 4, 4)]
    assert [where for where, _ in plan[2].configs] == [f"{path}:2", f"{path}:4"]      # file order, line numbers
    assert plan[2].shape == "2 nodes x 8 processes" and plan[0].shape == "1 node x 1 process"


def test_a_world_that_is_no_whole_number_of_nodes_is_named_by_its_line(tmp_path):
    path = _write(tmp_path, [{"tp": 2}, {"world": 12}, {"world": 24, "nodes": 2, "gpus_per_node": 8},
                             {"world": "8"}, {"suite": "nope"}])
    with pytest.raises(ConfigError) as err:
        groups.plan(numbered_configs(path), gpus_per_node=8)
    assert err.value.problems == [
        f"{path}:3: 12 processes are not a whole number of nodes of 8 GPUs: use a multiple of 8, or say nodes "
        "and gpus_per_node",
        f"{path}:4: 24 processes are not nodes*gpus_per_node = 2*8",
        f"{path}:5: world must be a whole number from 1 to 65536 (got '8')",
        f"{path}:6: suite 'nope' cannot run in a sweep; choose train, collectives, gemm, attention"]


def test_the_local_backend_refuses_several_nodes(tmp_path):
    path = _write(tmp_path, [{"world": 16}, {"nodes": 2, "gpus_per_node": 1}])
    with pytest.raises(ConfigError) as err:
        groups.plan(numbered_configs(path), gpus_per_node=None)
    assert len(err.value.problems) == 1 and err.value.problems[0].startswith(f"{path}:3: asks for 2 nodes")
    assert groups.plan(numbered_configs(_write(tmp_path, [{"world": 16}])), None)[0].name == "world16-nodes1"


def test_keys_are_the_sweeps_and_tell_worlds_apart(tmp_path):
    one, two = {"model": "tiny", "world": 1}, {"model": "tiny", "world": 2}
    assert groups.key(one) != groups.key(two)
    gemm = {"suite": "gemm", "m": 64, "n": 64, "k": 64}
    (suite, config), = pending([gemm], str(tmp_path / "none.jsonl"))
    assert groups.key(gemm) == results.run_key(suite, config)
    assert groups.run_fields({"world": 2, "nodes": 1, "gpus_per_node": 2, "dp": 2, "tp": 1}) == {"tp": 1}


def test_a_failed_launch_leaves_a_row_for_each_config_it_did_not_reach(tmp_path):
    out = tmp_path / "world2-nodes1.jsonl"
    first, second = {"model": "tiny", "world": 2}, {"model": "tiny", "world": 2, "zero": 3}
    results.append(out, results.make_row("train", {"model": "tiny"}, "ok") | {"key": groups.key(first)})
    record_missing([first, second], out, "oom", "the Ray Train run failed on rank 1: OutOfMemoryError: x", "ray")
    rows = results.load(out).rows
    assert [(r["key"], r["status"]) for r in rows] == [(groups.key(first), "ok"), (groups.key(second), "oom")]
    assert rows[1]["config"] == {"model": "tiny", "zero": 3} and rows[1]["host"] == {"launcher": "ray"}


def test_a_launch_whose_results_hold_every_config_skips_each_group(tmp_path, capsys):
    configs = [{"model": "tiny", "world": 1}, {"model": "tiny", "world": 2}]
    out = tmp_path / "out"
    for c in configs:
        results.append(out / "old.jsonl", results.make_row("train", {}, "error", error="x") | {"key": groups.key(c)})
    assert launch(str(_write(tmp_path, configs)), Options(backend="ray", out=str(out))) == 0    # Ray not needed
    err = capsys.readouterr().err.splitlines()
    assert err[0] == f"launch (ray): 2 configs in 2 groups, 2 already in {out}, 0 to run"
    assert err[1:] == [f"[{i}/2] world{i}-nodes1: skipped, nothing left (1 config already in {out})" for i in (1, 2)]
    assert launch(str(_write(tmp_path, configs)), Options(out=str(out), retry_errors=True, dry_run=True)) == 0
    assert "2 to run" in capsys.readouterr().err                                     # errors run again


def test_the_cli_prints_every_misplaced_config_and_exits_2(tmp_path, capsys):
    path = _write(tmp_path, [{"world": 12}, {"world": 10}])
    assert main(["launch", str(path), "--backend", "ray", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and err[0].startswith(f"error: {path}:2: 12 processes are not a whole number of nodes")
    assert err[1].startswith(f"error: {path}:3: 10 processes")


def test_a_plain_sweep_skips_configs_that_ask_for_another_world(tmp_path, capsys):
    gemm = {"suite": "gemm", "m": 32, "n": 32, "k": 32, "dtype": "fp32", "iters": 1}
    path = _write(tmp_path, [{**gemm, "world": 2}, {**gemm, "world": 1}])
    assert main(["sweep", str(path), "--out", str(tmp_path / "o.jsonl"), "--device", "cpu"]) == 0
    rows = results.load(tmp_path / "o.jsonl").rows
    assert [r["key"] for r in rows] == [groups.key({**gemm, "world": 1})] and "world" not in rows[0]["config"]
    assert "skipping 1 config whose world is not this launch's 1" in capsys.readouterr().out
