"""Two hardware widgets:
- collectives: time and bus bandwidth of a collective vs message size, for a group placed inside
  one node, across nodes, or both (hierarchical), from comm.py's latency + bandwidth model;
- roofline: the GPU's roofline with every kernel of one layer placed by its arithmetic intensity
  and the rate the time model gives it (compute.py).
"""
from __future__ import annotations

import functools
import statistics

import gradio as gr
import numpy as np

from calculators.specs.kernels import layout_attention
from calculators.time.attention import KERNEL_NAMES, attention_time, costed_kernel
from calculators.time.comm import Group, bus_bandwidth, collective_time
from calculators.time.flops import attention_flops
from calculators.specs.errors import ConfigError
from calculators.specs.hardware import GPU_PRESETS
from calculators.time.profiles import COLLECTIVES, default_profile
from calculators.scenario import parse_hardware
from playbook.plots import lines, roofline

from playbook import escape
from playbook.values import scenario_from

from . import Widget, scenario_controls, simple_widget, wire

SIZES = [float(x) for x in np.geomspace(2**10, 2**35, 26)]          # 1 KiB to 32 GiB, as nccl-tests sweeps
COLL = {
    "op": (lambda v: gr.Dropdown(list(COLLECTIVES), value=v, label="collective"), "all_reduce"),
    "gpu": (lambda v: gr.Dropdown(list(GPU_PRESETS), value=v, label="GPU"), "H100-80GB"),
    "n": (lambda v: gr.Slider(2, 1024, v, step=1, label="GPUs in the group"), 16),
    "k": (lambda v: gr.Slider(1, 8, v, step=1, label="of them per node"), 8),
}


