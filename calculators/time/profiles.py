"""Hardware profiles: the efficiency knobs of the time model, per GPU and cluster, with sources.

A datasheet gives peaks; a profile says how much of them real kernels and collectives get. Every
knob has a default and the source it came from; a profile is plain data, loadable from JSON, so
`python -m benchmarks calibrate` can fit one from measured results ("your cluster") and the
calculators and the app can load it.

    profile = load_profile("my_cluster.json", default_profile("B200"))   # keys not given keep the base's

Knobs:
- GEMMs (compute.gemm_time): the math runs at `gemm_fraction` of the dense peak, d / (d +
  gemm_half_dim) of that where the smallest dimension d is small, and the operands and result
  stream through HBM at `hbm_fraction`, the two added. H100's 0.70 is what a large bf16 GEMM
  sustains at the card's 700 W power cap, measured on our H100 (8192^3 products back to back for
  25 s: 690 TFLOP/s with the SM clock down to about 1,400 MHz; a single burst reaches 0.80;
  validation/data/h100_harness). It is the GPU's rate; a framework's GEMMs may reach less inside a
  step (frameworks.gemm_scale: nanotron's one-node runs fit 0.59). Megatron/NeMo's bf16 runs on
  H100 and torchtitan's come out at it: validation.stacks, whose held-out runs went from 10.2% to
  4.5% median error when this moved from the nanotron fit to the measurement. gemm_half_dim 128 is
  one Hopper GEMM tile:
  a smallest dimension one tile wide half-fills what a large one does. Among 64, 128, 256 and 512
  it is where the one-node nanotron runs (median error 3.3%, against 3.6 to 7.0%) and the
  published FP8 dense runs (3.3%, against 3.6 to 8.2%) come out best, though the whole nanotron
  set's p90 was lowest at 512 when it was chosen (37.5% against 38.7%); a GPU's gemm rows refit
  both knobs. FP8 GEMMs reach `fp8_gemm_fraction` of the FP8 peak.
  Blackwell and MI300X keep H100's two fractions times how their sustained GEMM rate stands to
  H100's in one benchmark run the same way on each: Azure's AI benchmarking guide (cuBLASLt or
  hipBLASLt FP8, random operands, 10,000 warm-up products, so at the power cap) at 8192^3: H100
  1,290 TFLOP/s (0.652 of 1,979), GB200 2,782 (0.556 of 5,000; 0.85 of H100's share), MI300X
  1,223 (0.468 of 2,615; 0.72 of H100's share). That benchmark is FP8 only; bf16 is taken to lose
  the same share. XLA's table of measured GEMM rates (matmul_interpolator_data.h in XLA's GPU cost
  model) agrees in bursts: bf16 4096^3 at 1,417 TFLOP/s on sm_100 against 780 on sm_90, 0.80 of
  H100's share at a B200's peak.
- attention: FlashAttention-2's forward + backward reaches `attention_fraction` of the bf16 peak at
  its plateau (causal, head dim 128, 16k tokens); calculators/time/attention.py scales every kernel
  (FA2, cuDNN, FA3) and length from there by H100 measurements (the FlashAttention-3 paper's and
  ours), and Blackwell's cuDNN by its own measured rows. H100: 303 TFLOP/s there, 0.306 of the
  peak; GB200 0.138 and GB300 0.148 (FA2 barely faster than on H100), MI300X 0.265.
- memory-bound ops (norms, activations, residuals, RoPE, the optimizer) move their bytes at
  `hbm_fraction` of the HBM bandwidth; every kernel costs at least `kernel_us`.
- host: an eager framework's CPU (Python, autograd, kernel launches) needs `host_ms_per_layer` to
  issue one transformer layer's forward and backward for one micro-batch, whatever its size; the
  GPU cannot finish a layer sooner (a third of it bounds the forward, two thirds the backward).
  It is why small micro-batches on wide TP run far below the GEMM roofline. Default 4.2 ms: what
  `python -m benchmarks calibrate` fits to the 68 one-node nanotron runs bundled in
  benchmarks/results; read off directly, the runs whose GPU work per layer is well under it (TP
  2 to 8, mbs 1, pp 1) ran 4.4 to 4.6 ms per layer per micro-batch for the 1.34B, 3.57B and
  8.86B models alike (16 to 32 layers, hidden 2,048 to 4,096): the framework's host cost, not
  the GPU's work.
  Captured or compiled graphs (CUDA graphs, torch.compile) lower it; 0 turns it off.
- collectives: per tier ("intra" = NVLink inside a node, "inter" = the GPU's share of the node's
  NICs), a per-step latency and the bus bandwidth each collective reaches as a fraction of the
  link (nccl-tests' busbw convention). `fabric_gbps` caps what N nodes share across the fabric
  (per-GPU inter-node bandwidth <= fabric_gbps / N; 0 = non-blocking). `ep_dispatch` is the
  share of each link that DeepEP-style MoE dispatch and combine kernels move their bytes at.
- overlap: the fraction of a communication that can hide behind compute when the framework
  overlaps it (DP gradient buckets, ZeRO-3 prefetch, TP async, CP ring, EP all-to-all, PP sends).
- dispatch_sm_share: the share of the GPU's SMs that DeepEP-style dispatch and combine kernels
  occupy while they run (DeepEP's default of 20 SMs, Megatron's moe_flex_dispatcher_num_sms; 20 of
  H100's 132, of Blackwell's 148, of GB300's 160). Compute overlapped with them runs on the rest,
  so an overlapped dispatch hides only (1 - share) of its time.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path

from ..specs.errors import ConfigError
from ..specs.hardware import GPU_PRESETS
from ..specs.limits import MAX_JSON_BYTES
from ..specs.validate import check_fields, link, loads, number, show

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "p2p")
DEEPEP_SMS = 20        # SMs DeepEP's kernels run on by default (Buffer.num_sms; Megatron's default too)
TIERS = ("intra", "inter")

# Bus bandwidth reached on 256 MB messages, as a fraction of the link's one-way bandwidth.
# intra: 8x H100 SXM on NVLink 4 (450 GB/s), medians of the 1-node AllReduce / AllGather /
# ReduceScatter columns of the Ultra-Scale Playbook runs: 458 / 262 / 262 GB/s (all-reduce
# exceeds the link because NVLink SHARP reduces in the switch). inter: a non-blocking InfiniBand
# NDR fabric, every collective at 0.9 of the NIC's line rate for large messages. NCCL's
# maintainers give 46 to 48 GB/s per 400 Gb/s NIC for ring collectives across nodes (nccl-tests
# issue 290) and 48 to 49 GB/s per NIC for the all-to-all, which cannot use more than one NIC per
# GPU (issue 267); nccl-tests' busbw is defined so that ring all-reduce, all-gather and
# reduce-scatter all read as the link's rate. All-gather and reduce-scatter were 0.51 here until
# 2026-11, their intra-node ratio to the all-reduce carried across nodes; the Ultra-Scale
# Playbook's cluster does measure them at half its all-reduce's rate, and its runs keep that
# (validation/nanotron.py, cluster_profile), but NCCL on InfiniBand gives them the same rate.
# ep_dispatch: the share of each link that DeepEP's normal (training) kernels move a rank's copies
# over. DeepEP's README (first version, DeepSeek-V3 pretraining setting, H800 with 200 GB/s NVLink,
# "~160 GB/s" at most by its measure, and a 400 Gb/s NIC per GPU) gives 153 to 158 GB/s within a
# node and 57 and 50 GB/s combining over 4 and 8 nodes; its GB/s count a rank's tokens times the
# GPUs (nodes) each reaches, its own included (test_intranode.py, test_internode.py), of which 7/8
# ((N - 1)/N) cross the link: 153 x 7/8 / 200 = 0.67 of NVLink, 0.86 and 0.88 of the NIC (0.86 kept).
# NVLink's was 0.77 (153/200, the own copies counted as link traffic) until 2026-11. Over 2 nodes the
# NIC share is lower (calculators/time/dispatch.py, nic_share).
_H100_EFFICIENCY = {
    "intra": {"all_reduce": 1.02, "all_gather": 0.58, "reduce_scatter": 0.58, "all_to_all": 0.5,
              "broadcast": 0.58, "p2p": 0.8, "ep_dispatch": 0.67},
    "inter": {"all_reduce": 0.9, "all_gather": 0.9, "reduce_scatter": 0.9, "all_to_all": 0.9,
              "broadcast": 0.9, "p2p": 0.9, "ep_dispatch": 0.86},
}


# The knobs' bounds: fractions of a peak may exceed 1 a little (NVLink SHARP all-reduce reaches
# 1.02 of the link), never 0; times and sizes are non-negative.
KNOB_LIMITS = {"gemm_fraction": (1e-3, 1.5), "gemm_half_dim": (0.0, 1e5), "fp8_gemm_fraction": (1e-3, 1.5),
               "attention_fraction": (1e-3, 1.5), "hbm_fraction": (1e-3, 1.5), "kernel_us": (0.0, 1e5),
               "host_ms_per_layer": (0.0, 1000.0), "fabric_gbps": (0.0, 1e6), "dispatch_sm_share": (0.0, 0.9)}
OVERLAP_KINDS = ("dp", "zero3", "tp", "cp", "ep", "pp")
# the nested tables: name -> (keys per level, (lowest, highest) of each value)
_TABLES = {"latency_us": ((TIERS,), (0.0, 1e6)), "overlap": ((OVERLAP_KINDS,), (0.0, 1.0)),
           "efficiency": ((TIERS, COLLECTIVES + ("ep_dispatch",)), (1e-3, 1.5))}


def _table(p: list, kind: str, value) -> None:
    """Problems of one of the profile's nested tables: every key there, every value in bounds."""
    levels, (lo, hi) = _TABLES[kind]

    def walk(where, got, depth):
        want = levels[depth]
        if not isinstance(got, dict):
            p.append(f"{where} must be an object with keys {', '.join(want)} (got {show(got)})")
            return
        missing = [k for k in want if k not in got]
        if missing:
            p.append(f"{where} lacks {', '.join(missing)}")
        for key in (k for k in want if k in got):
            if depth + 1 < len(levels):
                walk(f"{where}.{key}", got[key], depth + 1)
            else:
                number(p, f"{where}.{key}", got[key], lo, hi)
    walk(f"profile.{kind}", value, 0)


