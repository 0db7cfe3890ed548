"""Text a visitor controls, made inert before it reaches the page.

A model name read from a pasted config.json, a value from a shared link, a row of an uploaded
results file, an error message that quotes any of them: each is shown as the characters it holds,
never as Markdown, HTML or a link. Two renderers read our text, so two escapes:

    md("<img src=x> *hi*")      -> '&lt;img src=x&gt; \\*hi\\*'   (Gradio Markdown: shown as typed)
    plot("<a href=x>t</a>")     -> '&lt;a href=x&gt;t&lt;/a&gt;'  (plotly's pseudo-HTML in titles,
                                                                   labels and hover text)

Both also cut the text to `limit` characters, so no visitor string can fill the page.
"""
from __future__ import annotations

import re

LIMIT = 300                                    # characters of one visitor string shown
_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+!|~\-])")
_ENTITIES = (("&", "&amp;"), ("<", "&lt;"), (">", "&gt;"))


def _cut(text, limit: int) -> str:
    text = " ".join(str(text).split())          # one line: no Markdown block (list, heading, quote) can start
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _entities(text: str) -> str:
    for raw, entity in _ENTITIES:
        text = text.replace(raw, entity)
    return text


def md(text, limit: int = LIMIT) -> str:
    """`text` as literal characters inside Gradio Markdown: HTML tags become text, Markdown's
    punctuation is backslash-escaped (no emphasis, link, image or code span), no "$$" opens math,
    and a URL is not turned into a link."""
    text = _MD_SPECIAL.sub(r"\\\1", _entities(_cut(text, limit)))
    # "$$" opens display math where a Markdown renders it (KaTeX reads the page's text, so an entity
    # would not stop it): a zero-width space keeps two dollars from reading as one delimiter
    text = text.replace("$", "$\u200b")
    return text.replace("://", ":&#47;&#47;").replace("www.", "www&#46;")


def plot(text, limit: int = LIMIT) -> str:
    """`text` as literal characters in a plotly title, axis label, legend or hover text (plotly
    reads <a>, <b>, <br> and entities there, and shows an entity as its character)."""
    return _entities(_cut(text, limit))
