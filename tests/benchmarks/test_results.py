"""Result files: atomic appends, a corrupt or torn line reported and skipped, resume keys."""
import json
import multiprocessing as mp

import pytest

from benchmarks import results


def _row(i, status="ok"):
    return results.make_row("gemm", {"m": i, "n": 8, "k": 8, "dtype": "fp32"}, status,
                            metrics={"tflops": float(i)}, error="" if status == "ok" else "boom")


def test_append_and_load_round_trip(tmp_path):
    path = tmp_path / "r.jsonl"
    for i in range(3):
        results.append(path, _row(i))
    loaded = results.load(path)
    assert [r["metrics"]["tflops"] for r in loaded.rows] == [0.0, 1.0, 2.0] and loaded.problems == []


def test_corrupt_line_is_reported_and_skipped(tmp_path):
    path = tmp_path / "r.jsonl"
    results.append(path, _row(1))
    with open(path, "a") as fh:
        fh.write('{"schema": 1, "suite": "gemm", "sta\n')          # torn by a killed writer
        fh.write(json.dumps({"schema": 1, "suite": "nope", "status": "ok", "config": {}}) + "\n")
    results.append(path, _row(2))
    loaded = results.load(tmp_path)                                  # a directory loads every *.jsonl
    assert [r["metrics"]["tflops"] for r in loaded.rows] == [1.0, 2.0]
    assert len(loaded.problems) == 2
    assert "r.jsonl:2: not valid JSON" in loaded.problems[0] and "suite 'nope'" in loaded.problems[1]


def test_append_after_a_torn_last_line_starts_a_new_line(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text('{"schema": 1, "su')                             # no trailing newline
    results.append(path, _row(5))
    loaded = results.load(path)
    assert [r["metrics"]["tflops"] for r in loaded.rows] == [5.0] and len(loaded.problems) == 1


def test_invalid_rows_are_refused():
    with pytest.raises(ValueError, match="status"):
        results.make_row("gemm", {}, "fine")
    with pytest.raises(ValueError, match="suite"):
        results.append("unused.jsonl", {"schema": 1, "suite": "x", "status": "ok", "config": {}})


def _writer(path, start):
    for i in range(start, start + 50):
        results.append(path, _row(i))


def test_concurrent_appends_never_interleave(tmp_path):
    path = tmp_path / "r.jsonl"
    procs = [mp.get_context("fork").Process(target=_writer, args=(path, k * 100)) for k in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    loaded = results.load(path)
    assert loaded.problems == [] and len(loaded.rows) == 200


def test_finished_keys_and_retry(tmp_path):
    path = tmp_path / "r.jsonl"
    ok, err = _row(1), _row(2, "error")
    results.append(path, ok)
    results.append(path, err)
    assert results.finished_keys(path) == {ok["key"], err["key"]}
    assert results.finished_keys(path, retry_errors=True) == {ok["key"]}
    assert results.run_key("gemm", {"a": 1, "b": 2}) == results.run_key("gemm", {"b": 2, "a": 1})


def test_an_upload_of_blank_lines_or_spaces_is_read_at_once_with_its_lines_numbered():
    """A visitor's upload: 32 MiB of blank lines, or a line of 200,000 spaces, is read in well
    under a second (a Python loop over the lines took 9.5 s; an unanchored pattern was quadratic
    in a run of spaces: 54 s for 100,000); the lines that hold text keep their numbers."""
    import time
    for data in (b"\n" * (32 * 2**20), b" " * 200_000, b" \t\r\n" * (4 * 2**20)):
        t0 = time.perf_counter()
        got = results.load_bytes(data, "upload", max_rows=20_000)
        assert time.perf_counter() - t0 < 3.0 and not got.rows and not got.problems
    got = results.load_bytes(b'\n\n{"x": 1}\r\n' + b"a" * (results.MAX_LINE_BYTES + 10) + b"\n{bad", "u", 20_000)
    assert [p.split(":")[1] for p in got.problems] == ["3", "4", "5"], got.problems


def test_an_upload_of_rows_holding_hundreds_of_thousands_of_arrays_is_refused_line_by_line_at_once():
    """A megabyte line of "[]," is 350,000 arrays: read and walked, a quarter second a line, 41 s for
    a 32 MB upload, and 700 MB held per upload. Each line's brackets are counted before it is read;
    a row the harness writes holds about ten objects and arrays, its per-step lists numbers."""
    import json
    import time
    line = b"[" + b"[]," * 340_000 + b"[]]\n"
    row = dict(json.loads(open(results.BUNDLED / "h100_harness.jsonl", "rb").readline()))
    row["metrics"] = dict(row["metrics"], junk=[[]] * 200_000)
    nested = (json.dumps(row) + "\n").encode()
    for data in (line * 31, nested * 31):
        t0 = time.perf_counter()
        got = results.load_bytes(data, "upload", max_rows=20_000)
        assert time.perf_counter() - t0 < 2.0 and not got.rows
        assert len(got.problems) == 31 and all("more than 1,000 objects and arrays" in p for p in got.problems)
    row["metrics"] = dict(row["metrics"], junk=[1.5] * 1000)
    assert len(results.load_bytes((json.dumps(row) + "\n").encode(), "upload").rows) == 1