@dataclass(frozen=True)
class HardwareProfile:
    name: str = "default"
    source: str = ""
    gemm_fraction: float = 0.70          # a large bf16 GEMM sustained at the H100's 700 W cap (our measurement)
    gemm_half_dim: float = 128.0         # smallest GEMM dim at which the math runs at half of it
    fp8_gemm_fraction: float = 0.60      # FP8 GEMMs reach less of their (doubled) peak
    attention_fraction: float = 0.306    # FlashAttention-2 fwd+bwd plateau on H100 (attention.ANCHOR / 989.4)
    hbm_fraction: float = 0.80           # achievable share of HBM bandwidth for streaming kernels
    kernel_us: float = 10.0              # minimum time of one eager kernel (launch + tail)
    host_ms_per_layer: float = 4.2       # CPU time to issue one layer's forward + backward (eager)
    latency_us: dict = field(default_factory=lambda: {"intra": 3.0, "inter": 15.0})   # per ring step
    efficiency: dict = field(default_factory=lambda: {t: dict(v) for t, v in _H100_EFFICIENCY.items()})
    fabric_gbps: float = 0.0             # 0: non-blocking fabric
    overlap: dict = field(default_factory=lambda: {"dp": 0.9, "zero3": 0.8, "tp": 0.0, "cp": 0.9,
                                                   "ep": 0.0, "pp": 0.0})
    dispatch_sm_share: float = DEEPEP_SMS / 132     # SMs DeepEP-style dispatch kernels take (H100: 132)

    def __post_init__(self):
        p = check_fields(self, "profile", KNOB_LIMITS, texts=("name",))
        link(p, "profile.fabric_gbps", self.fabric_gbps)
        if not isinstance(self.source, str) or len(self.source) > 4000:
            p.append(f"profile.source must be a string of at most 4,000 characters (got {show(self.source)})")
        for kind in _TABLES:
            _table(p, kind, getattr(self, kind))
        if p:
            raise ConfigError(p)

    def as_dict(self) -> dict:
        return asdict(self)


