"""The planner's links to the appendix's step widget: each link, read as the appendix page reads a
link, sets that widget to the plan, which then shows the planner's step time; the widget id comes
from the book; no value of a plan can put markup or a foreign link on the page."""
import dataclasses
import time
import urllib.parse

import pytest
from markdown_it import MarkdownIt

from calculators.specs.errors import ConfigError
from calculators.specs.parallel import ParallelConfig
from calculators.time.step import estimate_step
from playbook import book, plan_link
from playbook.url import values_from_query
from playbook.values import per_stage, scenario_from
from playbook.widgets import planner, step

# planner settings (the rest at the widget's defaults) -> what the case covers
CASES = {
    "dense": dict(model="llama3-70b", nodes=8, seq=8192, gbs=512),          # chapter 11's own question
    "moe": dict(model="qwen3-30b-a3b", nodes=4, seq=4096, gbs=256, deepep=True),   # ep, DeepEP, MoE recompute
    "split": dict(model="mixtral-8x7b", nodes=2, seq=8192, gbs=128),        # #2: layer split, recompute per rank
}


def links(text: str) -> list:
    """[(link text, href)] of Markdown `text`, as a renderer reads it; fails on any HTML in it."""
    out, tokens = [], MarkdownIt().parse(text)
    for tok in tokens:
        assert tok.type != "html_block", tok.content
        children = tok.children or []
        assert not [c for c in children if c.type == "html_inline"], text
        for i, c in enumerate(children):
            if c.type == "link_open":
                out.append((children[i + 1].content, c.attrGet("href")))
    return out


def appendix_step(widgets):
    """The appendix's step widget as the app builds it (its id from the book, as the app gives it)."""
    chapter = next(c for c in book.chapters() if c.slug == plan_link.PAGE)
    (w,) = [w for w in widgets if w.wid.startswith(f"{plan_link.WIDGET}_{chapter.order}_")]
    return chapter, w


def test_the_link_names_the_widget_the_app_builds(widgets):
    chapter, w = appendix_step(widgets)
    ch, target, _ = plan_link.target()
    assert (ch.slug, target.wid) == (chapter.slug, w.wid)
    assert target.defaults == w.defaults and list(target.controls) == list(w.controls)
    for key, comp in w.controls.items():             # the same values offered: the link is checked against them
        mine = target.controls[key]
        assert type(mine) is type(comp), key
        for attr in ("choices", "minimum", "maximum", "step", "precision", "max_length"):
            assert getattr(mine, attr, None) == getattr(comp, attr, None), (key, attr)


def test_widget_ids_follow_the_book():
    chapters = book.chapters()
    ch, wid, params = book.find_widget(chapters, "appendix", "step")
    n = next(i for i, seg in enumerate(ch.segments) if seg[0] == "widget")
    assert wid == book.widget_id("step", ch.order, n) == f"step_{ch.order}_{n}" and "show" in params
    with pytest.raises(ValueError, match="exactly one planner widget"):
        book.find_widget(chapters, "appendix", "planner")


@pytest.mark.parametrize("case", list(CASES))
def test_each_plans_link_opens_it_with_the_planners_step_time(case, widgets):
    """Every row's link, its query read by url.values_from_query against the appendix widget's own
    controls: every value is taken, and the widget's step time and tokens/s/GPU are the row's."""
    chapter, w = appendix_step(widgets)
    values = {key: default for key, (_, default) in planner.CONTROLS.items()} | CASES[case]
    _, rows, _, text = planner.compute(values)
    found = links(text)
    assert found[0][0] == "Open plan #1 in the step widget" and len(found) == len(rows), text
    plans = planner._plan(values["model"], values["gpu"], values["nodes"], values["seq"], values["gbs"],
                          values["recompute"], values["framework"], values["deepep"])["plans"]
    for (_, href), plan, row in zip(found, plans, rows):
        path, _, query = href.partition("?")
        assert path == chapter.slug and plan_link.SAFE_HREF.fullmatch(href), href      # relative, to its page
        pairs = urllib.parse.parse_qsl(query, keep_blank_values=True)
        _, settings = values_from_query(dict(pairs), widgets, [c.slug for c in book.chapters()])
        assert {f"{wid}.{key}" for wid, key in settings} == {name for name, _ in pairs}, (row[1], pairs)
        opened = {**w.defaults, **{key: value for (_, key), value in settings.items()}}
        model, cluster, par = scenario_from(opened)
        estimate = estimate_step(model, cluster, par)
        assert estimate.time_s == pytest.approx(plan["step"]["time_s"], rel=0.01), row[1]
        assert estimate.tokens_per_s_per_gpu == pytest.approx(plan["step"]["tokens_per_s_per_gpu"], rel=0.01)
        assert par.dp == plan["parallel"]["dp"] and float(row[2]) == pytest.approx(estimate.time_s, abs=5e-4)
        _, note = step.compute(opened)                  # what the widget shows
        assert f"**{plan['step']['time_s']:.2f} s** per step" in note and \
            f"**{plan['step']['tokens_per_s_per_gpu']:,.0f}** tokens/s/GPU" in note, note[:200]
    if case == "split":
        assert any("split" in href for _, href in found) and any("recompute_ranks" in href for _, href in found)


