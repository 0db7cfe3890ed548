"""The app in a real browser: headless Chromium driven by Playwright opens the served app, visits
every chapter, moves a control in every widget, checks the plot changed with no error shown and
the console stayed clean, that no two texts of a plot overlap (nor a text a bar), no control
label is cut and every numeric axis names its unit (tests/playbook/layout.py), and saves a
screenshot per chapter (to $PLAYBOOK_SCREENSHOTS, default artifacts/screenshots/). Chromium
comes from the system (Debian's `chromium`), never from `playwright install`; $PLAYBOOK_CHROMIUM
names another binary."""
import json
import os
import shutil
import time
import urllib.parse
from pathlib import Path

import gradio as gr
import pytest

from playbook import book

from tests.playbook import layout
from tests.playbook.conftest import ROOT, bare_start_seconds, free_port, start_seconds

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--no-first-run"]
SLIDERS = ("seq", "m", "n", "mbs")               # which slider to move, when a widget has no radio
ERRORS = ("Cannot evaluate", "Something went wrong")

pytestmark = pytest.mark.slow


def chromium() -> str:
    path = os.environ.get("PLAYBOOK_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if not path:
        pytest.fail("no Chromium for the browser test: install Debian's `chromium` (apt-get install -y chromium) "
                    "or set PLAYBOOK_CHROMIUM to a Chromium or Chrome binary")
    return path


@pytest.fixture(scope="module")
def browser():
    playwright = pytest.importorskip("playwright.sync_api")
    with playwright.sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium(), args=FLAGS)
        yield b
        b.close()


# Leaving a page aborts the requests still in flight on it (a widget's second, always_last
# request, on a loaded machine): Gradio's client logs each as an error, the abort signal's or, where
# the answer's stream was being read, the stream's ("BodyStreamBuffer was aborted"). Those are the
# reader's navigation, not a fault, and are not counted while open_chapter navigates; a server that
# really broke leaves the next plot undrawn, which wait_for_plot reports.
NAVIGATION_ABORTS = ("AbortError: signal is aborted without reason", "AbortError: BodyStreamBuffer was aborted",
                     "Connection errored out")
NAVIGATING: set = set()             # id() of the pages open_chapter is navigating


def watch(page) -> list:
    """Console errors and uncaught page errors, as they happen."""
    problems = []

    def console(m):
        if m.type == "error" and not (id(page) in NAVIGATING and any(a in m.text for a in NAVIGATION_ABORTS)):
            problems.append(f"console {m.type}: {m.text}")
    page.on("console", console)
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    return problems


PLOT_SIGNATURE = """(id) => {
    const gd = document.querySelector(`#${id} .js-plotly-plot`);
    if (!gd || !gd.data) return null;
    const l = gd.layout;
    return JSON.stringify([gd.data.map(t => [t.x, t.y, t.base, t.text, t.name]), l.title, l.shapes, l.annotations]);
}"""


def plot_of(page, w):
    return page.evaluate(PLOT_SIGNATURE, w.plot.elem_id)


def wait_for_plot(page, w, other_than=None, why="", timeout=20000):
    """The widget's plot once drawn (and different from `other_than`); fails naming the widget."""
    try:
        page.wait_for_function(f"(a) => {{ const s = ({PLOT_SIGNATURE})(a[0]); return s !== null && s !== a[1]; }}",
                               arg=[w.plot.elem_id, other_than], timeout=timeout)
    except Exception as exc:
        note = page.locator(f"#{w.note.elem_id}").inner_text()
        state = "did not change" if other_than else "was not drawn"
        raise AssertionError(f"{w.wid}: plot {state} within {timeout / 1000:.0f} s {why}; its note: {note[:300]}") from exc
    return plot_of(page, w)


