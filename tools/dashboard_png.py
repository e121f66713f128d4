"""The ablation dashboard's table and learning curves as a PNG, in headless Chromium (the HTML inlines 4.7 MB of
plotly.js, too heavy to embed in a results page). Used by scripts/reproduce.py; by hand:

    python -m tools.dashboard_png reports/reproduce/fedld_table2/ablation/dashboard.html out.png
"""

from __future__ import annotations

import sys
from pathlib import Path

from tools.browser import Browser, BrowserError


def screenshot(dashboard: Path, png: Path) -> Path | None:
    """The dashboard's ablation table and learning curves as a PNG (the HTML itself inlines 4.7 MB of plotly.js)."""
    if not dashboard.exists():
        return None
    try:
        with Browser() as browser:
            tab = browser.new_page(1400, 1000)
            tab.goto(dashboard.resolve().as_uri())
            tab.wait_for("document.body.dataset.plotsRendered > 0", what="the dashboard's plots drawn")
            bottom = tab.evaluate("document.getElementById('learning-curves').getBoundingClientRect().bottom")
            tab.resize(1400, int(bottom) + 20)
            return tab.screenshot(png, clip={"x": 0, "y": 0, "width": 1400, "height": int(bottom) + 20})
    except (BrowserError, OSError, TimeoutError) as error:
        print(f"no dashboard screenshot: {error}", file=sys.stderr)
        return None


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python -m tools.dashboard_png DASHBOARD.html OUT.png")
    sys.exit(0 if screenshot(Path(sys.argv[1]), Path(sys.argv[2])) else 1)
