"""Smoke test of the app through gradio_client: a valid layout draws, an invalid one explains."""
import pytest
from gradio_client import Client

import app


@pytest.fixture(scope="module")
def client():
    demo = app.build_app()
    demo.launch(server_name="127.0.0.1", server_port=7870, prevent_thread_lock=True, quiet=True)
    yield Client("http://127.0.0.1:7870/", verbose=False)
    demo.close()


ARGS = ["llama3-70b", "", "H100-80GB", 4, 8, 1, 8, 4, 1, 1, True, 1, 64, 8192, "none", "1f1b", "megatron"]


def test_memory_page_answers_with_the_calculators_number(client):
    from calculators.scenario import evaluate
    plot, text = client.predict(*ARGS, api_name="/memory")
    expected = evaluate({"model": {"preset": "llama3-70b"}, "hardware": {"nodes": 4, "gpus_per_node": 8},
                         "parallel": {"dp": 1, "tp": 8, "pp": 4, "zero": 1, "sp": True, "gbs": 64, "seq": 8192}})
    assert plot is not None and f"**{expected['memory']['total_gib']:.2f} GiB**" in text


def test_invalid_layout_is_explained_inline(client):
    args = list(ARGS)
    args[6] = 3
    plot, text = client.predict(*args, api_name="/memory")
    assert plot is None and "tp=3 must divide heads=64" in text


def test_pasted_config_json(client):
    args = list(ARGS)
    args[1] = '{"model_type": "llama", "num_hidden_layers": 2'
    _, text = client.predict(*args, api_name="/memory")
    assert "not valid JSON" in text