def move(page, w) -> str:
    """Change one control of the widget to another valid value, as a reader would; returns what
    was done. Preference: the recompute radio, any radio, then a slider (doubled or halved)."""
    radios = [k for k, c in w.controls.items() if isinstance(c, gr.Radio)]
    sliders = [k for k in SLIDERS if isinstance(w.controls.get(k), gr.Slider)]
    if radios:
        key = "recompute" if "recompute" in radios else radios[0]
        comp = w.controls[key]
        values = [c[1] if isinstance(c, (tuple, list)) else c for c in comp.choices]
        new = [v for v in values if v != comp.value][-1]     # the last choice: the biggest effect, as a rule
        page.locator(f"#{comp.elem_id} label[data-testid='{new}-radio-label']").click()
        return f"{key} -> {new}"
    assert sliders, f"{w.wid}: no radio or slider ({', '.join(SLIDERS)}) to move; add one to the test"
    key = sliders[0]
    comp = w.controls[key]
    new = comp.value * 2 if comp.value * 2 <= comp.maximum else comp.value // 2
    box = page.locator(f"#{comp.elem_id} input[type=number]")
    box.fill(str(new))
    box.press("Enter")
    return f"{key} -> {new}"


def open_chapter(page, url, ch, first):
    """Open a chapter's page from the navigation bar, as a reader does (the first chapter is the root)."""
    if page.url.rstrip("/") != (url + ("" if ch.order == first else ch.slug)).rstrip("/"):
        NAVIGATING.add(id(page))
        try:
            page.locator(f"nav a[href$='/{'' if ch.order == first else ch.slug}']").first.click()
            page.wait_for_url(url + ("" if ch.order == first else ch.slug))
            page.wait_for_selector(f"text={ch.order}. {ch.title}")
        finally:
            NAVIGATING.discard(id(page))
    page.wait_for_selector(f"text={ch.order}. {ch.title}")


def _first_draw(browser, url, plot_id) -> float:
    """Seconds from opening the page, in a new tab, to the plot `plot_id` drawn."""
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    t0 = time.perf_counter()
    page.goto(url, wait_until="commit")
    page.wait_for_function(f"(id) => ({PLOT_SIGNATURE})(id) !== null", arg=plot_id, timeout=30000)
    seconds = time.perf_counter() - t0
    page.close()
    return seconds


@pytest.fixture(scope="module")
def bare_page():
    """The yardstick for the first draw: a bare Gradio page whose one Plotly plot is drawn by a
    load event, served from this process. Gradio's own frontend takes most of a first draw and
    its time swings with the machine (2.7 s on an idle 2-core machine, 4.6 s when it is busy), so
    the app is timed against this page in the same browser at the same moment."""
    import plotly.graph_objects as go
    with gr.Blocks() as demo:
        gr.Markdown("# bare")
        plot = gr.Plot(elem_id="bare-plot")
        demo.load(lambda: go.Figure(go.Bar(x=[1, 2, 3], y=[3, 1, 2])), None, plot)
    demo.queue().launch(server_name="127.0.0.1", server_port=free_port(), prevent_thread_lock=True, quiet=True)
    yield demo.local_url, "bare-plot"
    demo.close()


def first_draws(browser, url, plot_id, bare, tries=5):
    """(the app's first draw, the bare page's), each the best of `tries`, taken in turns so that
    a stall of the shared machine falls on both alike (with two tries, one of four fresh-clone CI
    runs on a 2-core machine caught the app twice in a stall: 1.67 times, where it measured 1.3
    to 1.4 with every chapter in one page; best of three swung from 1.10 to 1.24 with a page per
    chapter)."""
    app, base = [], []
    for _ in range(tries):
        app.append(_first_draw(browser, url, plot_id))
        base.append(_first_draw(browser, *bare))
    return min(app), min(base)


