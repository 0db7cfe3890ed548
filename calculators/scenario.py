"""The estimate contract (shared/DESIGN.md): a scenario dict in, an answer dict out.

    answer = evaluate({"model": {"preset": "llama3-70b"},
                       "hardware": {"gpu": "H100-80GB", "nodes": 8, "gpus_per_node": 8},
                       "parallel": {"dp": 8, "tp": 8, "sp": True, "gbs": 512, "seq": 8192}})
    answer["memory"]["total_gib"]

`hardware.profile` (optional) picks the time model's efficiency knobs: a profile name (a GPU
preset id), a path to a profile JSON file, or an object whose keys override the GPU's default
profile (calculators/time/profiles.py). Bad input raises ConfigError with a message that says what
to change.
"""
from __future__ import annotations

import json
from dataclasses import MISSING, fields
from functools import lru_cache

from .specs import limits
from .specs.errors import ConfigError
from .specs.hardware import ClusterSpec, GPUSpec, gpu_from_name
from .specs.hf_config import from_hf_config
from .memory.estimate import estimate_memory
from .specs.models import ModelSpec, MoESpec, MLASpec
from .specs.parallel import ParallelConfig
from .specs.presets import model_from_name
from .time.profiles import PROFILES, HardwareProfile, default_profile, load_profile, profile_from_dict
from .time.step import estimate_step
from .specs.validate import check_fields, keys, loads, show


def _build(cls, data: dict, where: str, skip=()):
    """`cls` from a JSON object, naming unknown and missing keys; the values are checked by the
    class itself (validate.check_fields in its __post_init__)."""
    if not isinstance(data, dict):
        raise ConfigError(f"{where} must be a JSON object (got {show(data)})")
    names = {f.name for f in fields(cls)} - set(skip)
    unknown = sorted(map(str, set(data) - names))
    if unknown:
        raise ConfigError(f"{where} has unknown key(s) {keys(unknown)}; "
                          f"known: {', '.join(sorted(names))}")
    missing = [f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING
               and f.name not in data]
    if missing:
        raise ConfigError(f"{where} lacks {', '.join(missing)}")
    return cls(**data)


@lru_cache(maxsize=256)
def _model_cached(text: str) -> ModelSpec:
    data = json.loads(text)
    if "preset" in data:
        if len(data) > 1:
            raise ConfigError("model: give either {'preset': name} or the shape, not both")
        return model_from_name(data["preset"])
    if "hf_config" in data:
        if len(data) > 1:
            raise ConfigError("model: give either {'hf_config': {...}} or the shape, not both")
        return from_hf_config(data["hf_config"])
    data = dict(data)
    for key, cls in (("moe", MoESpec), ("mla", MLASpec)):
        if data.get(key) is not None:
            data[key] = _build(cls, data[key], f"model.{key}")
    return _build(ModelSpec, data, "model", skip=("source",))


def _key(data, where: str) -> str:
    """`data` as the JSON text its cache is keyed by. An in-process caller can pass what a JSON
    line cannot carry (an integer of over 4,300 digits, a set, keys of mixed types): refused."""
    try:
        return json.dumps(data, sort_keys=True)
    except (ValueError, TypeError, RecursionError) as exc:
        raise ConfigError(f"{where} holds a value JSON cannot carry ({str(exc)[:80]}); send plain JSON numbers, "
                          "strings, lists and objects") from None


def parse_model(data) -> ModelSpec:
    if isinstance(data, str):
        return model_from_name(data)
    if not isinstance(data, dict):
        raise ConfigError(f"model must be an object: {{'preset': name}}, {{'hf_config': {{...}}}} or the shape "
                          f"(got {show(data)})")
    return _cached(_model_cached, _key(data, "model"))


# Parsed models and clusters are kept by their JSON text (a sweep repeats them on every line), those
# of at most this many characters: 256 of each stay under 16 MB whatever a client sends.
CACHED_TEXT = 32_768


def _cached(parse, text: str):
    return parse(text) if len(text) <= CACHED_TEXT else parse.__wrapped__(text)


def parse_hardware(data) -> ClusterSpec:
    if not isinstance(data, dict):
        raise ConfigError("hardware must be an object like {'gpu': 'H100-80GB', 'nodes': 1, 'gpus_per_node': 8} "
                          f"(got {show(data)})")
    return _cached(_hardware_cached, _key({k: v for k, v in data.items() if k != "profile"}, "hardware"))


@lru_cache(maxsize=256)
def _hardware_cached(text: str) -> ClusterSpec:
    data = json.loads(text)
    gpu = data.pop("gpu", "H100-80GB")
    gpu = gpu_from_name(gpu) if isinstance(gpu, str) else _build(GPUSpec, gpu, "hardware.gpu")
    return _build(ClusterSpec, {**data, "gpu": gpu}, "hardware")


def parse_parallel(data) -> ParallelConfig:
    return _build(ParallelConfig, data or {}, "parallel")


