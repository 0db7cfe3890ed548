"""Every setting in the URL: `?chapter=pipeline&schedule_6.m=16` opens the pipeline chapter with
that widget's m at 16. Widgets write the settings that differ from their chapter's defaults
(window.pbUrl, called by each widget's event); on page load `apply` reads the query and sets the
tab and the controls, which redraw the widgets. A value that does not parse, is longer than
MAX_VALUE characters or is not one the control offers is skipped, alone (the default stays, the
link's other settings apply), never an error. Long values (a pasted config.json) never go into
the link: a link is for settings, and servers refuse URLs of tens of KB.
"""
from __future__ import annotations

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
window.pbChapter = (slug) => {
  if (!window.pbApplied) return;     // the first tab reports itself selected before the URL is read
  const u = new URL(window.location.href);
  u.searchParams.set("chapter", slug);
  window.history.replaceState(null, "", u);
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


def wire_url(tabs, widgets, slugs) -> None:
    """On page load, if the URL has a query: select its chapter and set its settings. A hidden
    button carries the restore so that a plain visit costs nothing: every output of an event
    costs the page a walk over all its components."""
    outputs = [tabs] + [c for w in widgets for c in w.controls.values()]

    def apply(request: gr.Request):
        chapter, settings = values_from_query(dict(request.query_params) if request else {}, widgets, slugs)
        updates = [gr.Tabs(selected=chapter) if chapter else gr.update()]
        for w in widgets:
            for key in w.controls:
                updates.append(settings[(w.wid, key)] if (w.wid, key) in settings else gr.update())
        return updates

    restore = gr.Button("restore from URL", visible="hidden", elem_id="pb-restore")
    restore.click(apply, None, outputs, api_visibility="private", show_progress="hidden", queue=False).then(
        None, js="() => { window.pbApplied = true; }")
    gr.on(None, None, js="""() => {
        if (window.location.search.length <= 1) { window.pbApplied = true; return; }
        const go = (n) => {              // the load event can come before the button is mounted
            const b = document.getElementById("pb-restore");
            if (b) b.click(); else if (n > 0) setTimeout(() => go(n - 1), 50);
        };
        go(200);
    }""")