def test_every_chapter_every_widget_in_a_browser(server, browser, widgets, bare_page):
    url, started_s = server
    shots = Path(os.environ.get("PLAYBOOK_SCREENSHOTS", ROOT / "artifacts" / "screenshots"))
    shots.mkdir(parents=True, exist_ok=True)
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    problems = watch(page)
    first = next(w for w in widgets if w.wid.split("_")[1] == "1")
    first_draw_s, bare_s = first_draws(browser, url, first.plot.elem_id, bare_page)
    if first_draw_s >= 1.4 * bare_s:
        # a loaded machine (a fresh-clone CI run) once measured 1.30 where an idle one measures
        # 1.14 to 1.21, the code unchanged: a second round of tries, each side its best of both
        again = first_draws(browser, url, first.plot.elem_id, bare_page)
        first_draw_s, bare_s = min(first_draw_s, again[0]), min(bare_s, again[1])
    page.goto(url)
    chapters = book.chapters()
    page.wait_for_selector(f"nav a[href$='/{chapters[-1].slug}']")
    links = [page.locator(f"nav a[href$='/{ch.slug}']").first for ch in chapters[1:]]
    hidden = [ch.slug for ch, a in zip(chapters[1:], links) if not a.is_visible()]
    assert not hidden, f"chapters missing from the navigation bar at 1280 px: {hidden}"
    rows = {round(a.bounding_box()["y"]) for a in links}
    assert len(rows) == 1, f"the navigation bar wraps onto {len(rows)} lines at 1280 px"
    done, looks = [], []
    for ch in chapters:
        open_chapter(page, url, ch, chapters[0].order)
        mine = [w for w in widgets if w.wid.split("_")[1] == str(ch.order)]
        assert mine, f"chapter {ch.slug} has no widget"
        for w in mine:
            before = wait_for_plot(page, w)
            note = page.locator(f"#{w.note.elem_id}").inner_text()
            assert not any(e in note for e in ERRORS), f"{w.wid} at its defaults: {note}"
            action = move(page, w)
            wait_for_plot(page, w, other_than=before, why=f"after {action}")
            note = page.locator(f"#{w.note.elem_id}").inner_text()
            assert not any(e in note for e in ERRORS), f"{w.wid} after {action}: {note}"
            done.append(f"{w.wid}: {action}")
        # what a reader's eye checks, on the page as drawn after the moves
        looks += [f"{ch.slug}: {p}" for p in layout.text_overlaps(page) + layout.clipped_labels(page) +
                  layout.scrolled_legends(page) + layout.unlabelled_axes(page)]
        page.screenshot(path=str(shots / f"{ch.order:02d}-{ch.slug}.png"), full_page=True)
    assert not problems, problems
    assert not looks, "\n".join(looks)
    assert len(done) == len(widgets)
    # Target: 10 s. Most of a start is importing Gradio and building its web app, which takes a
    # bare Gradio server 4 s on an idle 2-core machine and about 8 s on a busy one; so a start
    # over 10 s is timed again beside a bare server (best of two each) and may take 1.35 times as
    # long as it. Measured on a busy machine: 1.2 times; 1.3 to 1.45 times when the chapters
    # were still rendered in the foreground
    bare_start_s = None
    if started_s >= 10:
        started_s = min(started_s, start_seconds())
        bare_start_s = min(bare_start_seconds(), bare_start_seconds())
    assert started_s < 10 or started_s < 1.35 * bare_start_s, \
        f"server took {started_s:.1f} s to answer, best of two; a bare Gradio server {bare_start_s:.1f} s"
    # Target: 1.2 times the bare page. With every chapter in one page's config (351 components)
    # the first widget drew 1.3 to 1.4 times as late as the bare page's plot: the frontend walks
    # all of them before it draws any. A page per chapter (22 components at the root) draws it
    # 1.10 to 1.24 times as late, 1.18 in the median, on an idle 2-core machine; the rest is the
    # widget's own component types (sliders, radios, a dropdown, an upload button) and its
    # figure. The structure is held apart (test_app.py: test_each_chapter_is_a_page_of_its_own).
    # The bound was 1.3 times; fresh-clone CI runs measured 1.30 and 1.37 with the code unchanged
    # (the commit that had passed, timed beside today's on an idle machine: 1.29 and 1.24, best of
    # six each), so it failed by chance; 1.4 catches a page a third slower than today's.
    assert first_draw_s < 1.4 * bare_s, (f"first widget drawn {first_draw_s:.1f} s after the page opened, "
                                         f"a bare Gradio page's plot {bare_s:.1f} s (bound: 1.4 times that)")
    print(json.dumps({"server_start_s": round(started_s, 1), "bare_server_start_s": bare_start_s and round(bare_start_s, 1), "first_draw_s": round(first_draw_s, 1),
                      "bare_page_first_draw_s": round(bare_s, 1),
                      "moved": done}, indent=1))


