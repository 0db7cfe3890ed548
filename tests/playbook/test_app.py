"""The app through its API: every widget answers with the calculators' numbers, bad input is
explained inline, the URL restores settings; latency and load (slow)."""
import asyncio
import json
import statistics
import time

import pytest
from gradio.state_holder import SessionState
from gradio_client import Client

import app
from calculators.scenario import evaluate
from playbook.url import values_from_query

PORT = 7870


@pytest.fixture(scope="module")
def demo():
    d = app.build_app()
    d.launch(server_name="127.0.0.1", server_port=PORT, prevent_thread_lock=True, quiet=True)
    yield d
    d.close()


@pytest.fixture(scope="module")
def client(demo):
    return Client(f"http://127.0.0.1:{PORT}/", verbose=False)


def endpoints(client):
    api = client.view_api(return_format="dict", print_info=False)["named_endpoints"]
    return {name: [p.get("parameter_default") for p in ep["parameters"]] for name, ep in api.items()}


def test_every_widget_draws_without_error(client):
    eps = endpoints(client)
    assert len(eps) >= 15
    for name, args in eps.items():
        out = client.predict(*args, api_name=name)
        assert out[0] is not None, name
        assert "Something went wrong" not in str(out[-1]) and "Cannot evaluate" not in str(out[-1]), (name, out[-1])


def args_of(demo, wid, **changes):
    """The widget's endpoint arguments: its defaults, with `changes` by setting name."""
    w = next(w for w in demo.playbook_widgets if w.wid == wid)
    assert set(changes) <= set(w.controls), f"{wid} has no control for {set(changes) - set(w.controls)}"
    return [changes.get(k, w.defaults[k]) for k in w.controls]


def test_every_figure_is_valid_plotly(demo):
    """Figures are served as plain JSON; plotly's own objects check every property here."""
    for w in demo.playbook_widgets:
        fig = w.handler(*args_of(demo, w.wid))[0]
        assert fig is not None, w.wid
        checked = fig.validated()                     # raises on an unknown or invalid property
        assert len(checked.data) == len(fig.data) > 0, w.wid


def test_memory_widget_shows_the_calculators_number(demo, client):
    _, text = client.predict(*args_of(demo, "memory_6_3"), api_name="/memory_6_3")
    expected = evaluate({"model": {"preset": "llama3-70b"}, "hardware": {"nodes": 4, "gpus_per_node": 8},
                         "parallel": {"dp": 1, "tp": 8, "pp": 4, "zero": 1, "sp": True, "gbs": 64, "seq": 8192}})
    assert f"**{expected['memory']['total_gib']:.2f} GiB**" in text


def test_invalid_layout_and_bad_config_are_explained_inline(demo, client):
    plot, text = client.predict(*args_of(demo, "step_14_1", nodes=3, tp=3), api_name="/step_14_1")
    assert plot is None and "tp=3 must divide heads=32" in text
    bad = '{"model_type": "llama", "num_hidden_layers": 2'
    plot, text = client.predict(*args_of(demo, "memory_1_1", config=bad), api_name="/memory_1_1")
    assert plot is None and "not valid JSON" in text


def test_a_pasted_sliding_window_config_names_its_windowed_layers(demo, client):
    gemma2 = json.dumps({"model_type": "gemma2", "num_hidden_layers": 42, "hidden_size": 3584, "num_attention_heads": 16,
                         "num_key_value_heads": 8, "head_dim": 256, "intermediate_size": 14336, "vocab_size": 256000,
                         "sliding_window": 4096, "_name_or_path": "<b>gemma</b>"})
    _, text = client.predict(*args_of(demo, "memory_1_1", config=gemma2), api_name="/memory_1_1")
    # the model's description names its window once (the step widget's note says what that counts)
    assert "From the pasted config.json" in text and "sliding window 4,096 on 21 layers" in text
    assert "pairs within it" not in text
    _, text = client.predict(*args_of(demo, "step_14_1", config=gemma2, nodes=1), api_name="/step_14_1")
    assert "on 21 of 42 layers" in text and "pairs within it" in text
    assert "<b>" not in text


