"""Benchmark results as JSON Lines: one run per line, appended atomically, loaded forgivingly.

No torch here: the playbook reads results through this module (shared/DESIGN.md layers).

A row (schema 1):
    {"schema": 1, "suite": "train" | "collectives" | "gemm" | "memory" | "attention" | "moe",
     "status": "ok" | "oom" | "error", "error": "message" (status error/oom),
     "key": "<hash of suite + config>", "time": "2026-11-22T10:00:00Z",
     "config": {...}       # train/memory: a calculator scenario {"model", "hardware", "parallel"}
                           # plus "run" (steps, optimizer, device ...); gemm/collectives: the case
     "host": {"device", "gpu", "gpus", "nodes", "torch", "cuda", "nccl"},
     "metrics": {...},     # measured: step_time_s, tokens_per_s_per_gpu, mfu, peak_allocated_gib,
                           # peak_reserved_gib, losses, busbw_gbps, tflops ...
     "prediction": {...} | {"error": "..."},   # what the calculators said for this config
     "source": "citation"} # rows converted from published measurements

Appends take an exclusive lock and write the whole line in one `write` on an O_APPEND file, so
two processes (or a crash mid-run) never interleave or tear lines; the loader reports and skips
any line that is not a valid row, so one corrupt line never hides the rest.
"""
from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

SCHEMA = 1
SUITES = ("train", "collectives", "gemm", "memory", "attention", "moe")
STATUSES = ("ok", "oom", "error")
BUNDLED = Path(__file__).parent / "results"

try:                                   # POSIX advisory lock; elsewhere the O_APPEND write suffices
    import fcntl
except ImportError:                    # pragma: no cover
    fcntl = None