def test_a_link_restores_chapter_and_settings(server, browser):
    url, _ = server
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    problems = watch(page)
    # a link from when the chapters were tabs: the chapter's page, with the same settings
    page.goto(url + "?chapter=pipeline-parallel&schedule_6_1.schedule=interleaved&schedule_6_1.m=16&schedule_6_1.p=999")
    page.wait_for_url(url + "pipeline-parallel?*", timeout=20000)
    assert "chapter=" not in page.url
    page.wait_for_function("() => document.querySelector('#schedule_6_1-m input[type=number]')?.value === '16'",
                           timeout=20000)
    assert page.locator("#schedule_6_1-p input[type=number]").input_value() == "4"     # out of range: ignored
    page.wait_for_selector("#schedule_6_1-plot .js-plotly-plot", timeout=20000)
    page.locator("#schedule_6_1-v input[type=number]").fill("3")
    page.locator("#schedule_6_1-v input[type=number]").press("Enter")
    page.wait_for_function("() => new URL(location.href).searchParams.get('schedule_6_1.v') === '3'", timeout=20000)
    assert "schedule_6_1.m=16" in page.url and "schedule_6_1.schedule=interleaved" in page.url   # v is live only there
    assert not problems, problems


def test_a_hostile_link_and_injected_html_harm_nothing(served, browser):
    """A link with a server path, unreadable numbers and markup: the valid settings apply, the rest
    are skipped; a config.json whose name is an <img> shows it as text (the browser fetches
    nothing); the server's memory stays under 1 GB."""
    from tests.playbook.conftest import rss_mib
    proc, url, _ = served
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    problems = watch(page)
    fetched = []
    page.on("request", lambda r: fetched.append(r.url) if urllib.parse.urlparse(r.url).hostname == "example.invalid"
            else None)
    page.goto(url + "?memory_1_1.dp=16&memory_1_1.seq=1e999&memory_1_1.mbs=inf"
                    "&explorer_13_1.local=/dev/zero"
                    "&memory_1_1.recompute=%3Cimg%20src%3Dhttps%3A%2F%2Fexample.invalid%3E"
                    "&memory_1_1.config=%7B%7D&chapter=%3Cimg%20src%3Dhttps%3A%2F%2Fexample.invalid%3E")
    page.wait_for_function("() => document.querySelector('#memory_1_1-dp input[type=number]')?.value === '16'",
                           timeout=20000)
    assert page.locator("#memory_1_1-seq input[type=number]").input_value() == "4096"
    assert "chapter=" not in page.url and urllib.parse.urlparse(page.url).path == "/"   # not a chapter: dropped
    evil = json.dumps({"model_type": "llama", "_name_or_path": "<img src=https://example.invalid/x.png>",
                       "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
                       "intermediate_size": 128, "vocab_size": 1000})
    box = page.locator("#memory_1_1-config textarea")
    box.fill(evil)
    box.blur()
    page.wait_for_function("() => document.querySelector('#memory_1_1-note')?.innerText.includes('example')",
                           timeout=20000)
    assert "<img src=https://example.invalid/x.png>" in page.locator("#memory_1_1-note").inner_text()
    # the pasted config visibly replaces the preset, and says how to go back
    assert "From the pasted config.json, not the preset llama3-8b" in page.locator("#memory_1_1-note").inner_text()
    page.wait_for_function("() => document.querySelector('#memory_1_1-model')?.innerText.includes('not in use')",
                           timeout=20000)
    assert page.locator("img[src*='example.invalid']").count() == 0 and not fetched, fetched
    assert "_name_or_path" not in urllib.parse.unquote(page.url)      # a pasted config is not copied into the link
    assert rss_mib(proc.pid) < 1024
    assert not [p for p in problems if "example.invalid" not in p], problems


