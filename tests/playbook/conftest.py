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


@pytest.fixture(scope="session")
def server():
    """app.py as a user starts it, in its own process; yields (url, seconds until it answered)."""
    port = free_port()
    env = {**os.environ, "GRADIO_SERVER_PORT": str(port), "GRADIO_ANALYTICS_ENABLED": "False"}
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "app.py"], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}/"
    try:
        while True:
            if proc.poll() is not None:
                pytest.fail(f"app.py exited with {proc.returncode}:\n{proc.stdout.read()}")
            try:
                urllib.request.urlopen(url, timeout=1)
                break
            except OSError:
                if time.perf_counter() - t0 > 60:
                    pytest.fail("app.py did not answer within 60 s")
                time.sleep(0.1)
        yield url, time.perf_counter() - t0
    finally:
        proc.terminate()
        proc.wait(timeout=20)


@pytest.fixture(scope="session")
def widgets():
    """The served page's widgets (ids, controls, defaults), built the same way in this process."""
    with gr.Blocks():
        return ui.build()
