"""Calibration recovers known efficiency knobs from results generated with them."""
import json
from dataclasses import replace

from benchmarks import results
from benchmarks.__main__ import main
from calculators.time.comm import bus_bandwidth, whole_cluster
from calculators.time.compute import gemm_time
from calculators.specs.hardware import ClusterSpec, gpu_from_name
from calculators.time.profiles import default_profile
from calculators.scenario import evaluate


def test_calibrate_recovers_the_gemm_curve_and_intra_node_efficiency(tmp_path):
    gpu = gpu_from_name("H100-80GB")
    truth = replace(default_profile("H100-80GB"), gemm_fraction=0.62, gemm_half_dim=300.0)
    truth = replace(truth, efficiency={**truth.efficiency, "intra": {**truth.efficiency["intra"], "all_gather": 0.7}})
    path = tmp_path / "measured.jsonl"
    for s in (512, 1024, 2048, 4096, 8192):
        t = gemm_time(s, s, s, gpu, truth)
        results.append(path, results.make_row("gemm", {"m": s, "n": s, "k": s, "dtype": "bf16"}, "ok", metrics={
            "m": s, "n": s, "k": s, "dtype": "bf16", "tflops": 2 * s ** 3 / t / 1e12}))
    cluster = ClusterSpec(gpu)
    for nbytes in (2**24, 2**28):
        bw = bus_bandwidth("all_gather", nbytes, whole_cluster(cluster, 1), cluster, truth)
        results.append(path, results.make_row("collectives", {"op": "all_gather", "bytes": nbytes, "placement": "world"},
                                              "ok", metrics={"op": "all_gather", "bytes": nbytes, "group_nodes": 1,
                                                             "busbw_gbps": bw}))
    out = tmp_path / "profile.json"
    assert main(["calibrate", str(path), "--gpu", "H100-80GB", "--out", str(out)]) == 0
    fitted = json.loads(out.read_text())
    assert abs(fitted["gemm_fraction"] - 0.62) < 0.01 and abs(fitted["gemm_half_dim"] - 300) / 300 < 0.05
    assert abs(fitted["efficiency"]["intra"]["all_gather"] - 0.7) < 0.01
    # the calculators load the written profile
    answer = evaluate({"model": {"preset": "llama3-8b"}, "hardware": {"gpu": "H100-80GB", "profile": str(out)},
                       "parallel": {"dp": 8, "gbs": 64, "seq": 4096, "zero": 1}})
    assert answer["step"]["time_s"] > 0


def test_calibrate_without_usable_rows_says_what_to_run(tmp_path, capsys):
    path = tmp_path / "empty.jsonl"
    path.write_text("not json\n")
    assert main(["calibrate", str(path), "--out", str(tmp_path / "p.json")]) == 2
    assert "run `python -m benchmarks gemm`" in capsys.readouterr().err.replace("\n", " ")


def test_calibrate_recovers_the_host_time_from_one_node_training_runs(tmp_path):
    """Train rows generated with a known host time (plus rows the fit must skip: another node
    count, a scenario the calculators refuse) give it back; on the bundled nanotron rows the fit
    is the profile's documented default."""
    from calculators.scenario import parse
    from calculators.time.step import estimate_step
    truth = replace(default_profile("H100-80GB"), host_ms_per_layer=7.0)
    path = tmp_path / "train.jsonl"
    for tp, mbs, nodes in ((1, 1, 1), (2, 1, 1), (4, 1, 1), (8, 1, 1), (8, 4, 1), (8, 1, 2)):
        sc = {"model": {"preset": "llama3-8b"}, "hardware": {"gpu": "H100-80GB", "nodes": nodes},
              "parallel": {"tp": tp, "sp": tp > 1, "dp": 8 * nodes // tp, "mbs": mbs, "gbs": 64 * nodes, "seq": 4096}}
        step = estimate_step(*parse(sc), truth, pipeline="closed").time_s * (3 if nodes > 1 else 1)
        results.append(path, results.make_row("train", sc, "ok", metrics={"step_time_s": step}))
    bad = {"model": {"preset": "llama3-8b"}, "hardware": {"gpu": "H100-80GB"}, "parallel": {"tp": 3, "gbs": 64}}
    results.append(path, results.make_row("train", bad, "ok", metrics={"step_time_s": 1.0}))
    out = tmp_path / "profile.json"
    assert main(["calibrate", str(path), "--gpu", "H100-80GB", "--out", str(out)]) == 0
    assert abs(json.loads(out.read_text())["host_ms_per_layer"] - 7.0) <= 0.1
    bundled = tmp_path / "nanotron.json"
    assert main(["calibrate", str(results.BUNDLED / "nanotron_h100.jsonl"), "--gpu", "H100-80GB",
                 "--out", str(bundled)]) == 0
    assert json.loads(bundled.read_text())["host_ms_per_layer"] == default_profile("H100-80GB").host_ms_per_layer


def test_calibrate_warns_of_a_degraded_fabric(tmp_path, capsys):
    """Collectives whose busbw falls with the node count as a blocking fabric's does: the fitted
    share per GPU across 16 nodes is under a fifth of the NIC, and calibration says so (the time
    model's worst errors are on jobs that measured such a fabric); a non-blocking one gets no warning."""
    gpu = gpu_from_name("H100-80GB")
    for fabric, warned in ((100.0, True), (0.0, False)):
        truth = replace(default_profile("H100-80GB"), fabric_gbps=fabric)
        path = tmp_path / f"coll{fabric:.0f}.jsonl"
        for nodes in (2, 4, 8, 16):
            cluster = ClusterSpec(gpu, nodes=nodes)
            bw = bus_bandwidth("all_reduce", 2**28, whole_cluster(cluster), cluster, truth)
            results.append(path, results.make_row(
                "collectives", {"op": "all_reduce", "bytes": 2**28, "placement": "world"}, "ok",
                metrics={"op": "all_reduce", "bytes": 2**28, "group_nodes": nodes, "busbw_gbps": bw}))
        out = tmp_path / f"profile{fabric:.0f}.json"
        assert main(["calibrate", str(path), "--gpu", "H100-80GB", "--out", str(out)]) == 0
        printed = capsys.readouterr().out
        assert ("warning: with all 16 nodes crossing the fabric" in printed) == warned, printed
        assert "warning" not in json.loads(out.read_text())["source"]
