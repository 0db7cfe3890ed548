"""The book: chapters are Markdown files in playbook/chapters/ with front matter, split at widget
directives into text and live widgets, with the prose's numbers rendered from the calculators.

    ---
    title: Data parallelism and ZeRO
    order: 3
    tab: DP & ZeRO
    ---
    Text with a computed number: {{ memory model=llama3-8b dp=8 zero=1 }} ...

    {{ widget memory model=llama3-8b show=dp,zero }}

markdown-it-py parses the file, so a directive is a widget only when it is a paragraph of its
own (one inside a code block stays text). Rendering fails loudly on an unknown number or widget,
and on any `{{` left unfilled: a chapter never ships a placeholder.
"""
from __future__ import annotations

import multiprocessing
import re
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from markdown_it import MarkdownIt

from playbook import numbers

CHAPTERS = Path(__file__).parent / "chapters"
DIRECTIVE = re.compile(r"\{\{\s*([a-z_]+)((?:\s+[a-z_][a-z0-9_]*=[^\s}]+)*)\s*\}\}")
FENCED = re.compile(r"^```.*?^```", re.S | re.M)
WIDGET = re.compile(r"^\{\{\s*widget\s+([a-z_]+)((?:\s+[a-z_][a-z0-9_]*=[^\s}]+)*)\s*\}\}$")


@dataclass(frozen=True)
class Chapter:
    slug: str
    title: str
    order: int
    segments: tuple = field(default=())   # ("text", markdown) | ("widget", name, params)
    tab: str = ""                         # short label in the navigation bar: all fit on one line at 1280 px


def _kwargs(text: str) -> dict:
    pairs = [pair.split("=", 1) for pair in text.split()]
    keys = [k for k, _ in pairs]
    if len(set(keys)) != len(keys):
        raise ValueError(f"a setting is given twice: {' '.join(sorted({k for k in keys if keys.count(k) > 1}))}")
    return dict(pairs)


def fill_numbers(text: str, where: str) -> str:
    def sub(m):
        try:
            return numbers.render(m.group(1), _kwargs(m.group(2)))
        except Exception as exc:
            raise ValueError(f"{where}: cannot render {m.group(0)}: {exc}") from exc
    out = DIRECTIVE.sub(sub, text)
    prose = FENCED.sub("", out)                   # code blocks may show the syntax itself
    if "{{" in prose:
        raise ValueError(f"{where}: unfilled placeholder near {prose[prose.index('{{'):][:60]!r}")
    return out


def parse(text: str, where: str = "chapter") -> Chapter:
    if not text.startswith("---\n"):
        raise ValueError(f"{where}: must start with front matter (---, title:, order:, ---)")
    head, body = text[4:].split("\n---\n", 1)
    meta = dict(line.split(":", 1) for line in head.splitlines() if ":" in line)
    lines = body.splitlines()
    cuts = []                                     # (first line, last line, name, params) of widget paragraphs
    for tok in MarkdownIt().parse(body):
        if tok.type == "inline" and tok.map:
            m = WIDGET.match(tok.content.strip())
            if m:
                cuts.append((tok.map[0], tok.map[1], m.group(1), _kwargs(m.group(2))))
    segments, pos = [], 0
    for start, end, name, params in cuts:
        segments.append(("text", fill_numbers("\n".join(lines[pos:start]), where)))
        segments.append(("widget", name, params))
        pos = end
    segments.append(("text", fill_numbers("\n".join(lines[pos:]), where)))
    slug = Path(where).stem.split("-", 1)[-1]
    title = meta["title"].strip()
    return Chapter(slug, title, int(meta["order"]), tuple(s for s in segments if s[0] == "widget" or s[1].strip()),
                   meta.get("tab", title).strip())


def widget_id(name: str, order: int, n: int) -> str:
    """A widget's id (its settings' key in the URL, its API name): its name, its chapter's order and
    its place among the chapter's segments, text and widgets counted alike (`step_14_1`)."""
    return f"{name}_{order}_{n}"


def find_widget(chapters, slug: str, name: str) -> tuple[Chapter, str, dict]:
    """(chapter, widget id, params) of the one `name` widget on chapter `slug`'s page, so that a
    link to it follows the book when chapters are renumbered; ValueError when there is none or more."""
    found = [(ch, widget_id(name, ch.order, n), seg[2]) for ch in chapters if ch.slug == slug
             for n, seg in enumerate(ch.segments) if seg[0] == "widget" and seg[1] == name]
    if len(found) != 1:
        raise ValueError(f"chapter {slug!r} must hold exactly one {name} widget (found {len(found)})")
    return found[0]


def _render(folder: Path) -> tuple[Chapter, ...]:
    out = [_render_one(p) for p in sorted(folder.glob("*.md"))]
    return tuple(sorted(out, key=lambda c: c.order))


def _render_one(path: Path) -> Chapter:
    return parse(path.read_text(), str(path.name))


_ahead = None                                     # the chapters being rendered by render_ahead's processes


def render_ahead() -> None:
    """Start rendering the chapters in two forked processes, a chapter at a time to whichever is
    free, so that the app imports Gradio and builds its pages meanwhile: a chapter's numbers
    include planner searches, seconds of one core, and the rendering is the longest part of a
    start. chapters() takes the results; where fork is missing, chapters() renders as usual."""
    global _ahead
    if _ahead is None and "fork" in multiprocessing.get_all_start_methods():
        pool = ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("fork"))
        paths = sorted(CHAPTERS.glob("*.md"))
        _ahead = pool, [(p, pool.submit(_render_one, p)) for p in paths]


@lru_cache(maxsize=1)
def chapters(folder: Path = CHAPTERS) -> tuple[Chapter, ...]:
    if folder == CHAPTERS and _ahead is not None:
        pool, rendered = _ahead
        failed = [(path, future.exception()) for path, future in rendered]    # waits for them
        pool.shutdown()
        if not any(exc for _, exc in failed):
            return tuple(sorted((future.result() for _, future in rendered), key=lambda c: c.order))
        for path, exc in failed:
            if exc is not None and not isinstance(exc, BrokenProcessPool):
                _render_one(path)                 # the chapter that failed ahead fails here, with its message
    return _render(folder)
