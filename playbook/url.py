"""Every setting in the URL: `/pipeline-parallel?schedule_6_1.m=16` opens the pipeline chapter with
that widget's m at 16. Widgets write the settings that differ from their chapter's defaults
(window.pbUrl, called by each widget's event); on page load `apply` reads the query and sets the
page's controls, which redraw its widgets. A value that does not parse, is longer than MAX_VALUE
characters or is not one the control offers is skipped, alone (the default stays, the link's
other settings apply), never an error. Long values (a pasted config.json) never go into the link:
a link is for settings, and servers refuse URLs of tens of KB. Links from when the chapters were
tabs (`?chapter=pipeline-parallel&...`) open that chapter's page with the same settings.
"""
from __future__ import annotations

import json

import gradio as gr

from playbook.values import coerce
from playbook.widgets import NOT_IN_LINK, control_problem

MAX_VALUE = 200                  # characters of one setting in the link

HEAD = """<script>
window.pbMaxValue = MAX_VALUE;
window.pbApplied = false;
window.pbUrl = (wid, keys, defaults, vals) => {
  const u = new URL(window.location.href);
  keys.forEach((k, i) => {
    const name = wid + "." + k, v = vals[i];
    const text = (v === null || v === undefined) ? null : String(v);
    const fits = text !== null && text.length <= window.pbMaxValue;
    if (fits && text !== String(defaults[i])) u.searchParams.set(name, text);
    else if (window.pbApplied || (text !== null && !fits)) u.searchParams.delete(name);
  });
  window.history.replaceState(null, "", u);
  return vals;
};
</script>""".replace("MAX_VALUE", str(MAX_VALUE))


def values_from_query(query: dict, widgets, slugs) -> tuple[str | None, dict]:
    """(chapter slug or None, {(wid, key): value}) of the query's valid settings; each invalid one
    is skipped on its own."""
    chapter = query.get("chapter") if query.get("chapter") in slugs else None
    settings = {}
    for w in widgets:
        for key, comp in w.controls.items():
            raw = query.get(f"{w.wid}.{key}")
            if raw is None or len(raw) > MAX_VALUE or key in NOT_IN_LINK:
                continue
            try:
                value = coerce(raw, w.defaults[key])
            except (TypeError, ValueError, OverflowError):
                continue
            if isinstance(value, str) and " " in value and control_problem(comp, value):
                value = value.replace(" ", "+")       # a hand-typed '+' (moe_act+layernorm) reads as a space
            if not control_problem(comp, value):
                settings[(w.wid, key)] = value
    return chapter, settings


def wire_url(widgets, slugs, current: str) -> None:
    """On loading the page of chapter `current`: a link that names another chapter
    (`?chapter=slug`, the tabs' links) goes to that chapter's page; a query with settings sets
    them. A hidden button carries the restore so that a plain visit costs nothing: every output
    of an event costs the page a walk over its components."""
    outputs = [c for w in widgets for c in w.controls.values()]

    def apply(request: gr.Request):
        _, settings = values_from_query(dict(request.query_params) if request else {}, widgets, slugs)
        return [settings.get((w.wid, key), gr.update()) for w in widgets for key in w.controls]

    restore = gr.Button("restore from URL", visible="hidden", elem_id=f"pb-restore-{current}")
    restore.click(apply, None, outputs, api_visibility="private", show_progress="hidden", queue=False).then(
        None, js="() => { window.pbApplied = true; }")
    gr.on(None, None, js="""() => {
        const slugs = SLUGS, here = HERE, q = new URLSearchParams(window.location.search);
        const wanted = q.get("chapter");
        if (wanted !== null) {
            q.delete("chapter");
            const rest = q.toString() ? "?" + q.toString() : "";
            if (wanted !== here && slugs.includes(wanted)) {     // a link to another chapter: its page
                const path = window.location.pathname, own = here === slugs[0] ? "" : here;
                const base = own && path.endsWith("/" + own) ? path.slice(0, -own.length) :
                             (path.endsWith("/") ? path : path + "/");
                window.location.replace(base + (wanted === slugs[0] ? "" : wanted) + rest);
                return;
            }
            window.history.replaceState(null, "", window.location.pathname + rest);
        }
        if (q.toString() === "") { window.pbApplied = true; return; }
        const go = (n) => {              // the load event can come before the button is mounted
            const b = document.getElementById(BUTTON);
            if (b) b.click(); else if (n > 0) setTimeout(() => go(n - 1), 50);
        };
        go(200);
    }""".replace("SLUGS", json.dumps(list(slugs))).replace("HERE", json.dumps(current))
        .replace("BUTTON", json.dumps(f"pb-restore-{current}")))
