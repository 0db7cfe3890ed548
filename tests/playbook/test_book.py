"""Chapters: all fourteen render, in order, each with a widget, no placeholder left, and a
worked-example number is the calculators' (it changes when the calculator does)."""
import multiprocessing

import pytest

from calculators.memory.estimate import estimate_memory
from playbook import book, numbers
from playbook.values import scenario_from


def test_fourteen_chapters_in_order_each_with_a_widget_and_sources():
    chs = book.chapters()
    assert [c.order for c in chs] == list(range(1, 15))
    for c in chs:
        text = "\n".join(s[1] for s in c.segments if s[0] == "text")
        assert any(s[0] == "widget" for s in c.segments), c.slug
        assert "{{" not in text, c.slug
        if c.order < 14:
            assert "**Takeaway.**" in text and "**Sources.**" in text, c.slug


def test_chapters_rendered_ahead_in_another_process_are_the_same(monkeypatch):
    if "fork" not in multiprocessing.get_all_start_methods():
        pytest.skip("no fork here: the app renders its chapters in its own process")
    here = book.chapters()
    monkeypatch.setattr(book, "_ahead", None)
    book.chapters.cache_clear()
    try:
        book.render_ahead()
        assert book.chapters() == here
    finally:
        book.chapters.cache_clear()


def test_worked_example_number_follows_the_calculator(monkeypatch):
    settings = dict(model="llama3-8b", dp="8", zero="0", gbs="8", seq="4096")
    real = estimate_memory(*scenario_from(numbers._typed(settings))).total_gib
    chapter = book.parse((book.CHAPTERS / "01-overview.md").read_text(), "01-overview.md")
    assert f"**{real:.1f} GiB**" in chapter.segments[0][1]

    class Fake:
        def __init__(self, est):
            self.est = est

        def as_dict(self):
            return {**self.est.as_dict(), "total_gib": 123.4}

        fits = True
    monkeypatch.setattr(numbers, "estimate_memory", lambda *a: Fake(estimate_memory(*a)))
    chapter = book.parse((book.CHAPTERS / "01-overview.md").read_text(), "01-overview.md")
    assert "**123.4 GiB**" in chapter.segments[0][1]


def test_directives_fail_loudly_and_code_blocks_stay_text():
    head = "---\ntitle: T\norder: 1\n---\n"
    with pytest.raises(ValueError, match="unknown number 'nope'"):
        book.parse(head + "x {{ nope a=1 }}\n")
    with pytest.raises(ValueError, match="unfilled placeholder"):
        book.parse(head + "x {{ memory model=llama3-8b\n")
    # a window tag names a real GPU and kernel and a window of a key or more, each setting once
    for bad, says in (("gpu=GB20", "unknown GPU"), ("kernel=bogus", "must be one of"), ("w=0", "1 key or more"),
                      ("w=-875 gpu=GB200", "1 key or more"), ("w=128 w=256", "given twice")):
        with pytest.raises(ValueError, match=says):
            book.parse(head + "x {{ window " + (bad if bad.startswith("w=") else "w=128 " + bad) + " }}\n")
    ch = book.parse(head + "text\n\n```\n{{ widget memory }}\n```\n\n{{ widget schedule p=8 }}\n")
    assert [s[0] for s in ch.segments] == ["text", "widget"] and ch.segments[1][2] == {"p": "8"}


def test_dispatch_copies_in_chapter_7_are_the_calculators():
    from calculators.time.comm import experts_hit
    hits = experts_hit(128, 8, 4)
    assert numbers.hit("128", "8", "4") == f"{hits:.2f}"
    assert numbers.hit("128", "8", "4", field="deepep") == f"{hits * 3 / 4:.1f}" == "2.7"
    assert numbers.hit("128", "8", "4", field="alltoall") == "6"
    text = "\n".join(s[1] for c in book.chapters() if c.order == 7 for s in c.segments if s[0] == "text")
    assert f"reaches {hits:.2f} nodes" in text and "so 2.7 copies cross the network instead of 6" in text