def test_budget_widget_draws_redraws_and_its_link_restores_it(server, browser, widgets):
    """The budget chapter's widget: drawn when its chapter opens, redrawn when a control moves (the
    move written into the link), and a link with its settings restores them and draws their plot."""
    url, _ = server
    wid = next(w for w in widgets if w.wid.startswith("budget_")).wid
    slug = next(c.slug for c in book.chapters() if f"_{c.order}_" in wid)
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    problems = watch(page)
    page.goto(url + slug)
    signature = f"() => ({PLOT_SIGNATURE})({json.dumps(wid + '-plot')})"
    page.wait_for_function(f"{signature} !== null", timeout=30000)
    before = page.evaluate(signature)
    page.locator(f"#{wid}-failures label[data-testid='3 x Llama 3-radio-label']").click()
    page.wait_for_function(f"(b) => {{ const s = ({signature})(); return s !== null && s !== b; }}", arg=before,
                           timeout=30000)
    page.wait_for_function(f"() => new URL(location.href).searchParams.get('{wid}.failures') === '3 x Llama 3'",
                           timeout=20000)
    # a link: a smaller range and no failures; the plot's sizes follow it
    restored = browser.new_page(viewport={"width": 1280, "height": 800})
    problems += watch(restored)
    restored.goto(url + f"{slug}?{wid}.largest=2048&{wid}.failures=none")
    restored.wait_for_function(f"() => document.querySelector('#{wid}-failures input[value=\"none\"]')?.checked",
                               timeout=30000)
    restored.wait_for_function(f"() => {{ const s = ({signature})(); return s !== null && "
                               f"JSON.parse(s)[0][0][0].join(',') === '512,1024,2048'; }}", timeout=30000)
    note = restored.locator(f"#{wid}-note").inner_text()
    assert not any(e in note for e in ERRORS) and "512" in note, note[:300]
    assert not problems, problems


def test_a_plans_link_opens_the_step_widget_with_its_step_time(server, browser, widgets):
    """The planner's 'Open plan #1 in the step widget', clicked: the appendix's step widget opens (in
    a new tab, as Gradio opens a Markdown link) set to the plan, showing the plan's step time."""
    from playbook import plan_link
    from playbook.widgets import planner
    url, _ = server
    w = next(w for w in widgets if w.wid.startswith("planner_"))
    v = w.defaults
    best = planner._plan(v["model"], v["gpu"], v["nodes"], v["seq"], v["gbs"], v["recompute"], v["framework"],
                         v["deepep"])["plans"][0]["step"]
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    problems = watch(page)
    page.goto(url + next(c.slug for c in book.chapters() if f"_{c.order}_" in w.wid))
    link = page.locator(f"#{w.note.elem_id} a", has_text="Open plan #1 in the step widget")
    link.wait_for(timeout=60000)
    with page.context.expect_page(timeout=20000) as opened:
        link.click()
    shown = opened.value
    problems += watch(shown)
    want = f"{best['time_s']:.2f} s per step, {best['tokens_per_s_per_gpu']:,.0f} tokens/s/GPU"
    # the appendix's widgets all compute as the new tab loads, on a 2-core CI machine behind the
    # suite's earlier requests: 30 s proved short once; what is checked is the figure, not the wait
    shown.wait_for_function("(a) => document.getElementById(a[0])?.innerText.includes(a[1])",
                            arg=[f"{plan_link.target()[1].wid}-note", want], timeout=90000)
    assert urllib.parse.urlparse(shown.url).path == "/" + plan_link.PAGE
    assert not problems, problems


def test_the_layout_checks_see_what_a_reader_sees(browser):
    """The checks fail where they should: bars on a log axis drawn past the plot over the tick
    labels, a legend on the x-axis title, a value axis without a unit, a label cut by its box, a
    legend taller than its figure (the faults the chapters' plots had)."""
    from playbook.plots import Figure
    bad = Figure(data=[dict(type="bar", name="compute (s)", x=["1", "2"], y=[200, 0.03]),
                       dict(type="bar", name="sync (s)", x=["1", "2"], y=[0, 0.05])],
                 layout=dict(height=420, margin=dict(l=55, r=20, t=60, b=45), barmode="group",
                             yaxis=dict(type="log", title=dict(text="step time")),
                             xaxis=dict(title=dict(text="dp (replicas)")),
                             legend=dict(orientation="h", x=0.45, y=-0.14)))
    crowded = Figure(data=[dict(type="bar", name=f"part {i} (s)", x=[1.0], y=["step"], orientation="h")
                           for i in range(14)],
                     layout=dict(height=220, barmode="stack", xaxis=dict(title=dict(text="seconds")),
                                 legend=dict(orientation="v", x=1.02, y=1)))
    with gr.Blocks() as demo:
        with gr.Row():
            gr.Checkbox(label="a label far too long for the narrow column it was squeezed into", min_width=40,
                        elem_id="narrow", scale=0)
            plot = gr.Plot(elem_id="bad-plot")
        tall = gr.Plot(elem_id="crowded-plot")
        demo.load(lambda: (bad, crowded), None, [plot, tall])
    demo.queue().launch(server_name="127.0.0.1", server_port=free_port(), prevent_thread_lock=True, quiet=True)
    try:
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        page.goto(demo.local_url)
        page.wait_for_function(f"(id) => ({PLOT_SIGNATURE})(id) !== null", arg="bad-plot", timeout=30000)
        page.wait_for_timeout(500)
        overlaps = layout.text_overlaps(page)
        assert any("(x tick) overlaps 'a bar'" in p for p in overlaps), overlaps
        assert any("legend" in p and "x title" in p for p in overlaps), overlaps
        assert layout.unlabelled_axes(page) == ["bad-plot: yaxis title 'step time' names no unit"]
        assert any("far too long" in p for p in layout.clipped_labels(page)), layout.clipped_labels(page)
        scrolled = layout.scrolled_legends(page)
        assert [p.split(":")[0] for p in scrolled] == ["crowded-plot"], scrolled
    finally:
        demo.close()


