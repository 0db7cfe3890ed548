"""Layout checks a reader's eye makes, done on the rendered page: no two text boxes of a plot
overlap (from the drawn SVG's bounding boxes), no control label is clipped, every numeric axis
has a title that names its unit, no legend scrolls. Each returns a list of problems, one sentence
each."""
from __future__ import annotations

import re

# Every drawn text of every Plotly figure inside `root`: its plot id, a role (title, axis title,
# tick, legend, annotation, bar text) and its box; and every drawn bar's box (role 'bar'). Texts
# of one tick axis never touch each other in plotly's own layout, so pairs inside one axis's
# ticks are left out (plotly thins them).
PLOT_TEXTS = """(root) => {
    const out = [];
    for (const gd of document.querySelectorAll(`${root} .js-plotly-plot`)) {
        if (!gd.offsetParent) continue;                       // not on screen (another chapter)
        const id = gd.closest('[id]')?.id || '?';
        const role = (t) => {
            if (t.closest('.legend')) return 'legend';
            if (t.closest('.g-gtitle')) return 'title';
            if (t.closest('.g-xtitle, .g-x2title, .g-x3title')) return 'x title';
            if (t.closest('[class*="ytitle"]')) return 'y title';
            const ax = t.closest('[class$="tick"], [class*="tick "]');
            if (t.closest('.xaxislayer-above') || t.classList.contains('xtick')) return 'x tick';
            if (t.closest('.yaxislayer-above') || t.classList.contains('ytick')) return 'y tick ' +
                (t.closest('g[class*="y"]')?.getAttribute('class') || '');
            if (t.closest('.annotation')) return 'annotation';
            return 'text';
        };
        for (const t of gd.querySelectorAll('svg text')) {
            const r = t.getBoundingClientRect();
            const s = (t.textContent || '').trim();
            if (!s || r.width < 1 || r.height < 1) continue;
            if (getComputedStyle(t).visibility === 'hidden' || t.closest('[style*="opacity: 0"]')) continue;
            out.push({id, role: role(t), text: s.slice(0, 40), x0: r.left, y0: r.top, x1: r.right, y1: r.bottom});
        }
        for (const b of gd.querySelectorAll('.barlayer .point path')) {   // drawn bars: no text may sit on one
            const r = b.getBoundingClientRect();
            if (r.width < 1 || r.height < 1) continue;
            out.push({id, role: 'bar', text: 'a bar', x0: r.left, y0: r.top, x1: r.right, y1: r.bottom});
        }
    }
    return out;
}"""

# Labels of the controls inside `root` whose text is cut: wider than the box that shows them.
CLIPPED_LABELS = """(root) => {
    const out = [];
    for (const el of document.querySelectorAll(`${root} [data-testid="block-info"], ${root} label span`)) {
        if (!el.offsetParent) continue;
        const r = el.getBoundingClientRect(), box = el.closest('.block, .form, label')?.getBoundingClientRect();
        const cut = el.scrollWidth > el.clientWidth + 1 || (box && (r.right > box.right + 1 || r.left < box.left - 1));
        if (cut) out.push(`${el.closest('[id]')?.id || '?'}: label '${el.textContent.trim().slice(0, 60)}' is cut`);
    }
    return out;
}"""

# Each figure's numeric axes with the data they carry: [plot id, axis name, type, title].
AXES = """(root) => {
    const out = [];
    for (const gd of document.querySelectorAll(`${root} .js-plotly-plot`)) {
        if (!gd.offsetParent || !gd._fullLayout) continue;
        const id = gd.closest('[id]')?.id || '?';
        for (const [name, ax] of Object.entries(gd._fullLayout)) {
            if (!/^[xy]axis\\d*$/.test(name) || !ax.visible || ax.showticklabels === false) continue;
            const ref = name[0] + (name.slice(5) || '');
            const used = gd._fullData.some(t => (t[name[0] + 'axis'] || name[0]) === ref && t.visible !== false);
            if (!used) continue;
            out.push([id, name, ax.type, (ax.title && ax.title.text) || '']);
        }
    }
    return out;
}"""

UNIT = re.compile(r"\(([^)]*)\)|\b(GiB|GB/s|s|ms|seconds|tokens|FLOP|TFLOP/s|%|days|GPUs?|bytes|\$|USD|replicas|"
                  r"stages?|sequences|rank|GPU-hours)\b|%|\$", re.I)


# texts that must never sit on a bar: a bar may carry its own text (a micro-batch number), nothing else
OUTSIDE = ("title", "x title", "y title", "x tick", "y tick", "legend", "annotation")


def _overlap(a, b, slack=1.0) -> bool:
    return min(a["x1"], b["x1"]) - max(a["x0"], b["x0"]) > slack and \
        min(a["y1"], b["y1"]) - max(a["y0"], b["y0"]) > slack


def text_overlaps(page, root="body") -> list[str]:
    """'plot: 'a' (role) overlaps 'b' (role)' for every pair of a plot's texts that overlap."""
    texts = page.evaluate(PLOT_TEXTS, root)
    problems = []
    for i, a in enumerate(texts):
        for b in texts[i + 1:]:
            if a["id"] != b["id"] or (a["role"] == b["role"] and ("tick" in a["role"] or a["role"] == "bar")):
                continue
            if "bar" in (a["role"], b["role"]) and not any(r.startswith(OUTSIDE) for r in (a["role"], b["role"])):
                continue
            if _overlap(a, b):
                problems.append(f"{a['id']}: '{a['text']}' ({a['role']}) overlaps '{b['text']}' ({b['role']})")
    return problems


# plotly draws a scroll bar in a legend taller than its plot: entries a reader must scroll to find
SCROLLED_LEGENDS = """(root) => [...document.querySelectorAll(`${root} .js-plotly-plot`)]
    .filter(gd => gd.offsetParent)
    .filter(gd => [...gd.querySelectorAll('.legend .scrollbar')].some(b => b.getBoundingClientRect().height > 0))
    .map(gd => `${gd.closest('[id]')?.id || '?'}: the legend scrolls (the figure is too short for it)`)"""


def scrolled_legends(page, root="body") -> list[str]:
    return page.evaluate(SCROLLED_LEGENDS, root)


def clipped_labels(page, root="body") -> list[str]:
    return page.evaluate(CLIPPED_LABELS, root)


def unlabelled_axes(page, root="body") -> list[str]:
    """Numeric axes (linear, log) with no title, or a title naming no unit. Category axes (stage
    names, plan labels) say what they are in their ticks."""
    problems = []
    for pid, name, kind, title in page.evaluate(AXES, root):
        if kind not in ("linear", "log"):
            continue
        if not title.strip():
            problems.append(f"{pid}: {name} ({kind}) has no title")
        elif not UNIT.search(title):
            problems.append(f"{pid}: {name} title '{title}' names no unit")
    return problems
