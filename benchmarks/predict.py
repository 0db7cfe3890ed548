"""The calculators' prediction for each suite's row, torch-free, so that a recorded row can be
predicted again by the current calculators (validation.bundle) exactly as the suite predicted it."""
from __future__ import annotations

from calculators.time.attention import rates
from calculators.time.compute import expert_tokens, gemm_time, memory_time
from calculators.time.elementwise import FUSED, eager_permute_bytes, eager_permute_kernels
from calculators.specs.errors import ConfigError
from calculators.specs.frameworks import fused_matmuls
from calculators.specs.parallel import ParallelConfig
from calculators.specs.presets import model_from_name
from calculators.scenario import evaluate, parse_hardware, parse_profile

KERNEL_FAMILY = {"flash": "fa2", "cudnn": "cudnn"}        # the calculators' table for each SDPA backend


def scenario(run, hardware: dict, world: int, torch_version: str | None = None) -> dict:
    """The calculators' scenario of harness run `run` (a RunSpec) on `world` ranks of `hardware`,
    under PyTorch `torch_version` (RunSpec.parallel)."""
    import dataclasses
    par = dataclasses.asdict(run.parallel(world, torch_version))
    par["split"], par["recompute_ranks"] = list(par["split"]), list(par["recompute_ranks"])
    model = dataclasses.asdict(run.spec())
    model.pop("source", None)
    return {"model": model, "hardware": hardware, "parallel": par}


def train(scenario_: dict) -> dict:
    try:
        return evaluate(scenario_)
    except ConfigError as exc:
        return {"error": str(exc)}


def gemm(m: int, n: int, k: int, dtype: str, hardware: dict) -> dict:
    cluster = parse_hardware(hardware)
    t = gemm_time(m, n, k, cluster.gpu, parse_profile(hardware, cluster), fp8=dtype == "fp8")
    return {"time_s": t, "tflops": 2 * m * n * k / t / 1e12}


def attention_flops(batch: int, heads: int, seq: int, head_dim: int, causal: bool) -> float:
    """4 B a S^2 d for the forward, halved with the causal mask (flops.py's convention)."""
    f = 4.0 * batch * heads * seq ** 2 * head_dim
    return f / 2 if causal else f


def attention(m: dict, gpu_preset: str | None) -> dict:
    """Forward and backward rates and times from calculators.time.attention's table (H100 only)."""
    family = KERNEL_FAMILY.get(m["backend"])
    if not family or gpu_preset != "H100-80GB":
        return {}
    f = attention_flops(m["batch"], m["heads"], m["seq"], m["head_dim"], m["causal"])
    pf, pb = rates(family, m["seq"], m["head_dim"], m["causal"])
    return {"kernel": family, "forward_tflops": pf, "backward_tflops": pb,
            "forward_s": f / (pf * 1e12), "backward_s": 2.5 * f / (pb * 1e12)}


def moe_model(name: str):
    """A model preset, or the harness's tiny ones (benchmarks.config.LOCAL_MODELS), by name."""
    from .config import LOCAL_MODELS
    return LOCAL_MODELS.get(name) or model_from_name(name)


def permute_seconds(spec, tokens: int, ep: int, way: str, gpu, profile) -> float:
    """The calculators' seconds for torchtitan's eager permutation and combine of `tokens` tokens, one
    way, as our GPU runs timed it: with the routing scores fixed (training also forms their gradient)."""
    return memory_time(eager_permute_bytes(spec, tokens, ep, way, score_grad=False),
                       eager_permute_kernels(ep, way, score_grad=False), gpu, profile)


def moe(model: str, ep: int, tokens: int, dtype: str, hardware: dict) -> dict:
    """The calculators' seconds for the moe suite's parts (benchmarks/moe.py), forward ("<part>_forward_s")
    and forward + backward ("<part>_s"): the router's GEMM; torchtitan's eager permutation and
    combine (permute_seconds); the experts' GEMMs (gate and up fused, as the suite runs them) on
    compute.expert_tokens each and the SwiGLU's bytes. A backward
    runs each GEMM twice (input and weight gradients) and moves twice the forward's element-wise
    bytes. The grouped kernel and the per-expert loop get the same cost: the calculators tell them
    apart by nothing but the GEMM shapes."""
    spec = moe_model(model)
    cluster = parse_hardware(hardware)
    gpu, profile = cluster.gpu, parse_profile(hardware, cluster)
    par = ParallelConfig(dp=ep, ep=ep, mbs=1, gbs=ep, seq=tokens, framework="megatron")
    n = expert_tokens(spec, par, tokens)
    r_gemms, e_gemms = 0.0, 0.0
    for mm in fused_matmuls(spec.layer_matmuls(True), "megatron"):
        if mm.name == "router":
            r_gemms += gemm_time(tokens, mm.fan_out, mm.fan_in, gpu, profile)
        elif mm.expert:
            e_gemms += gemm_time(n, mm.fan_out, mm.fan_in, gpu, profile, dtype == "fp8", count=mm.stored / ep)
    (_, _, _, act_f, _), _ = FUSED["forward"]
    (_, _, _, act_b, _), _ = FUSED["backward"]
    routed = tokens * spec.moe.top_k * spec.moe.expert_ffn
    act = memory_time(act_f * routed, 1, gpu, profile), memory_time(act_b * routed, 2, gpu, profile)
    perm = tuple(permute_seconds(spec, tokens, ep, way, gpu, profile) for way in ("forward", "backward"))
    out = {"tokens_per_expert": n}
    for part, (fwd, bwd) in {"router": (r_gemms, 2 * r_gemms), "permute": perm,
                             "experts": (e_gemms + act[0], 2 * e_gemms + act[1])}.items():
        out[f"{part}_forward_s"], out[f"{part}_s"] = fwd, fwd + bwd
    out["experts_loop_forward_s"], out["experts_loop_s"] = out["experts_forward_s"], out["experts_s"]
    return out
