"""Charts on a phone. The figures are built on the server for a wide page; on a screen narrower
than NARROW px a legend beside the plot takes half its width (the roofline's plot was 100 px wide
at 390 px) and a long title runs off the figure. Each time a chart is drawn in a narrow place,
this script moves a side legend under the plot, the figure taller by its rows so the plot keeps
its height, and breaks a long title at the space nearest its middle. Wide pages are left alone.
"""
from __future__ import annotations

NARROW = 600                     # px: a chart narrower than this is on a phone or a split screen

HEAD = """<script>
window.pbNarrow = () => {
  const P = window.Plotly;
  if (!P) return;
  document.querySelectorAll(".js-plotly-plot").forEach((el) => {
    const lay = el.layout, width = el.clientWidth;
    if (!lay || !width || width >= NARROW) return;
    const upd = {}, lg = lay.legend || {};
    const side = lg.orientation === "v" && lg.x >= 1, below = (lay.margin || {}).b || 80;
    if (side)
      Object.assign(upd, {"legend.orientation": "h", "legend.x": 0, "legend.xanchor": "left",
                          "legend.yref": "container", "legend.y": 0, "legend.yanchor": "bottom",
                          "legend.font.size": 11, "margin.r": 20});
    const title = lay.title && lay.title.text;
    if (typeof title === "string" && !title.includes("<br>") && title.length * 9 > width - 60) {
      const mid = title.length / 2;
      let cut = -1;
      for (let i = 0; i < title.length; i++)
        if (title[i] === " " && (cut < 0 || Math.abs(i - mid) < Math.abs(cut - mid))) cut = i;
      if (cut > 0) {
        const m = lay.margin || {};
        Object.assign(upd, {"title.text": title.slice(0, cut) + "<br>" + title.slice(cut + 1),
                            "margin.t": (m.t || 60) + 22, "height": (lay.height || 420) + 22});
      }
    }
    if (!Object.keys(upd).length) return;
    let tall = upd.height || lay.height || 420;
    const m = lay.margin || {}, top = upd["margin.t"] || m.t || 60;
    if (lay.yaxis && lay.yaxis.scaleanchor === "x")      // a square plot: as tall as the page lets it be wide
      tall = Math.min(tall, top + below + width - (m.l || 55) - 20);
    // the legend's rows measured once drawn under the plot: the figure grows by them
    P.relayout(el, upd).then(() => {
      const g = side && el.querySelector("g.legend");
      if (g) P.relayout(el, {"margin.b": below + g.getBoundingClientRect().height + 10,
                             "height": tall + g.getBoundingClientRect().height + 10});
    });
  });
};
setInterval(window.pbNarrow, 700);
</script>""".replace("NARROW", str(NARROW))