def test_url_query_sets_chapter_and_valid_settings_only(demo):
    widgets = demo.playbook_widgets
    w = next(w for w in widgets if w.wid == "schedule_6_1")
    chapter, settings = values_from_query(
        {"chapter": "pipeline-parallel", "schedule_6_1.m": "16", "schedule_6_1.schedule": "zb",
         "schedule_6_1.p": "999", "schedule_6_1.v": "x", "nope.m": "3"}, widgets, ["pipeline-parallel"])
    assert chapter == "pipeline-parallel"
    assert settings == {("schedule_6_1", "m"): 16, ("schedule_6_1", "schedule"): "zb"}
    assert w.defaults["m"] == 8
    # a recompute module list typed into a link: its '+' arrives as a space
    _, settings = values_from_query({"memory_7_1.recompute": "layernorm moe", "memory_7_1.seq": "4096 8"}, widgets,
                                    ["expert-parallel"])
    assert settings == {("memory_7_1", "recompute"): "layernorm+moe"}


def test_each_chapter_is_a_page_of_its_own(demo):
    """A page per chapter, at its slug, holding only its own widgets: a browser loads one chapter's
    components (22 at the root, where one page of all chapters had 351), which is what draws the
    first widget about as soon as a bare Gradio page's plot (test_browser.py)."""
    from playbook import book
    chapters = book.chapters()
    config = demo.get_config_file()
    assert [p[0] for p in demo.pages] == [""] + [c.slug for c in chapters[1:]]
    by_id = {c["id"]: c for c in config["components"]}
    for ch, (slug, *_) in zip(chapters, demo.pages):
        ids = config["page"][slug]["components"]
        elems = {by_id[i].get("props", {}).get("elem_id") for i in ids}
        mine = [w.wid for w in demo.playbook_widgets if w.wid.split("_")[1] == str(ch.order)]
        assert mine and all(f"{wid}-plot" in elems for wid in mine), (slug, mine)
        others = [w.wid for w in demo.playbook_widgets if w.wid not in mine and f"{w.wid}-plot" in elems]
        assert not others, (slug, others)
        assert len(ids) <= 60, f"page {slug or '/'} has {len(ids)} components"


def _server_side_ms(demo, name, args, n):
    """Gradio's own processing of one event (preprocess, handler, postprocess), no network."""
    fn = next(f for f in demo.fns.values() if f.api_name == name.lstrip("/"))
    state = SessionState(demo)
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        asyncio.run(demo.process_api(fn, list(args), state))
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.quantiles(times, n=20)[-1] if n > 1 else times[0]


@pytest.mark.slow
def test_widgets_answer_in_under_100_ms_server_side(demo, client):
    slow = {}
    for name, args in endpoints(client).items():
        if name.startswith("/planner"):
            continue                                  # a search, timed below
        p95 = _server_side_ms(demo, name, args, 200)
        if p95 >= 100:
            slow[name] = p95
    assert not slow, slow


@pytest.mark.slow
def test_planner_widget_answers_in_seconds(demo, client):
    from playbook.widgets import planner
    name, args = next((n, a) for n, a in endpoints(client).items() if n.startswith("/planner"))
    times = []
    for _ in range(3):
        planner._plan.cache_clear()                   # a new question each time: the whole search
        times.append(_server_side_ms(demo, name, args, 1))
    assert max(times) < 5000, times


def test_planner_widget_plans_for_the_chosen_framework():
    """The framework control sets the memory layout and keeps plans to what that framework runs."""
    from playbook.widgets import planner
    values = {key: default for key, (_, default) in planner.CONTROLS.items()}
    values.update(framework="nanotron", model="llama3-8b", nodes=2, gbs=128)
    _, rows, _, text = planner.compute(values)
    assert rows and "nanotron's layout" in text
    for row in rows:
        label = row[1]
        assert " cp1 " in label and "zero2" not in label and "zero3" not in label, label
        assert label.split(" mbs")[1].split()[1] in ("1f1b", "gpipe"), label


def test_planner_widget_dispatches_through_deepep_when_installed():
    from playbook.widgets import planner
    values = {key: default for key, (_, default) in planner.CONTROLS.items()}
    values.update(model="qwen3-30b-a3b", nodes=4, seq=4096, gbs=256, deepep=True)
    _, rows, code, _ = planner.compute(values)
    moe = [row[1] for row in rows if " ep" in row[1]]
    assert moe and all("deepep" in label for label in moe), moe
    assert "--moe-flex-dispatcher-backend deepep" in code or " ep" not in rows[0][1]
    values["deepep"] = False
    _, rows, _, _ = planner.compute(values)
    assert not any("deepep" in row[1] for row in rows)