def _merge(base: dict, over: dict, where: str) -> dict:
    out = dict(base)
    for key, value in over.items():
        if key not in base:
            raise ConfigError(f"{where} has unknown key {show(key)}; known: {', '.join(sorted(base))}")
        out[key] = _merge(base[key], value, f"{where}.{key}") if isinstance(base[key], dict) and \
            isinstance(value, dict) else value
    return out


def profile_from_dict(data: dict, base: HardwareProfile | None = None) -> HardwareProfile:
    """A profile from plain data; keys not given keep `base`'s values (default: H100)."""
    if not isinstance(data, dict):
        raise ConfigError("a hardware profile must be a JSON object")
    base = base or default_profile("H100-80GB")
    merged = _merge(base.as_dict(), data, "profile")
    return HardwareProfile(**{f.name: merged[f.name] for f in fields(HardwareProfile)})


def load_profile(path: str | Path, base: HardwareProfile | None = None) -> HardwareProfile:
    """A profile from a JSON file (a regular file of at most MAX_JSON_BYTES); knobs the file does
    not give keep `base`'s (the GPU's default profile, so a partial file for a B200 keeps its
    Blackwell rates; default: H100's)."""
    if "\x00" in str(path) or len(str(path)) > 4096:
        raise ConfigError(f"profile file {show(str(path))} is not a file name")
    path = Path(path)
    try:
        if not path.is_file():
            raise ConfigError(f"profile file {show(str(path))} " + ("is not a regular file" if path.exists() else
                                                                    "not found"))
        if path.stat().st_size > MAX_JSON_BYTES:
            raise ConfigError(f"profile file {show(str(path))} is over {MAX_JSON_BYTES:,} bytes")
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"profile file {show(str(path))} cannot be read ({exc.strerror})") from None
    return profile_from_dict(loads(data, f"profile file {show(str(path))}"), base)


