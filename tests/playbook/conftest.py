"""The app served as a user starts it (`python app.py`), in its own process, for the browser and
load tests."""
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import gradio as gr
import pytest

from playbook import ui

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# A bare Gradio server, started the way app.py starts: the yardstick for app.py's start, most of
# which is importing Gradio and building its web app (4 to 9 s on a 2-core machine, as busy as
# its neighbours make it).
BARE = """
import os
import gradio as gr
with gr.Blocks() as demo:
    gr.Markdown("bare")
    gr.Plot()
demo.launch(server_name="127.0.0.1", server_port=int(os.environ["GRADIO_SERVER_PORT"]))
"""


def start_app(args=("app.py",)):
    """Start app.py as a user does (or `args` instead), in its own process; (process, url, seconds
    until it answered)."""
    port = free_port()
    what = "app.py" if tuple(args) == ("app.py",) else "the bare Gradio server"
    env = {**os.environ, "GRADIO_SERVER_PORT": str(port), "GRADIO_ANALYTICS_ENABLED": "False"}
    t0 = time.perf_counter()
    # the server's output goes to a file, not a pipe nobody reads: a full pipe would block the server
    log = tempfile.TemporaryFile(mode="w+")
    proc = subprocess.Popen([sys.executable, *args], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                            text=True)
    proc.log = log
    url = f"http://127.0.0.1:{port}/"
    while True:
        if proc.poll() is not None:
            log.seek(0)
            pytest.fail(f"{what} exited with {proc.returncode}:\n{log.read()}")
        try:
            urllib.request.urlopen(url, timeout=1)
            return proc, url, time.perf_counter() - t0
        except OSError:
            if time.perf_counter() - t0 > 60:
                proc.terminate()
                pytest.fail(f"{what} did not answer within 60 s")
            time.sleep(0.1)


def stop_app(proc) -> None:
    proc.terminate()
    proc.wait(timeout=20)
    proc.log.close()


def start_seconds(args=("app.py",)) -> float:
    """One more start of app.py (or of `args`), timed."""
    proc, _, seconds = start_app(args)
    stop_app(proc)
    return seconds


def bare_start_seconds() -> float:
    """Seconds for a bare Gradio server (BARE) to answer."""
    return start_seconds(("-c", BARE))


@pytest.fixture(scope="session")
def served():
    """app.py as a user starts it, in its own process; yields (process, url, seconds until it answered)."""
    proc, url, seconds = start_app()
    try:
        yield proc, url, seconds
    finally:
        stop_app(proc)


@pytest.fixture(scope="session")
def server(served):
    """(url, seconds until it answered) of the served app."""
    return served[1], served[2]


def rss_mib(pid: int) -> float:
    """Resident memory of a process in MiB (Linux /proc), what a Space's memory limit counts."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


@pytest.fixture(scope="session")
def widgets():
    """The served page's widgets (ids, controls, defaults), built the same way in this process."""
    return ui.build(gr.Blocks())
