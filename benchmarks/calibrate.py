"""`python -m benchmarks calibrate RESULTS --gpu H100-80GB --out my_cluster.json`: fit the hardware
profile's efficiency knobs to measured results and write a profile the calculators and the app
load (`"hardware": {"profile": "my_cluster.json"}`).

What is fitted, from which rows (status ok, measured on the given GPU):
- gemm rows (bf16): `gemm_fraction` and `gemm_half_dim` of compute.gemm_time's curve (the math
  at peak x gemm_fraction x d / (d + gemm_half_dim), d the smallest GEMM dimension, plus the
  operands' HBM time), by least squares on the log of the time (a grid over both);
- collectives rows: each collective's intra-node bus-bandwidth efficiency and the fabric limit
  (calculators/time/calibrate.py, fit_network);
- train rows on one node (the network not in question): `host_ms_per_layer`, the host's time to
  issue a layer's forward and backward, by least absolute deviations of the log of the step time
  (one broken run, such as the bundled 1.34B one that measured 485 tokens/s where its twin ran
  27,000, cannot pull it as it would a sum of squares) over a grid
  (coarse, then fine around the best), with the GEMM curve above already in place. Only runs
  whose GPU work per layer is under the host's time inform it (small micro-batches, wide TP).
  Without gemm rows, the same runs also give `gemm_fraction` (fit_host_and_gemm): the GPU-bound
  ones inform it.
Everything else keeps the GPU's default profile; the profile's source says what was fitted.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from calculators.time.calibrate import fit_network
from calculators.time.comm import DEGRADED_FABRIC, fabric_share
from calculators.time.compute import gemm_terms
from calculators.specs.errors import ConfigError
from calculators.specs.hardware import ClusterSpec, GPUSpec, gpu_from_name
from calculators.specs.parallel import check_layout
from calculators.time.profiles import HardwareProfile, default_profile, save_profile
from calculators.scenario import parse
from calculators.time.step import estimate_step

from . import results


def fit_gemm(profile: HardwareProfile, gpu: GPUSpec, rows) -> HardwareProfile:
    """rows: (m, n, k, measured TFLOP/s). GEMMs that take under twice the profile's minimum
    kernel time are left out: launch overhead, not the efficiency curve, sets their rate."""
    floor = 2 * profile.kernel_us * 1e-6
    rows = [(m, n, k, 2 * m * n * k / (t * 1e12)) for m, n, k, t in rows
            if t > 0 and 2 * m * n * k / (t * 1e12) > floor]
    if not rows:
        return profile
    measured = np.log([r[3] for r in rows])
    fracs = np.geomspace(0.05, 1.5, 400)[:, None]
    one_size = len({min(r[:3]) for r in rows}) == 1           # one size: the curve's bend is unknown
    best = None
    for half in [profile.gemm_half_dim] if one_size else np.geomspace(1.0, 16384.0, 200):
        # at gemm_fraction 1 the math takes A, so at f it takes A / f; the HBM term B does not move
        unit = replace(profile, gemm_fraction=1.0, gemm_half_dim=float(half))
        a, b = np.array([gemm_terms(m, n, k, gpu, unit) for m, n, k, _ in rows]).T
        err = np.sum((np.log(a / fracs + b) - measured) ** 2, axis=1)
        i = int(np.argmin(err))
        if best is None or err[i] < best[0] - 1e-12:
            best = (float(err[i]), float(half), float(fracs[i, 0]))
    return replace(profile, gemm_fraction=min(1.5, best[2]), gemm_half_dim=best[1])


def fit_host(profile: HardwareProfile, runs) -> HardwareProfile:
    """runs: (model, cluster, par, measured step seconds) on one node."""
    return _fit_host(profile, [r for r in runs if r[3] > 0])[0]


def _fit_host(profile: HardwareProfile, runs) -> tuple[HardwareProfile, float]:
    if not runs:
        return profile, 0.0
    measured = np.log([r[3] for r in runs])

    def loss(host_ms: float) -> float:
        trial = replace(profile, host_ms_per_layer=float(host_ms))
        pred = np.log([estimate_step(m, c, p, trial, pipeline="closed").time_s for m, c, p, _ in runs])
        return float(np.sum(np.abs(pred - measured)))

    best = min(np.arange(0.0, 20.01, 1.0), key=loss)
    best = min(np.arange(max(0.0, best - 1.0), best + 1.001, 0.1), key=loss)
    return replace(profile, host_ms_per_layer=round(float(best), 2)), loss(best)


def fit_host_and_gemm(profile: HardwareProfile, runs) -> HardwareProfile:
    """Without GEMM rows: `gemm_fraction` and `host_ms_per_layer` together from one-node training
    runs (the GPU-bound ones set the first, the host-bound ones the second), the GEMM curve's bend
    left at the profile's. A grid over the fraction (0.05 apart, then 0.01 around the best), the
    host time fitted at each."""
    runs = [r for r in runs if r[3] > 0]

    def fit(frac: float):
        return _fit_host(replace(profile, gemm_fraction=round(float(frac), 2)), runs)

    best = min(np.arange(0.40, 0.901, 0.05), key=lambda f: fit(f)[1])
    best = min(np.arange(best - 0.04, best + 0.041, 0.01), key=lambda f: fit(f)[1])
    return fit(best)[0]


def _train_runs(rows, gpu_name: str) -> list:
    """One-node train rows measured on this GPU as (model, cluster, par, step seconds); a row
    whose scenario the calculators refuse is left out."""
    out = []
    for r in rows:
        if r["suite"] != "train" or r["status"] != "ok" or not r["metrics"].get("step_time_s"):
            continue
        scenario = r["config"].get("scenario", r["config"])
        try:
            model, cluster, par = parse({k: scenario[k] for k in ("model", "hardware", "parallel")})
            check_layout(model, cluster, par)
        except (ConfigError, KeyError, TypeError):
            continue
        if cluster.nodes == 1 and cluster.gpu.name == gpu_name:
            out.append((model, cluster, par, float(r["metrics"]["step_time_s"])))
    return out


def _degraded_fabric(cluster: ClusterSpec, prof: HardwareProfile) -> list[str]:
    share, nic = fabric_share(cluster, prof), cluster.inter_node_gbps
    if cluster.nodes == 1 or share >= DEGRADED_FABRIC * nic:
        return []
    return [f"warning: with all {cluster.nodes} nodes crossing the fabric each GPU gets {share:.1f} GB/s, "
            f"under {DEGRADED_FABRIC:.0%} of its NIC's {nic:.0f} GB/s; on jobs that measured a fabric like this "
            "the step-time model was least reliable (README, time-model section). Look for congestion or a "
            "degraded link, and re-measure, before planning on it"]


def calibrate_rows(rows, gpu_name: str) -> tuple[HardwareProfile, list[str]]:
    gpu = gpu_from_name(gpu_name)
    base = default_profile(gpu_name)
    gemms = [(r["metrics"]["m"], r["metrics"]["n"], r["metrics"]["k"], r["metrics"]["tflops"])
             for r in rows if r["suite"] == "gemm" and r["status"] == "ok" and r["metrics"].get("dtype") == "bf16"]
    colls = [(r["metrics"]["op"], r["metrics"]["group_nodes"], r["metrics"]["bytes"], r["metrics"]["busbw_gbps"])
             for r in rows if r["suite"] == "collectives" and r["status"] == "ok"
             and r["config"].get("placement", "world") in ("world", "intra")]
    notes = []
    prof = fit_gemm(base, gpu, gemms)
    if gemms:
        notes.append(f"GEMM curve from {len(gemms)} bf16 GEMMs: gemm_fraction {prof.gemm_fraction:.3f}, "
                     f"gemm_half_dim {prof.gemm_half_dim:.0f}")
    if colls:
        nodes = max(c[1] for c in colls)
        prof = fit_network(prof, ClusterSpec(gpu, nodes=nodes), colls)
        notes.append(f"network from {len(colls)} collectives on up to {nodes} node(s): fabric_gbps {prof.fabric_gbps:.0f}")
        notes += _degraded_fabric(ClusterSpec(gpu, nodes=nodes), prof)
    train = _train_runs(rows, gpu_name)
    if train and not gemms:
        prof = fit_host_and_gemm(prof, train)
        notes.append(f"GEMM rate and host time from {len(train)} one-node training runs (no gemm rows): "
                     f"gemm_fraction {prof.gemm_fraction:.2f} (gemm_half_dim {prof.gemm_half_dim:.0f} kept), "
                     f"host_ms_per_layer {prof.host_ms_per_layer:.2f}")
    elif train:
        prof = fit_host(prof, train)
        notes.append(f"host time from {len(train)} one-node training runs: host_ms_per_layer "
                     f"{prof.host_ms_per_layer:.2f}")
    if not notes:
        raise ConfigError("no ok bf16 gemm, collectives or one-node train rows to fit: run `python -m benchmarks "
                          "gemm`, `torchrun ... -m benchmarks collectives` and `torchrun ... -m benchmarks train` "
                          "on the GPUs first")
    fitted = "; ".join(n for n in notes if not n.startswith("warning"))
    prof = replace(prof, name=f"{gpu_name}-calibrated", source=f"{base.source}; calibrated: {fitted}")
    return prof, notes


def calibrate(paths, gpu_name: str, out: str) -> int:
    loaded = results.load(*paths)
    for p in loaded.problems:
        print(f"skipped {p}")
    prof, notes = calibrate_rows(loaded.rows, gpu_name)
    save_profile(prof, out)
    print("\n".join(notes) + f"\nwrote {out}; use it with \"hardware\": {{\"profile\": \"{out}\"}}")
    return 0