def save_profile(profile: HardwareProfile, path: str | Path) -> None:
    Path(path).write_text(json.dumps(profile.as_dict(), indent=1) + "\n")


# GEMMs: the sustained FP8 share of the peak at 8192^3 relative to H100's (Azure's AI benchmarking
# guide, Azure_Results/ND_{H100_v5,GB200_v6,GB300_v6,MI300X_v5}_results.md,
# github.com/egmsft/AI-benchmarking-guide at 3371c0c, the fork carrying the GB200, GB300 and MI300X
# pages): H100 1290.1, GB200 2781.5, GB300 3286.3 (1,400 W), MI300X 1222.9 TFLOP/s.
_PEAK = {name: gpu.fp8_tflops for name, gpu in GPU_PRESETS.items()}
_H100_SUSTAINED = 1290.1 / _PEAK["H100-80GB"]
BLACKWELL_GEMM = 2781.5 / _PEAK["GB200"] / _H100_SUSTAINED     # 0.853
GB300_GEMM = 3286.3 / _PEAK["GB300"] / _H100_SUSTAINED         # 1.008
MI300X_GEMM = 1222.9 / _PEAK["MI300X"] / _H100_SUSTAINED       # 0.717
# FlashAttention-2's plateau as a fraction of the bf16 peak: the same benchmark of flash-attn
# (head dim 128, batch 2, 8k, forward + backward) ran 373.9 TFLOP/s on a GB200, 399.7 on a GB300
# and 327.9 on an H100; MI300X 328.6 at head dim 64, where H100's FA2 runs 0.876 of its
# head-dim-128 rate (the FlashAttention-3 paper's figures; attention.HEAD_DIM_SCALE).
_BF16 = {name: gpu.bf16_tflops for name, gpu in GPU_PRESETS.items()}
_H100_FA2 = HardwareProfile().attention_fraction * _BF16["H100-80GB"]      # attention.ANCHOR, 303 TFLOP/s
BLACKWELL_FA2_FRACTION = _H100_FA2 * 373.9 / 327.9 / _BF16["GB200"]         # 0.138
GB300_FA2_FRACTION = _H100_FA2 * 399.7 / 327.9 / _BF16["GB300"]             # 0.148
MI300X_FA2_FRACTION = _H100_FA2 * 328.6 / (327.9 * 0.876) / _BF16["MI300X"]  # 0.265

# MI300X inside a node: 8 GPUs fully connected, 7 Infinity Fabric links of 64 GB/s each way (448
# GB/s, the preset's intra_node_gbps). RCCL's all-reduce reached 316.8 GB/s bus bandwidth at 8 GB
# (Azure's AI benchmarking guide, ND_MI300X_v5_results.md, in place): 0.71 of 448. No switch
# reduces in the fabric, so all-gather and reduce-scatter, a ring all-reduce's two halves, read the
# same busbw (nccl-tests' convention) and take 0.71 too, where H100's reach 0.58 against an
# all-reduce NVLink SHARP lifts to 1.02. A point-to-point send uses the one direct link between
# the two GPUs, 64 of the 448 GB/s, at H100's 0.8 of a link. The all-to-all and DeepEP-style
# dispatch keep H100's shares (unmeasured).
_MI300X_AR = 316.8 / 448
# Streaming kernels: the STREAM triad's share of the HBM peak in the same guide, H100 2.97 of 3.35
# TB/s, H200 4.18 of 4.8, MI300X 4.10 of 5.3; a GPU's hbm_fraction is H100's times its share over
# H100's (MI300X 0.87, H200 0.98). The guide gives no STREAM for its Blackwell GPUs (they keep H100's).
_STREAM = {"H100-80GB": 2.97 / 3.35, "H200-141GB": 4.18 / 4.8, "MI300X": 4.10 / 5.3}


def _hbm(name: str) -> float:
    return HardwareProfile().hbm_fraction * _STREAM[name] / _STREAM["H100-80GB"]

