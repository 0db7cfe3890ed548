"""Charts on a phone. The figures are built on the server for a wide page; on a screen narrower
than NARROW px a legend beside the plot takes half its width (the roofline's plot was 100 px wide
at 390 px) and a long title runs off the figure. Each time a chart is drawn in a narrow place,
this script moves a side legend under the plot, the figure taller by its rows so the plot keeps
its height, and breaks a long title at the space nearest its middle, at the width the page gives
it; when that width changes (a phone turned, a window widened) the server's layout comes back,
narrowed again if the page is still narrow. Wide pages are left alone.
"""
from __future__ import annotations

NARROW = 600                     # px: a chart narrower than this is on a phone or a split screen

HEAD = """<script>
window.pbNarrow = () => {
  const P = window.Plotly;
  if (!P) return;
  document.querySelectorAll(".js-plotly-plot").forEach((el) => {
    const lay = el.layout, full = el._fullLayout, width = el.clientWidth;   // the page's room for it
    if (!lay || !full || !width) return;
    if (el.pbLayout === lay) {                  // this figure, narrowed here at el.pbWidth
      if (width !== el.pbWidth) {               // the page's width changed: the server's layout back
        el.pbLayout = null;                     // (narrowed again on the next round if still narrow)
        P.relayout(el, Object.assign({}, el.pbWide, {width: null, autosize: true}));
      }
      return;
    }
    if (width >= NARROW) return;
    const upd = {}, wide = {}, lg = lay.legend || {}, m = full.margin || {};
    let tall = lay.height || full.height || 420, top = m.t || 60;
    const below = m.b || 80;                              // the server's room under the plot
    const side = lg.orientation === "v" && lg.x >= 1;
    if (side) {
      Object.assign(wide, {legend: JSON.parse(JSON.stringify(lg)), "margin.r": m.r, "margin.b": below});
      Object.assign(upd, {"legend.orientation": "h", "legend.x": 0, "legend.xanchor": "left",
                          "legend.yref": "container", "legend.y": 0, "legend.yanchor": "bottom",
                          "legend.font.size": 11, "margin.r": 20});
    }
    const title = lay.title && lay.title.text;
    if (typeof title === "string" && !title.includes("<br>") && title.length * 9 > width - 60) {
      const mid = title.length / 2;
      let cut = -1;
      for (let i = 0; i < title.length; i++)
        if (title[i] === " " && (cut < 0 || Math.abs(i - mid) < Math.abs(cut - mid))) cut = i;
      if (cut > 0) {
        Object.assign(wide, {"title.text": title, "margin.t": top});
        upd["title.text"] = title.slice(0, cut) + "<br>" + title.slice(cut + 1);
        upd["margin.t"] = top + 22;
        top += 22;
        tall += 22;
      }
    }
    if (!Object.keys(upd).length) return;
    wide.height = lay.height || full.height;
    const square = lay.yaxis && lay.yaxis.scaleanchor === "x";
    if (square)                                          // as tall as the page lets it be wide
      tall = Math.min(tall, top + below + width - (m.l || 55) - 20);
    // width and height both set, so Plotly's resize leaves the figure as sized here; the legend's
    // rows are measured once drawn under the plot, and the figure grows by them
    el.pbLayout = lay;
    el.pbWidth = width;
    el.pbWide = wide;
    P.relayout(el, Object.assign(upd, {width: width, height: tall})).then(() => {
      const bg = side && el.querySelector("g.legend rect.bg"), size = el._fullLayout._size;
      if (bg && size && el.pbLayout === el.layout) {
        // under the plot, at the height it had: its x-axis's ticks and title, 10 px, the legend's
        // rows as drawn; a square plot no taller than it is drawn wide (no blank band around it)
        const top0 = el.getBoundingClientRect().top, plot = size.t + size.h, high = tall - top - below;
        const axis = Array.from(el.querySelectorAll(".xtitle, .xtick")).reduce(
          (low, e) => Math.max(low, e.getBoundingClientRect().bottom - top0), plot) - plot;
        const b = axis + 10 + bg.getBBox().height + 4;
        const plotH = square ? Math.min(high, size.w) : high;   // the plot's height before the legend came under it
        P.relayout(el, {"margin.b": b, height: top + plotH + b, width: width});
      }
    });
  });
};
setInterval(window.pbNarrow, 700);
</script>""".replace("NARROW", str(NARROW))