def test_step_widget_says_what_the_experts_host_time_is():
    """The FP8 per-expert loop shows as host time in the step's breakdown; the note says how much
    and that it is fitted, and says nothing where the experts are fused or run in BF16."""
    from playbook.widgets import step
    v = dict(model="qwen3-30b-a3b", gpu="H100-80GB", nodes=1, gpn=8, fit="dp", tp=1, pp=1, ep=8, zero=1, mbs=1,
             gbs=64, seq=4096, precision="fp8", experts="")
    fig, note = step.compute(v)
    assert "16 local experts x 0.2 ms" in note and "fitted" in note
    assert any("host" in str(trace.get("name", "")).lower() for trace in fig.data)
    for change in ({"experts": "fused"}, {"precision": "bf16"}):
        assert "experts' FP8 loop" not in step.compute({**v, **change})[1]


def test_the_attention_kernel_control_offers_every_kernel_the_calculators_take():
    """The step widget's attention control lists parallel.ATTENTION_KERNELS, each with a label;
    picking cuDNN's 2025 releases on a B200 slows a 16k-token step and the note names the kernel."""
    from calculators.specs.parallel import ATTENTION_KERNELS
    from playbook.widgets import SCENARIO, step
    control = SCENARIO["attention"][0]("")
    assert [value for _, value in control.choices] == list(ATTENTION_KERNELS)
    assert all(label for label, _ in control.choices)
    v = dict(model="llama3-8b", gpu="B200", nodes=1, gpn=8, fit="dp", tp=1, pp=1, zero=1, mbs=1, gbs=64,
             seq=16384, attention="cudnn")
    today, old = step.compute(v)[1], step.compute({**v, "attention": "cudnn-2025"})[1]
    seconds = [float(note.split("**")[1].split()[0]) for note in (today, old)]
    assert seconds[1] > 1.02 * seconds[0]
    assert "Attention: cuDNN 9.9 to 9.13 (2025)." in old and "Attention: cuDNN." in today


def test_the_dispatch_sms_control_moves_deepeps_step_on_blackwell_and_names_a_bad_value():
    """DeepEP's kernels on 128 SMs take less of a B200 step than on the default 20 (its SM-bound
    rates); an odd count, which DeepEP refuses, is refused naming the field."""
    from playbook.widgets import step
    v = dict(model="qwen3-30b-a3b", gpu="B200", nodes=1, gpn=8, fit="dp", tp=1, pp=1, ep=8, zero=3, mbs=8,
             gbs=64, seq=4096, framework="fsdp2", recompute="full", dispatcher="deepep", dispatch_sms=0)
    notes = [step.compute({**v, "dispatch_sms": n})[1] for n in (0, 128)]
    seconds = [float(note.split("**")[1].split()[0]) for note in notes]
    assert seconds[1] < 0.9 * seconds[0]
    from calculators.specs.errors import ConfigError
    with pytest.raises(ConfigError, match="parallel.dispatch_sms=3 must be even"):
        step.compute({**v, "dispatch_sms": 3})         # the widget shows a ConfigError's message


def test_an_upload_event_given_a_server_path_reads_nothing(demo):
    """The config.json upload hands its handler a path: one a client names (not one it uploaded)
    is refused by Gradio before the handler runs, so no server file reaches the page."""
    import httpx
    idx = next(i for i, f in demo.fns.items() if getattr(f.fn, "__name__", "") == "_read_upload")
    base = f"http://127.0.0.1:{PORT}/"
    data = [{"path": "/etc/passwd", "meta": {"_type": "gradio.FileData"}, "orig_name": "passwd"}]
    r = httpx.post(base + "gradio_api/queue/join", json={"data": data, "fn_index": idx, "session_hash": "upload-1"})
    r.raise_for_status()
    seen = []
    with httpx.stream("GET", base + "gradio_api/queue/data?session_hash=upload-1", timeout=20) as stream:
        for line in stream.iter_lines():
            seen.append(line)
            if "process_completed" in line:
                break
    done = json.loads(seen[-1][len("data: "):])
    assert done["success"] is False and "root:" not in "".join(seen)


def test_the_app_needs_no_torch():
    """The Space installs requirements.txt alone: it names no torch, and the app builds in a
    process where importing torch fails."""
    import subprocess
    import sys
    from pathlib import Path
    root = Path(__file__).resolve().parents[2]
    assert not [l for l in (root / "requirements.txt").read_text().splitlines() if l.strip().startswith("torch")]
    code = ("import sys; sys.modules['torch'] = None\n"
            "import app; app.build_app(); print('built', 'torch' in sys.modules and sys.modules['torch'] is not None)")
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and "built False" in out.stdout, out.stderr[-2000:]