MI300X_EFFICIENCY = {"intra": {**_H100_EFFICIENCY["intra"], "all_reduce": _MI300X_AR, "all_gather": _MI300X_AR,
                               "reduce_scatter": _MI300X_AR, "broadcast": _MI300X_AR, "p2p": 0.8 * 64 / 448},
                     "inter": dict(_H100_EFFICIENCY["inter"])}

_H100 = HardwareProfile(
    name="H100-80GB",
    source="GEMM and attention: FlashAttention-3 paper (Shah et al. 2024) measures FlashAttention-2 "
           "at 35-40% of the H100 peak forward and less backward, cuBLAS bf16 GEMMs near 70%; the "
           "compute knobs were then checked against the 68 one-node nanotron runs (validation/time.py), "
           "so they describe eager PyTorch on H100 SXM; host_ms_per_layer: fitted to the one-node "
           "nanotron runs by benchmarks/calibrate.py; collectives: _H100_EFFICIENCY",
)


def _measured(name: str, gemm_share: float, fa2_fraction: float, source: str, sms: int) -> HardwareProfile:
    """H100's profile with its two GEMM fractions times `gemm_share` (this GPU's sustained GEMM
    share of the peak over H100's), FlashAttention-2's plateau at `fa2_fraction` of the peak, and
    DeepEP's SMs out of this GPU's `sms`."""
    return replace(_H100, name=name, gemm_fraction=_H100.gemm_fraction * gemm_share,
                   fp8_gemm_fraction=_H100.fp8_gemm_fraction * gemm_share,
                   attention_fraction=fa2_fraction, source=source, dispatch_sm_share=DEEPEP_SMS / sms)


PROFILES: dict[str, HardwareProfile] = {
    "H100-80GB": _H100,
    "H200-141GB": replace(_H100, name="H200-141GB", hbm_fraction=_hbm("H200-141GB"),
                          source="as H100; streaming kernels at its STREAM share (_STREAM)"),
    "A100-40GB": replace(_H100, name="A100-40GB", gemm_fraction=0.78, attention_fraction=0.45,
                         dispatch_sm_share=DEEPEP_SMS / 108,
                         source="A100: cuBLAS bf16 reaches ~80-85% of 312 TFLOP/s on large shapes and "
                                "FlashAttention-2 50-70% forward (Dao 2023), lowered as for H100 for "
                                "eager execution; collectives as H100 (unchecked)"),
    "A100-80GB": replace(_H100, name="A100-80GB", gemm_fraction=0.78, attention_fraction=0.45,
                         dispatch_sm_share=DEEPEP_SMS / 108,
                         source="as A100-40GB"),
    "B200": _measured("B200", BLACKWELL_GEMM, BLACKWELL_FA2_FRACTION,
                      "Blackwell: GEMMs at H100's fractions times the GB200's sustained FP8 cuBLASLt share relative "
                      "to H100's (0.85, Azure's AI benchmarking guide); FlashAttention-2 at 1.14 times H100's rate "
                      "(same guide); cuDNN attention from cudnn-frontend's GB200 benchmark (attention.py); B200 "
                      "scaled from GB200 by the peaks; collectives as H100", 148),
    "GB200": _measured("GB200", BLACKWELL_GEMM, BLACKWELL_FA2_FRACTION, "as B200", 148),
    "GB300": _measured("GB300", GB300_GEMM, GB300_FA2_FRACTION,
                       "Blackwell Ultra: GEMMs at H100's fractions times its sustained FP8 cuBLASLt share relative "
                       "to H100's (1.01: its 1,400 W keep the clocks up), FlashAttention-2 at 1.22 times H100's "
                       "rate (Azure's AI benchmarking guide); cuDNN attention from cudnn-frontend's GB300 "
                       "benchmark (attention.py); collectives as H100", 160),
    "MI300X": replace(_measured("MI300X", MI300X_GEMM, MI300X_FA2_FRACTION,
                                "MI300X: GEMMs at H100's fractions times its sustained FP8 hipBLASLt share relative "
                                "to H100's (0.72), FlashAttention-2 (CK) at 1.13 times H100's rate at head dim 64, "
                                "RCCL all-reduce at 0.71 of the 448 GB/s fabric (Azure's AI benchmarking guide; "
                                "MI300X_EFFICIENCY), streaming kernels at its STREAM share (0.87 of H100's); "
                                "across nodes as H100", 304),
                      efficiency=MI300X_EFFICIENCY, hbm_fraction=_hbm("MI300X")),
}


def default_profile(gpu_name: str) -> HardwareProfile:
    if gpu_name in PROFILES:
        return PROFILES[gpu_name]
    return replace(_H100, name=gpu_name, source="custom GPU: H100's fractions")
