"""The one validation layer: strict types and stated limits for every input, one message per
broken rule, each naming the field, the value and what is allowed.

    problems = []
    integer(problems, "model.layers", 1e9, 1, 1024)
    # ['model.layers must be a whole number from 1 to 1,024 (got 1000000000.0)']

Strict means: a bool is not a number, "false" is not false, 8.0 is not a layer count, and floats
are accepted only where a quantity is continuous (bandwidths, TFLOP/s, fractions). Every
dataclass the calculators take from a caller (ModelSpec, GPUSpec, ClusterSpec, ParallelConfig,
HardwareProfile) runs `check_fields` in its __post_init__, so the CLI, the widgets, config.json
import and the URL state all pass through here. `loads` reads JSON text the same way: bounded in
size and depth, no NaN or Infinity, no integer too long to read.

This is plain Python, not a schema library: the calculators import only the standard library,
numpy and scipy (shared/DESIGN.md), so that the CLI runs without the app's packages.
"""
from __future__ import annotations

import gc
import json
import math
import numbers

import numpy as np

from .errors import ConfigError
from .limits import MAX_JSON_BYTES, MAX_JSON_DEPTH, MAX_LIST, MAX_TEXT, MIN_GBPS


def show(value, limit: int = 60) -> str:
    """`value` as a message quotes it: its repr, cut to `limit` characters."""
    try:
        text = repr(value)
    except ValueError:                             # an int too long for repr
        text = f"<an integer of more than {limit} digits>"
    return text if len(text) <= limit else text[:limit - 3] + "..."


def keys(unknown, limit: int = 200) -> str:
    """Unknown keys as a message lists them: each quoted once, the whole cut to `limit` characters,
    saying how many more there are."""
    unknown = list(unknown)
    text = ", ".join(show(k, 40) for k in unknown[:20])
    text = text if len(text) <= limit else text[:limit - 3] + "..."
    return text + (f" and {len(unknown) - 20:,} more" if len(unknown) > 20 else "")


def _fmt(x) -> str:
    return f"{x:,.0f}" if float(x).is_integer() and abs(x) < 1e15 else f"{x:g}"


def _range(lo, hi) -> str:
    return f"from {_fmt(lo)} to {_fmt(hi)}"


def _is_int(value) -> bool:
    """A whole number's type: int or numpy's integers; bool and float are not whole numbers here."""
    return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))


def integer(problems: list, name: str, value, lo: int, hi: int) -> None:
    if not _is_int(value):
        problems.append(f"{name} must be a whole number {_range(lo, hi)} (got {show(value)})")
    elif not lo <= value <= hi:
        problems.append(f"{name} must be {_range(lo, hi)} (got {show(value)})")


