"""Setting values shared by widgets and the prose's numbers (no Gradio here): a chapter or URL
parameter coerced to its control's type, and scenario settings parsed into calculator objects."""
from __future__ import annotations

from calculators.errors import ConfigError
from calculators.hf_config import from_hf_config
from calculators.scenario import parse_hardware, parse_model, parse_parallel


def coerce(value, default):
    """A chapter parameter (a string) as the type of the control's default."""
    if isinstance(default, bool):
        return str(value).lower() in ("1", "true", "yes", "on")
    if isinstance(default, int):
        return int(float(value))
    if isinstance(default, float):
        return float(value)
    return str(value)


def scenario_from(values: dict):
    """(model, cluster, parallel) from scenario control values; raises ConfigError."""
    text = (values.get("config") or "").strip()
    model = from_hf_config(text) if text else parse_model({"preset": values.get("model", "llama3-8b")})
    if "nodes" in values:
        nodes, gpn = int(values["nodes"]), int(values.get("gpn", 8))
    else:                                   # the cluster is what the layout needs, on 8-GPU nodes
        world = 1
        for k in ("dp", "tp", "pp", "cp"):
            world *= int(values.get(k, 1))
        if world > 8 and world % 8:
            raise ConfigError(f"dp*tp*pp*cp = {world} GPUs does not fill 8-GPU nodes; make it a multiple of 8")
        nodes, gpn = max(1, world // 8), min(8, world)
    cluster = parse_hardware({"gpu": values.get("gpu", "H100-80GB"), "nodes": nodes, "gpus_per_node": gpn})
    keys = ("dp", "tp", "pp", "cp", "ep", "vpp", "zero", "mbs", "gbs", "seq")
    par = {k: int(values[k]) for k in keys if k in values}
    for k in ("recompute", "schedule", "precision", "framework", "dispatcher"):
        if k in values:
            par[k] = values[k]
    for k in ("sp", "tp_overlap"):            # both mean something only with TP
        if k in values:
            on = values[k]
            on = on.lower() in ("1", "true", "yes", "on") if isinstance(on, str) else bool(on)
            par[k] = on and par.get("tp", 1) > 1
    return model, cluster, parse_parallel(par)