def coll_compute(v: dict):
    n, k = int(v["n"]), int(v["k"])
    if n % k:
        raise ConfigError(f"{n} GPUs cannot sit {k} per node: make n a multiple of k")
    cluster = parse_hardware({"gpu": v["gpu"], "nodes": max(1, n // k)})
    prof = default_profile(cluster.gpu.name)
    placements = {"as placed": Group(n, k, n // k)}
    if n // k > 1 and k > 1:
        placements["one per node (NICs only)"] = Group(n, 1, n)
    if n <= cluster.gpus_per_node:
        placements["one node (NVLink only)"] = Group(n, n, 1)
    series = {f"{name}": [bus_bandwidth(v["op"], s, g, cluster, prof) for s in SIZES] for name, g in placements.items()}
    g = placements["as placed"]
    t = collective_time(v["op"], 2**28, g, cluster, prof)
    nodes = f"{n // k} node" + ("s" if n // k > 1 else "")
    text = (f"{v['op']} of 256 MiB over {n} GPUs ({k} per node on {nodes}): **{t * 1e3:.2f} ms**, bus "
            f"bandwidth {bus_bandwidth(v['op'], 2**28, g, cluster, prof):.0f} GB/s (nccl-tests' busbw convention; "
            f"GB = 10^9 bytes). Small messages are latency-bound: bandwidth falls off on the left.")
    fig = lines(SIZES, series, "message size (bytes)", "bus bandwidth (GB/s)", f"{v['op']}: bus bandwidth vs size",
                log_x=True)
    if n // k > 1:
        rows = published()
        # runs of this GPU, collective and node count on NICs as fast as the preset's (the curve's)
        here = [r for r in rows if r.gpu == v["gpu"] and r.op == v["op"] and r.nodes == n // k and k == 8
                and r.nic_gbps == cluster.inter_node_gbps]
        if here:
            fig["data"].append(dict(type="scatter", x=[r.nbytes for r in here], y=[r.measured for r in here],
                                    mode="markers", name="published nccl-tests runs",
                                    marker=dict(symbol="star", size=13, color="#222"),
                                    hovertext=[escape.plot(f"{r.source}: {r.measured:.0f} GB/s ({r.algorithm})")
                                               for r in here]))
        mine = [r for r in rows if r.gpu == v["gpu"]]
        text += (f" Across nodes this model's bus bandwidth is {-statistics.median(r.error for r in rows):.0%} below "
                 f"what {len(rows)} published nccl-tests runs measured (median"
                 + (f"; {-statistics.median(r.error for r in mine):.0%} on the {len(mine)} runs of the {v['gpu']} at "
                    "any node count" if mine else "") + ("; the stars are its runs at this node count" if here else "")
                 + "): it runs a collective's NVLink and network phases one after the other, where NCCL overlaps "
                 "them. Read it as a floor across nodes.")
    return fig, text


@functools.lru_cache(maxsize=1)
def published() -> tuple:
    """The published multi-node nccl-tests runs with this model's predictions (validation.collectives)."""
    from validation.collectives import load
    return tuple(load())


def build_collectives(wid: str, params: dict) -> Widget:
    return simple_widget(wid, params, COLL, coll_compute, "collective cost")


def roof_compute(v: dict):
    from calculators.time.compute import gemm_time
    from calculators.specs.frameworks import fused_matmuls
    model, cluster, par = scenario_from(v)
    kv = model.kv_heads if model.mla is None else model.heads
    if model.heads % par.tp or kv % par.tp:
        valid = [t for t in range(1, 65) if model.heads % t == 0 and kv % t == 0]
        raise ConfigError(f"tp={par.tp} must divide heads={model.heads} and kv_heads={kv} (each TP rank owns "
                          f"whole heads); try tp in {valid}")
    gpu, prof = cluster.gpu, default_profile(cluster.gpu.name)
    T = par.mbs * par.seq / par.cp
    points = []
    for mm in fused_matmuls(model.layer_matmuls(bool(model.layer_kinds[-1])), par.framework):
        shard = par.tp if mm.tp in ("col", "row") and not mm.expert else 1
        m_, kdim, n_ = T * (mm.used if mm.expert else 1), mm.fan_in / (shard if mm.tp == "row" else 1), \
            mm.fan_out / (shard if mm.tp == "col" else 1)
        flops = 2 * m_ * kdim * n_
        nbytes = 2 * (m_ * kdim + kdim * n_ + m_ * n_)
        rate = flops / gemm_time(m_, n_, kdim, gpu, prof) / 1e12
        points.append((mm.name, flops / nbytes, rate))
    points.append(("RMSNorm", 0.5, gpu.hbm_tbps * prof.hbm_fraction * 0.5))
    points.append(("SwiGLU / residual", 0.33, gpu.hbm_tbps * prof.hbm_fraction * 0.33))
    # causal FLOPs per byte of q, k, v and o (bf16), over the keys each query sees on average (a
    # windowed layer's fewer): context / 2 with a head dim of d for all four
    d_qk, d_v = model.q_dim / model.heads, model.attn_out_dim / model.heads
    ai_attn = attention_flops(model, par.seq, causal=True) / (model.heads * 2 * (2 * d_qk + 2 * d_v))
    # the time model's attention (layer_time's kernel choice), forward + backward: 3.5x the forward's FLOPs
    kernel = costed_kernel(layout_attention(par, gpu.name), gpu.name)
    attn_flops = T * attention_flops(model, par.seq, causal=True) / par.tp
    attn_rate = 3.5 * attn_flops / sum(attention_time(model, par, kernel, gpu, prof)) / 1e12
    points.append((f"attention ({KERNEL_NAMES[kernel]})", ai_attn, attn_rate))
    ridge = gpu.bf16_tflops / gpu.hbm_tbps
    text = (f"{gpu.name}: {gpu.bf16_tflops:.0f} TFLOP/s dense bf16, {gpu.hbm_tbps} TB/s HBM: kernels below "
            f"**{ridge:.0f} FLOP/byte** are memory-bound. Points: one layer of {escape.md(model.name)} at tp {par.tp}, "
            f"{T:.0f} tokens per micro-batch, its GEMMs fused as {par.framework} runs them, at the rate the time model "
            "gives each kernel.")
    return roofline(gpu.bf16_tflops, gpu.hbm_tbps, points, f"{gpu.name} roofline, {model.name}"), text


def build_roofline(wid: str, params: dict) -> Widget:
    with gr.Group():
        controls, defaults = scenario_controls(params, ("model", "gpu", "tp", "mbs", "seq"),
                                               show=("model", "gpu", "tp", "mbs", "seq"))
        plot = gr.Plot(label="roofline")
        text = gr.Markdown(latex_delimiters=[])
    return wire(Widget(wid, controls, defaults), roof_compute, [plot, text])