def _finite(value) -> bool:
    """math.isfinite, False for an integer too large for a float (JSON may carry 10**400)."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def link(problems: list, name: str, value) -> None:
    """A link's GB/s: 0 (not given, or none) or at least MIN_GBPS; a subnormal bandwidth would
    make every transfer over it take forever."""
    if isinstance(value, numbers.Real) and 0 < value < MIN_GBPS:
        problems.append(f"{name} must be 0 or at least {MIN_GBPS} GB/s (got {show(value)})")


def number(problems: list, name: str, value, lo: float, hi: float) -> None:
    ok = isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_)) and _finite(value)
    if not ok:
        problems.append(f"{name} must be a number {_range(lo, hi)} (got {show(value)})")
    elif not lo <= value <= hi:
        problems.append(f"{name} must be {_range(lo, hi)} (got {show(value)})")


def flag(problems: list, name: str, value) -> None:
    if not isinstance(value, (bool, np.bool_)):
        problems.append(f"{name} must be true or false (got {show(value)})")


def choice(problems: list, name: str, value, options) -> None:
    if not isinstance(value, type(options[0])) or isinstance(value, bool) or value not in options:
        problems.append(f"{name} must be one of {', '.join(map(repr, options))} (got {show(value)})")


def text(problems: list, name: str, value, limit: int = MAX_TEXT) -> None:
    if not isinstance(value, str):
        problems.append(f"{name} must be a string (got {show(value)})")
    elif len(value) > limit:
        problems.append(f"{name} must be at most {limit} characters (got {len(value):,})")


def check_fields(obj, where: str, limits: dict, flags=(), choices=None, texts=()) -> list[str]:
    """Problems of `obj`'s fields (a dataclass or a dict): `limits` field -> (lo, hi), integers
    where lo is an int, numbers where it is a float; `flags` booleans; `choices` field -> allowed
    values; `texts` strings of at most MAX_TEXT characters."""
    get = obj.get if isinstance(obj, dict) else lambda k: getattr(obj, k)
    p: list[str] = []
    for key, (lo, hi) in limits.items():
        (integer if isinstance(lo, int) else number)(p, f"{where}.{key}", get(key), lo, hi)
    for key in flags:
        flag(p, f"{where}.{key}", get(key))
    for key, options in (choices or {}).items():
        choice(p, f"{where}.{key}", get(key), options)
    for key in texts:
        text(p, f"{where}.{key}", get(key))
    return p


def whole_list(problems: list, name: str, values, lo: int, hi: int, limit: int = MAX_LIST) -> None:
    """A list (or tuple) of at most `limit` whole numbers, each from lo to hi."""
    if not isinstance(values, (list, tuple)) or len(values) > limit:
        problems.append(f"{name} must be a list of at most {limit:,} whole numbers (got {show(values)})")
        return
    bad = [v for v in values if not _is_int(v) or not lo <= v <= hi]
    if bad:
        problems.append(f"{name} entries must be whole numbers {_range(lo, hi)} (got {show(bad[0])})")


def _no_constant(name: str):
    raise ValueError(f"{name} is not a JSON number")


def loads(data, what: str, max_bytes: int = MAX_JSON_BYTES, max_containers: int | None = None):
    """JSON text (str or UTF-8 bytes) -> its value, or ConfigError saying what is wrong with it:
    over `max_bytes`, not UTF-8, not JSON, NaN or Infinity, an integer too long to read, a
    number too large for a float, nesting deeper than MAX_JSON_DEPTH, more than `max_containers`
    objects and arrays (a megabyte of "[]," is 350,000 of them: seconds to walk, and memory)."""
    if len(data) > max_bytes:
        unit = "characters" if isinstance(data, str) else "bytes"
        raise ConfigError(f"{what} is {len(data):,} {unit} long; the limit is {max_bytes:,}")
    # every object and array opens with a bracket (one inside a string only counts against it): counted
    # before reading, at memory speed, where reading and walking them would take a quarter second a MB
    if max_containers is not None and data.count("[" if isinstance(data, str) else b"[") + \
            data.count("{" if isinstance(data, str) else b"{") > max_containers:
        raise ConfigError(f"{what} holds more than {max_containers:,} objects and arrays")
    if isinstance(data, (bytes, bytearray)):
        try:
            data = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ConfigError(f"{what} is not UTF-8 text (byte {exc.start})") from None
    # json recurses once per level and stops at Python's recursion limit; a garbage collection
    # there runs other objects' finalizers with no stack left, which fail as unraisable errors,
    # so none runs while it reads (the values it builds hold no cycles)
    collecting = gc.isenabled()
    gc.disable()
    try:
        value = json.loads(data, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{what} is not valid JSON ({exc.msg}, line {exc.lineno} column {exc.colno})") from None
    except RecursionError:
        raise ConfigError(f"{what} is nested too deeply (the limit is {MAX_JSON_DEPTH} levels)") from None
    except ValueError as exc:                      # NaN/Infinity, or an integer over Python's digit limit
        reason = "NaN and Infinity are not JSON numbers" if "JSON number" in str(exc) else \
            "it holds an integer too long to read"
        raise ConfigError(f"{what} is not valid JSON: {reason}") from None
    finally:
        if collecting:
            gc.enable()
    _check_tree(value, what)
    return value


def _check_tree(value, what: str) -> None:
    """Depth at most MAX_JSON_DEPTH and every float finite (json reads 1e999 as infinity); walked
    with a stack, not recursion."""
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, (dict, list)):
            if depth > MAX_JSON_DEPTH:
                raise ConfigError(f"{what} is nested too deeply (the limit is {MAX_JSON_DEPTH} levels)")
            stack.extend((child, depth + 1) for child in (node.values() if isinstance(node, dict) else node))
        elif isinstance(node, float) and not math.isfinite(node):
            raise ConfigError(f"{what} holds a number too large for a float (like 1e999)")


def bounded_lines(stream, limit: int):
    """(number, bytes of the line, or None when it is over `limit` bytes) for each line of a
    binary stream, holding at most `limit` bytes at a time."""
    number = 0
    while True:
        raw = stream.readline(limit + 1)
        if not raw:
            return
        number += 1
        if len(raw) > limit and not raw.endswith(b"\n"):
            while raw and not raw.endswith(b"\n"):        # skip the rest of the long line
                raw = stream.readline(1 << 16)
            yield number, None
        else:
            yield number, raw