PLAN = {"rank": 1, "parallel": {f.name: getattr(ParallelConfig(dp=8, gbs=64, seq=4096), f.name)
                                for f in dataclasses.fields(ParallelConfig)}}
HOSTILE = ["1f1b)[x](javascript:alert(1))", "<img src=https://example.invalid/x.png>", '"><script>alert(1)</script>',
           "16/16&step_14_1.model=llama3-405b#", "x\n\n<iframe src=//example.invalid>", "1x9999/1x9999"]


@pytest.mark.parametrize("key", ["schedule", "split", "recompute_ranks", "recompute", "precision"])
@pytest.mark.parametrize("value", HOSTILE)
def test_no_value_of_a_plan_puts_markup_or_a_foreign_link_on_the_page(key, value):
    """A plan's value the widget cannot take (here forced into a plan) gives a sentence, escaped, not
    a link; whatever a plan holds, a link on the page is only a relative one to the appendix."""
    plan = {**PLAN, "parallel": {**PLAN["parallel"], key: value}}
    text = plan_link.markdown([plan], "llama3-8b", "H100-80GB", 1)
    assert links(text) == [] and "Plan #1 has no link to the step widget" in text, text
    assert "<" not in text and "](" not in text and "\n" not in text, text


def test_a_model_or_gpu_that_is_not_a_preset_gets_no_link():
    """The planner plans presets only; anything else (a pasted config never goes into a link) is a
    sentence, escaped."""
    assert [href for _, href in links(plan_link.markdown([PLAN], "llama3-8b", "H100-80GB", 1))] == \
        [f"{plan_link.PAGE}?{plan_link.target()[1].wid}.zero=0"]
    for model, gpu in (("llama3-8b](javascript:alert(1))", "H100-80GB"), ("llama3-8b", "<b>H100</b>"),
                       ('{"hidden_size": 64}', "H100-80GB")):
        text = plan_link.markdown([PLAN], model, gpu, 1)
        assert links(text) == [] and "<" not in text and "no link" in text, text
    assert "pasted config.json never goes into a link" in plan_link.markdown([PLAN], '{"hidden_size": 64}', "B200", 1)


def test_a_plan_the_widget_cannot_set_says_what_it_lacks():
    """The planner takes sequences from 128 tokens; the step widget's slider starts at 512."""
    plan = {**PLAN, "parallel": {**PLAN["parallel"], "seq": 128}}
    text = plan_link.markdown([plan], "llama3-8b", "H100-80GB", 1)
    assert links(text) == [] and "the widget's controls do not offer its seq" in text, text


def test_per_stage_lists_read_as_the_labels_write_them():
    assert per_stage("1/2x62/1", "split", number=True) == (1,) + (2,) * 62 + (1,)
    assert per_stage("fullx2/moe_act layernorm/none", "recompute_ranks", number=False) == \
        ("full", "full", "moe_act+layernorm", "none")          # a '+' typed into a link arrives as a space
    assert per_stage("full x2/ 2 x 3", "recompute_ranks", number=False) == ("full", "full", "2", "2", "2")
    assert per_stage("", "split", number=True) == ()
    for bad in ("1/x/2", "a/1", "-1/2", "18//20", "1x1000/1x100", "2x99999", "2x9999999"):
        with pytest.raises(ConfigError):
            per_stage(bad, "split", number=True)
    with pytest.raises(ConfigError, match="repeats a value 0 times"):
        per_stage("8/1x0", "split", number=True)           # once read as no list at all: the even split
    with pytest.raises(ConfigError, match="empty entry: remove the extra '/'"):
        per_stage("8/8/8/8/", "split", number=True)
    # a pasted megabyte is refused by its length, before it is split (the body limit allows 2 MiB)
    start = time.perf_counter()
    with pytest.raises(ConfigError, match="characters long"):
        per_stage("1/" * 1_000_000, "split", number=True)
    assert time.perf_counter() - start < 0.05


def test_a_widgets_message_names_the_control_a_setting_is_on():
    from playbook.widgets import on_screen
    assert on_screen("split: 'x' is not a layer count").endswith("(split: the control 'layers per pipeline stage')")
    assert "'activation recompute'" in on_screen("parallel.recompute must be the most recompute of recompute_ranks")
    assert on_screen("tp=6 must divide heads=32") == "tp=6 must divide heads=32"      # its label starts with tp
    start = time.perf_counter()                      # a message quoting a visitor's long value stays linear
    on_screen("split" + " " * 200_000 + "must" + " recompute" * 50_000)
    assert time.perf_counter() - start < 0.1