def run_key(suite: str, config: dict) -> str:
    """Stable identity of a run: the same suite and config always give the same key (resume)."""
    text = json.dumps({"suite": suite, "config": config}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def make_row(suite: str, config: dict, status: str, *, metrics=None, prediction=None, host=None,
             error: str = "", source: str = "") -> dict:
    row = {"schema": SCHEMA, "suite": suite, "status": status, "key": run_key(suite, config),
           "time": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
           "config": config, "host": host or {}, "metrics": metrics or {}, "prediction": prediction or {}}
    if error:
        row["error"] = error
    if source:
        row["source"] = source
    problem = row_problem(row)
    if problem:
        raise ValueError(problem)
    return row


def row_problem(row) -> str:
    """'' when `row` is a valid result row, else what is wrong with it."""
    if not isinstance(row, dict):
        return "not a JSON object"
    if row.get("schema") != SCHEMA:
        return f"schema is {row.get('schema')!r}, expected {SCHEMA}"
    if row.get("suite") not in SUITES:
        return f"suite {row.get('suite')!r} is not one of {', '.join(SUITES)}"
    if row.get("status") not in STATUSES:
        return f"status {row.get('status')!r} is not one of {', '.join(STATUSES)}"
    for key in ("config", "metrics", "host", "prediction"):
        if not isinstance(row.get(key, {}), dict):
            return f"{key} must be an object"
    if not isinstance(row.get("config"), dict):
        return "config is missing"
    return ""


def dumps(row: dict) -> str:
    """One row as its line in a results file."""
    return json.dumps(row, sort_keys=True, separators=(",", ":")) + "\n"


def append(path: str | Path, row: dict) -> None:
    """Append one row atomically (exclusive lock, one write, fsync)."""
    problem = row_problem(row)
    if problem:
        raise ValueError(f"refusing to write an invalid row: {problem}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = dumps(row).encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        if fcntl:
            fcntl.flock(fd, fcntl.LOCK_EX)
        if os.fstat(fd).st_size and not _ends_with_newline(path):
            data = b"\n" + data        # a torn last line (killed writer) stays on its own line
        os.write(fd, data)
        os.fsync(fd)
    finally:
        if fcntl:
            fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def _ends_with_newline(path: Path) -> bool:
    with open(path, "rb") as fh:
        fh.seek(-1, os.SEEK_END)
        return fh.read(1) == b"\n"


@dataclass
class Loaded:
    rows: list = field(default_factory=list)
    problems: list = field(default_factory=list)   # "file:line: what is wrong"; those lines are skipped

    def extend(self, other: "Loaded") -> "Loaded":
        self.rows += other.rows
        self.problems += other.problems
        return self


def load(*paths: str | Path) -> Loaded:
    """Rows of every .jsonl file given (a directory: all its *.jsonl), skipping bad lines."""
    out = Loaded()
    for p in paths:
        p = Path(p)
        files = sorted(p.glob("*.jsonl")) if p.is_dir() else [p]
        for f in files:
            out.extend(_load_file(f))
    return out


MAX_LINE_BYTES = 1 << 20        # a row is a few KB; a longer line is skipped unread
# objects and arrays in one row: the harness writes about ten (its per-step lists hold numbers);
# a line of "[]," is read in milliseconds but walked and held as hundreds of thousands of them
MAX_ROW_CONTAINERS = 1_000
MAX_PROBLEMS = 100              # problems listed per file; the rest are counted


def _load_file(path: Path) -> Loaded:
    """Stream `path` line by line: a line that is not a valid row (not JSON, nested too deeply, an
    integer too long to read, NaN, longer than MAX_LINE_BYTES, the wrong shape) is reported and
    skipped, so one bad line never hides the rest and a large file is never read whole."""
    out = Loaded()
    try:
        if not path.is_file():
            out.problems.append(f"{path.name}: not a regular file")
            return out
        fh = open(path, "rb")
    except OSError as exc:
        out.problems.append(f"{path.name}: cannot read ({exc.strerror})")
        return out
    with fh:
        from calculators.specs.validate import bounded_lines
        return _load_lines(bounded_lines(fh, MAX_LINE_BYTES), path.name, out)


def load_bytes(data: bytes, name: str, max_rows: int | None = None) -> Loaded:
    """Rows of a results file's contents (an upload), as `load` reads a file; past `max_rows`
    non-empty lines the rest is not read (and that is said)."""
    return _load_lines(_text_lines(data), name, Loaded(), max_rows)


# anchored at a line's start: unanchored, a long run of spaces was rescanned from every position
# (quadratic: 100,000 spaces took 54 s, holding the interpreter)
_TEXT_LINE = re.compile(rb"(?m)^[^\n]*\S[^\n]*")


def _text_lines(data: bytes):
    """(number, line or None when over MAX_LINE_BYTES) of each line of `data` that is not blank:
    found by a regular expression, so 32 MiB of blank lines costs milliseconds, not a Python loop
    over millions of them."""
    number, at = 1, 0
    for m in _TEXT_LINE.finditer(data):
        number += data.count(b"\n", at, m.start())
        at = m.end()
        yield number, (m.group() + b"\n" if m.end() - m.start() <= MAX_LINE_BYTES else None)


def _load_lines(lines, name: str, out: Loaded, max_rows: int | None = None) -> Loaded:
    from calculators.specs.errors import ConfigError
    from calculators.specs.validate import loads
    skipped = 0

    def problem(text):
        nonlocal skipped
        if len(out.problems) < MAX_PROBLEMS:
            out.problems.append(text)
        else:
            skipped += 1

    from calculators.specs.limits import check_time
    read = 0
    for n, line in lines:
        check_time()                     # the caller's time budget, when it has one (a widget's)
        if line is None:
            problem(f"{name}:{n}: longer than {MAX_LINE_BYTES:,} bytes; line skipped")
            continue
        if not line.strip():
            continue
        read += 1
        if max_rows is not None and read > max_rows:
            out.problems.append(f"{name}: more than {max_rows:,} rows; the rest (from line {n}) not read")
            break
        try:
            row = loads(line, f"line {n}", max_bytes=MAX_LINE_BYTES + 1, max_containers=MAX_ROW_CONTAINERS)
        except ConfigError as exc:
            problem(f"{name}:{n}: {str(exc).removeprefix(f'line {n} is ')}; line skipped")
            continue
        bad = row_problem(row)
        if bad:
            problem(f"{name}:{n}: {bad}; line skipped")
            continue
        out.rows.append(row)
    if skipped:
        out.problems.append(f"{name}: {skipped} more bad lines skipped")
    return out


def finished_keys(path: str | Path, retry_errors: bool = False) -> set:
    """Keys of the runs already recorded in `path` (a sweep skips them when it resumes)."""
    path = Path(path)
    if not path.exists():
        return set()
    done = ("ok", "oom") if retry_errors else STATUSES
    return {r["key"] for r in load(path).rows if r["status"] in done and "key" in r}