def test_every_part_of_a_step_has_its_colour_everywhere():
    """One visual language: each kind of time (compute, each kind of communication exposed or
    hidden, bubble, optimizer, host) has one colour in every chart of a step's parts, as each
    memory role has in every memory chart."""
    from calculators.specs.hardware import ClusterSpec, gpu_from_name
    from calculators.specs.parallel import ParallelConfig
    from calculators.specs.presets import model_from_name
    from calculators.time.step import estimate_step
    from playbook.plots import ROLE_COLOR, TIME_COLOR, breakdown_bar, time_color
    moe = model_from_name("mixtral-8x7b")
    par = ParallelConfig(dp=2, tp=2, pp=2, cp=2, ep=2, mbs=1, gbs=16, seq=8192, sp=True, recompute="selective")
    parts = estimate_step(moe, ClusterSpec(gpu_from_name("H100-80GB"), nodes=4), par).breakdown
    assert {"compute", "recompute", "host_bound", "tp_exposed", "tp_hidden", "cp_hidden", "ep_exposed", "dp_exposed",
            "dp_hidden", "bubble", "optimizer", "other"} <= set(parts)
    assert all(time_color(k) for k in parts), [k for k in parts if not time_color(k)]
    fig = breakdown_bar(parts, "t")
    colours = {t["name"]: t["marker"]["color"] for t in fig.data}
    assert colours.get("tp exposed") == colours.get("tp hidden", TIME_COLOR["tp"]) == TIME_COLOR["tp"]
    assert len(set(TIME_COLOR.values())) == len(TIME_COLOR) and len(set(ROLE_COLOR.values())) == len(ROLE_COLOR)


@pytest.mark.parametrize("gpu,kernel", [("H100-80GB", "cuDNN"), ("GB200", "cuDNN"), ("MI300X", "FlashAttention-2")])
def test_the_rooflines_attention_point_is_the_time_models(gpu, kernel):
    """The roofline's caption says its points run at the rates the time model gives them: the
    attention point is the kernel layer_time costs for the layout's framework on that GPU."""
    from calculators.specs.kernels import layout_attention
    from calculators.time.attention import attention_time
    from calculators.time.flops import attention_flops
    from calculators.time.profiles import default_profile
    from playbook.values import scenario_from
    from playbook.widgets.network import roof_compute
    v = {"model": "llama3-8b", "gpu": gpu, "tp": 1, "mbs": 1, "seq": 8192}
    fig, _ = roof_compute(v)
    (point,) = [t for t in fig.data if t["name"].startswith("attention")]
    model, cluster, par = scenario_from(v)
    seconds = sum(attention_time(model, par, layout_attention(par, gpu), cluster.gpu, default_profile(gpu)))
    assert point["name"] == f"attention ({kernel})"
    assert point["y"][0] == pytest.approx(3.5 * 8192 * attention_flops(model, 8192, causal=True) / seconds / 1e12)
    assert point["x"][0] == pytest.approx(8192 / 4)       # causal: seq/2 keys a query: seq/4 FLOPs a byte
    # a windowed model's point sits at the intensity of the keys its queries see: gpt-oss's half of
    # layers at 128 keys put it at about half of Llama's (any head dim: context / 2)
    fig, _ = roof_compute({**v, "model": "gpt-oss-120b"})
    (point,) = [t for t in fig.data if t["name"].startswith("attention")]
    assert point["x"][0] == pytest.approx((18 * 4096 + 18 * (128 - 128 * 127 / 16384)) / 36 / 2)


def test_the_deferred_page_builds_leave_gradio_as_it_was(demo):
    """ui._deferred_app lets only the last page's exit build the config and the FastAPI app: the
    built app serves every chapter's page, Gradio's create_app is its staticmethod again, and the
    config is the one Gradio computes."""
    import inspect

    import gradio.blocks as blocks
    from playbook import book
    assert isinstance(inspect.getattr_static(blocks.App, "create_app"), staticmethod)
    assert "get_config_file" not in vars(demo) and demo.app is not None
    assert {path for path, *_ in demo.pages} >= {c.slug for c in book.chapters()[1:]}
    assert demo.config["page"].keys() == demo.get_config_file()["page"].keys()
