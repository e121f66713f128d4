"""The HTML page around the figures: a figure as a div, the page's style and scripts, the whole document.

plotly.js is inlined once in <head> (the page opens from disk, offline). Two scripts make a headless browser's DOM
dump say whether the page worked: an error trap before plotly.js, and a count of the plots actually drawn.
"""

from __future__ import annotations

import html
from collections.abc import Sequence

import plotly.graph_objects as go
import plotly.io as pio
from plotly.offline import get_plotlyjs


def figure_div(fig: go.Figure, div_id: str) -> str:
    """A figure as a div and the script that draws it; plotly.js itself is in the page's head, once."""
    div = pio.to_html(
        fig,
        include_plotlyjs=False,
        full_html=False,
        div_id=div_id,
        default_height=f"{int(fig.layout.height or 450)}px",
        config={"displaylogo": False, "responsive": True},
    )
    return f"<div class='figure'>{div}</div>"


# Before plotly.js: any script error or rejected promise is written into #script-errors, so that a headless
# browser's DOM dump shows it (the page has no server to report to).
ERROR_CAPTURE = """<script>
window.__scriptErrors = [];
function __recordScriptError(text) {
  window.__scriptErrors.push(String(text));
  var box = document.getElementById("script-errors");
  if (box) { box.textContent = window.__scriptErrors.join("\\n"); }
}
window.onerror = function (message, source, line) { __recordScriptError(message + " (" + source + ":" + line + ")"); };
window.addEventListener("unhandledrejection", function (event) {
  var reason = event.reason;
  __recordScriptError("unhandled rejection: " + (reason && reason.message ? reason.message : reason));
});
</script>"""

# End of body: how many plots plotly actually drew (an SVG inside each plot div), re-counted once things settle
RENDER_COUNT = """<script>
function __countRenderedPlots() {
  var drawn = 0;
  document.querySelectorAll(".js-plotly-plot").forEach(function (plot) {
    if (plot.querySelector("svg.main-svg")) { drawn += 1; }
  });
  document.body.dataset.plotsRendered = String(drawn);
  var box = document.getElementById("script-errors");
  if (box && window.__scriptErrors.length) { box.textContent = window.__scriptErrors.join("\\n"); }
}
__countRenderedPlots();
window.addEventListener("load", __countRenderedPlots);
setTimeout(__countRenderedPlots, 1000);
</script>"""

STYLE = """<style>
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1400px; padding: 0 1em; color: #222; }
nav a { margin-right: 1em; }
section { border-top: 1px solid #ddd; margin-top: 2em; }
.note { color: #555; font-size: 0.95em; }
table.ablation { border-collapse: collapse; margin: 1em 0; }
table.ablation th, table.ablation td { border: 1px solid #ccc; padding: 0.3em 0.8em; text-align: center; }
table.ablation tbody th { text-align: left; }
.meta { color: #555; font-size: 0.9em; }
</style>"""


def page(title: str, header: str, sections: Sequence[tuple[str, str, str]]) -> str:
    """The whole HTML document: plotly.js inlined once in <head>, after the error trap; a section per
    (id, heading, inner HTML); `header` is HTML already."""
    nav = " ".join(f"<a href='#{sid}'>{html.escape(heading)}</a>" for sid, heading, _ in sections)
    body = "\n".join(
        f"<section id='{sid}'><h2>{html.escape(heading)}</h2>{inner}</section>" for sid, heading, inner in sections
    )
    return (
        "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
        f"<title>{html.escape(title)}</title>{STYLE}{ERROR_CAPTURE}"
        f"<script type='text/javascript'>{get_plotlyjs()}</script></head>\n"
        f"<body><pre id='script-errors' hidden></pre>\n<h1>{html.escape(title)}</h1>{header}<nav>{nav}</nav>\n"
        f"{body}\n{RENDER_COUNT}</body></html>\n"
    )
