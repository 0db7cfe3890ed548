"""Setting values shared by widgets and the prose's numbers (no Gradio here): a chapter or URL
parameter coerced to its control's type, and scenario settings parsed into calculator objects.

Every value here may come from a visitor (a control moved, a value sent to the API, a link), so
each is checked strictly: "8.5" is not a layer count, "maybe" is not a boolean, inf is not a
number; the calculators then check sizes against their stated limits (calculators/specs/limits.py).
"""
from __future__ import annotations

import math
import re

from calculators.specs.errors import ConfigError
from calculators.specs.limits import MAX_GPUS, MAX_LAYERS
from calculators.specs.hf_config import from_hf_config
from calculators.scenario import parse_hardware, parse_model, parse_parallel
from calculators.specs.validate import show

TRUE, FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")
MAX_CONFIG_CHARS = 262_144       # a pasted config.json (real ones are 1 to 10 KB)
GPUS_PER_NODE = 8                # the node a layout is placed on when the cluster follows it


def coerce(value, default):
    """A chapter or URL parameter (a string) as the type of the control's default; ValueError
    when it is not one (the URL state then keeps the default)."""
    if isinstance(default, bool):
        text = str(value).strip().lower()
        if text not in TRUE + FALSE:
            raise ValueError(f"{show(value)} is not true or false")
        return text in TRUE
    if isinstance(default, int):
        number = float(value)
        if not math.isfinite(number) or number != int(number) or abs(number) > 2**53:
            raise ValueError(f"{show(value)} is not a whole number")
        return int(number)
    if isinstance(default, float):
        number = float(value)
        if not math.isfinite(number):
            raise ValueError(f"{show(value)} is not a finite number")
        return number
    return str(value)


def whole(values: dict, key: str) -> int:
    """values[key] as a whole number (a control may send 8 or 8.0, never 8.5, "8" or true)."""
    value = values[key]
    if type(value) is float and math.isfinite(value) and value == int(value):
        value = int(value)
    if type(value) is not int:
        raise ConfigError(f"{key} must be a whole number (got {show(value)})")
    return value


def real(values: dict, key: str, what: str) -> float:
    """values[key] as a finite number (a control sends one; a tag or a link, its text); never a bool."""
    value = values[key]
    try:
        if isinstance(value, bool):
            raise ValueError
        return coerce(value, 0.0)
    except (TypeError, ValueError, OverflowError):
        raise ConfigError(f"{key} must be {what} (got {show(value)})") from None


def flag(value) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in TRUE + FALSE:
        return value.strip().lower() in TRUE
    raise ConfigError(f"expected true or false (got {show(value)})")


MAX_LIST_CHARS = 4096           # a per-stage list's text (its control's max_length)


def per_stage(text, key: str, number: bool) -> tuple:
    """A list typed as the planner's labels write it, first to last, `/` between values and a run of
    equal values as value x count: '18/21/21/20', '1/2x62/1' (layer counts), 'fullx2/none' (recompute
    modes); '' is no list. At most MAX_LAYERS values in all, counted before a run is expanded."""
    if not isinstance(text, str):
        raise ConfigError(f"{key} must be text like 18/21/21/20 (got {show(text)})")
    if len(text) > MAX_LIST_CHARS:
        raise ConfigError(f"{key} is {len(text):,} characters long; a list takes at most {MAX_LIST_CHARS:,}: write a "
                          "run of equal values as value x count (1/2x62/1)")
    runs = []
    for part in (p.strip().replace(" ", "+") for p in text.split("/")) if text.strip() else ():
        head, sep, count = part.rpartition("x")        # a '+' typed into a link reads as a space
        head, count = head.rstrip("+"), count.lstrip("+")   # and spaces around the x are no part of the value
        value, n = (head, int(count)) if sep and head and re.fullmatch(r"[0-9]{1,7}", count) else (part, 1)
        if n < 1:
            raise ConfigError(f"{key}: {show(part, 40)} repeats a value 0 times (a run is value x count, count 1 "
                              "or more)")
        if not value:
            raise ConfigError(f"{key} has an empty entry: remove the extra '/' (write them first to last, like "
                              "18/21/21/20)")
        if number and not re.fullmatch(r"[0-9]{1,7}", value):
            raise ConfigError(f"{key}: {show(part, 40)} is not a layer count (write them first to last, like "
                              "18/21/21/20, a run as value x count: 1/2x62/1)")
        runs.append((int(value) if number else value, n))
    if sum(n for _, n in runs) > MAX_LAYERS:
        raise ConfigError(f"{key} lists over {MAX_LAYERS:,} values")
    return tuple(value for value, n in runs for _ in range(n))