def parse_profile(hardware, cluster: ClusterSpec) -> HardwareProfile:
    spec = hardware.get("profile") if isinstance(hardware, dict) else None
    base = default_profile(cluster.gpu.name)
    if spec is None:
        return base
    if isinstance(spec, dict):
        return _profile_cached(_key(spec, "hardware.profile"), cluster.gpu.name)
    if isinstance(spec, str):
        return PROFILES[spec] if spec in PROFILES else load_profile(spec, base)
    raise ConfigError(f"hardware.profile must be a profile name, a JSON file path, or an object of overrides "
                      f"(got {show(spec)})")


@lru_cache(maxsize=64)
def _profile_cached(text: str, gpu_name: str) -> HardwareProfile:
    return profile_from_dict(json.loads(text), default_profile(gpu_name))


def parse(scenario: dict) -> tuple[ModelSpec, ClusterSpec, ParallelConfig]:
    if not isinstance(scenario, dict):
        raise ConfigError(f"a scenario must be a JSON object with model, hardware and parallel (got {show(scenario)})")
    unknown = sorted(set(scenario) - {"model", "hardware", "parallel"})
    if unknown:
        raise ConfigError(f"scenario has unknown key(s) {keys(unknown)}; "
                          "use model, hardware, parallel")
    if "model" not in scenario:
        raise ConfigError("scenario lacks 'model' (a preset like {'preset': 'llama3-8b'} or a shape)")
    return (parse_model(scenario["model"]), parse_hardware(scenario.get("hardware", {})),
            parse_parallel(scenario.get("parallel", {})))


def evaluate(scenario: dict) -> dict:
    model, cluster, par = parse(scenario)
    profile = parse_profile(scenario.get("hardware"), cluster)
    return {"memory": estimate_memory(model, cluster, par).as_dict(),
            "step": estimate_step(model, cluster, par, profile).as_dict()}


PLAN_KEYS = {"model", "hardware", "seq", "gbs", "constraints", "top"}


def plan_answer(request: dict) -> dict:
    """The plan contract: {model, hardware, seq, gbs, constraints?, top?} -> ranked plans (each
    with its parallel layout, step and memory answers and its exports), why the winner wins, the
    most instructive rejections; or, when nothing fits, `impossible` and `min_gpus`."""
    from .planning.explain import label
    from .planning.export import FORMATS, export
    from .planning.planner import plan
    if not isinstance(request, dict):
        raise ConfigError("a plan request must be a JSON object with model, hardware, seq and gbs "
                          f"(got {show(request)})")
    unknown = sorted(map(str, set(request) - PLAN_KEYS))
    if unknown:
        raise ConfigError(f"plan request has unknown key(s) {keys(unknown)}; "
                          f"use {', '.join(sorted(PLAN_KEYS))}")
    missing = [k for k in ("model", "seq", "gbs") if k not in request]
    if missing:
        raise ConfigError(f"plan request lacks {', '.join(missing)}")
    problems = check_fields({"top": 5, **request}, "plan", limits.PLAN)
    if problems:
        raise ConfigError(problems)
    model, cluster = parse_model(request["model"]), parse_hardware(request.get("hardware", {}))
    profile = parse_profile(request.get("hardware"), cluster)
    constraints = request.get("constraints", {})
    if not isinstance(constraints, dict):
        raise ConfigError("plan constraints must be an object, e.g. {'tp': [4, 8], 'recompute': 'none'} "
                          f"(got {show(constraints)})")
    result = plan(model, cluster, request["seq"], request["gbs"], constraints, profile, top=request.get("top", 5))
    ref = request["model"].get("preset", "") if isinstance(request["model"], dict) else str(request["model"])
    plans = []
    for rank, p in enumerate(result.plans, 1):
        par = {f.name: getattr(p.par, f.name) for f in fields(p.par)}
        par["split"] = list(p.par.split)
        plans.append({"rank": rank, "label": p.label(), "parallel": par, "step": p.step.as_dict(),
                      "memory": estimate_memory(model, cluster, p.par).as_dict(),
                      "exports": {fmt: dict(zip(("text", "notes"), export(fmt, model, cluster, p.par, ref)))
                                  for fmt in FORMATS}})
    return {"plans": plans, "why": result.why,
            "rejected": [{"label": label(r.par), "reason": r.reason, "time_s": r.time_s, "kind": r.kind}
                         for r in result.rejected],
            "searched": result.searched, "seconds": result.seconds, "impossible": result.impossible,
            "min_gpus": result.min_gpus}


def answer(scenario) -> dict:
    """`evaluate`'s answer, or {"error": message}, whatever the scenario holds: bad input is the
    message ConfigError gives; anything else is a bug, reported as one on this scenario alone."""
    try:
        return evaluate(scenario)
    except ConfigError as exc:
        return {"error": str(exc)}
    except RecursionError:
        return {"error": "the scenario is nested too deeply to evaluate"}
    except Exception as exc:                       # a bug: still this scenario's answer, never the end of a stream
        return {"error": f"internal error ({type(exc).__name__}: {show(str(exc), 200)}) evaluating this scenario; "
                         "please report it with the scenario"}


def evaluate_line(line, what: str = "the scenario") -> dict:
    """One JSON Lines scenario (text or UTF-8 bytes) -> `answer`'s answer. A line that is not
    JSON, not UTF-8 or over the size limit is that line's error too; this never raises."""
    try:
        scenario = loads(line, what)
    except ConfigError as exc:
        return {"error": str(exc)}
    return answer(scenario)