def test_a_phone_gets_legends_under_the_plot(server, browser):
    """At 390 px the roofline's legend beside its plot left the plot a third of the figure's width:
    on a narrow page it moves under the plot (playbook/narrow.py), the plot as wide as the figure
    allows; at 1280 px it stays beside it."""
    url, _ = server
    shape = """() => { const gd = document.querySelector('#roofline_10_1-plot .js-plotly-plot');
        if (!gd || !gd._fullLayout) return null;
        return [gd.layout.legend.orientation, gd._fullLayout._size.w, gd.clientWidth]; }"""
    for width in (390, 1280):
        page = browser.new_page(viewport={"width": width, "height": 900})
        problems = watch(page)
        page.goto(url + "kernels")
        page.wait_for_selector("#roofline_10_1-plot .js-plotly-plot", timeout=20000)
        if width < 600:
            page.wait_for_function(f"() => ({shape})()?.[0] === 'h'", timeout=10000)
        else:
            time.sleep(1.5)                          # two of narrow.py's rounds: nothing may move
        orientation, plot, figure = page.evaluate(shape)
        assert orientation == ("h" if width < 600 else "v")
        assert plot > 0.6 * figure if width < 600 else plot < figure - 100
        if width < 600:                          # turned to a wide page and back: it follows each time
            page.set_viewport_size({"width": 1280, "height": 900})
            page.wait_for_function(f"() => ({shape})()?.[0] === 'v' && ({shape})()[2] > 1000", timeout=10000)
            page.set_viewport_size({"width": 360, "height": 900})
            page.wait_for_function(f"() => ({shape})()?.[0] === 'h'", timeout=10000)
            fits = "() => { const gd = document.querySelector('#roofline_10_1-plot .js-plotly-plot');" \
                   " return gd._fullLayout.width <= gd.clientWidth; }"
            assert page.evaluate(fits)
        assert not problems, problems
        page.close()


def test_a_phone_scrolls_the_plans_table_rather_than_splitting_its_numbers(server, browser):
    """At 390 px the planner's table had its columns squeezed to a character's width ("1,192" a
    digit a line): its columns are sized in pixels, so it scrolls sideways and each number keeps one line."""
    url, _ = server
    page = browser.new_page(viewport={"width": 390, "height": 900})
    problems = watch(page)
    page.goto(url + "putting-together")
    # Gradio draws a cell's text in a .cell-wrap: the header's, then the rows'
    cells = "Array.from(document.querySelectorAll('#planner_11_1-table .cell-wrap'))"
    page.wait_for_function(f"() => {cells}.filter(e => /%$/.test(e.innerText.trim())).length >= 6", timeout=60000)
    lines = page.evaluate(f"""() => {cells}.filter(e => /^[0-9][0-9,.]*%?$/.test(e.innerText.trim())).map(e => {{
        const r = document.createRange(); r.selectNodeContents(e.querySelector('span') || e);  // the text's own boxes
        return [e.innerText.trim(), new Set(Array.from(r.getClientRects()).map(x => Math.round(x.top))).size]; }})""")
    assert len(lines) >= 15 and all(n == 1 for _, n in lines), lines
    assert not problems, problems
    page.close()