def model_from(values: dict):
    """The pasted config.json if there is one (size-capped), else the preset."""
    text = values.get("config") or ""
    if not isinstance(text, str):
        raise ConfigError("the pasted config.json must be text")
    if len(text) > MAX_CONFIG_CHARS:
        raise ConfigError(f"the pasted config.json is {len(text):,} characters; the limit is {MAX_CONFIG_CHARS:,} "
                          "(a model's config.json is a few KB: paste that file, not the weights' index)")
    text = text.strip()
    return from_hf_config(text) if text else parse_model({"preset": values.get("model", "llama3-8b")})


def cluster_shape(world: int) -> tuple[int, int]:
    """(nodes, GPUs per node) for a layout of `world` GPUs on 8-GPU nodes: whole nodes when 8
    divides it, else the largest divisor of `world` up to 8 per node (12 GPUs: 2 nodes of 6, as a
    job that uses 6 GPUs of each of two nodes)."""
    gpn = max(k for k in range(1, GPUS_PER_NODE + 1) if world % k == 0)
    return world // gpn, gpn


def scenario_from(values: dict):
    """(model, cluster, parallel) from scenario control values; raises ConfigError.

    `fit` says which of cluster and layout a widget's reader moves (widgets.scenario_controls):
    - "dp": the cluster is `nodes` x `gpn` and dp is what it leaves, GPUs / (tp*pp*cp), so every
      cluster the controls offer can be evaluated;
    - "cluster": the cluster follows the layout, dp*tp*pp*cp GPUs (`cluster_shape`);
    - absent (the prose's numbers, direct calls): `nodes` given means both are given and must
      agree; no `nodes`, the cluster follows.
    `batch` "follows": gbs is the nearest multiple of dp*mbs to the given gbs (a widget that does
    not show the batch keeps it valid as dp and mbs move)."""
    model = model_from(values)
    fit = values.get("fit") or ("given" if "nodes" in values else "cluster")
    sizes = {k: whole(values, k) for k in ("tp", "pp", "cp") if k in values}
    split = sizes.get("tp", 1) * sizes.get("pp", 1) * sizes.get("cp", 1)
    if split < 1:
        raise ConfigError(f"tp, pp and cp must be at least 1 (got {sizes})")
    if fit == "cluster":
        if "dp" in values:
            sizes["dp"] = whole(values, "dp")
        world = sizes.get("dp", 1) * split
        if not 1 <= world <= MAX_GPUS:
            raise ConfigError(f"dp*tp*pp*cp = {world:,} GPUs; it must be from 1 to {MAX_GPUS:,}")
        nodes, gpn = cluster_shape(world)
    else:
        nodes, gpn = whole(values, "nodes"), whole(values, "gpn") if "gpn" in values else GPUS_PER_NODE
    host = {}
    if "host_optimizer_gbps" in values:
        host["host_optimizer_gbps"] = real(values, "host_optimizer_gbps", "a node's host memory GB/s for an "
                                           "offloaded optimizer's step, 0 for the default")
    cluster = parse_hardware({"gpu": values.get("gpu", "H100-80GB"), "nodes": nodes, "gpus_per_node": gpn, **host})
    if fit == "dp":
        if cluster.world % split:
            raise ConfigError(f"tp*pp*cp = {split} must divide the {nodes} x {gpn} = {cluster.world} GPUs; change "
                              "tp, pp, cp or the nodes")
        sizes["dp"] = cluster.world // split
    elif fit == "given" and "dp" in values:
        sizes["dp"] = whole(values, "dp")
    par = {**sizes, **{k: whole(values, k) for k in ("ep", "etp", "vpp", "zero", "dp_replicate", "mbs", "gbs", "seq",
                                                     "offload_layers", "dispatch_sms") if k in values}}
    if values.get("batch") == "follows" and "gbs" in par:
        unit = par.get("dp", 1) * par.get("mbs", 1)
        par["gbs"] = unit * max(1, round(par["gbs"] / unit))
    for k in ("recompute", "schedule", "precision", "framework", "dispatcher", "loss", "attention", "experts",
              "elementwise", "grad_dtype", "moment_dtype", "master_dtype", "fp8_recipe", "fp8_weights", "offload_modules",
              "optimizer"):
        if k in values:
            par[k] = values[k]
    for k in ("split", "recompute_ranks"):   # '': the even split, `recompute` on every rank
        if values.get(k):
            par[k] = per_stage(values[k], k, number=k == "split")
    if "compile" in values:
        par["compile"] = flag(values["compile"])
    for k in ("param_offload", "tiled_mlp"):
        if k in values:
            try:
                par[k] = flag(values[k])
            except ConfigError:
                raise ConfigError(f"{k} must be true or false (got {show(values[k])})") from None
    if "optimizer_offload" in values:
        par["optimizer_offload"] = real(values, "optimizer_offload", "a share from 0 to 1")
    for k in ("sp", "tp_overlap"):            # both mean something only with TP
        if k in values:
            par[k] = flag(values[k]) and par.get("tp", 1) > 1
    if "ep_overlap" in values:                # likewise with EP
        par["ep_overlap"] = flag(values["ep_overlap"]) and par.get("ep", 1) > 1
    return model, cluster, parse_parallel(par)
