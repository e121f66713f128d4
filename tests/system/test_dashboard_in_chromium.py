"""The dashboard of the shared ablation store opened by real headless Chromium: every figure draws, no script error.
(The HTML itself: tests/report/test_dashboard.py.)"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from raytune_fl.report.sections import SECTIONS

CHROMIUM = Path("/usr/bin/chromium")


def _chromium(page: Path, tmp_path: Path, *mode: str) -> subprocess.CompletedProcess:
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: .ci/run installs it (apt-get install chromium)")
    command = [
        str(CHROMIUM),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        f"--user-data-dir={tmp_path / 'chromium-profile'}",
        "--virtual-time-budget=15000",
        "--enable-logging=stderr",
        "--v=0",
        *mode,
        page.resolve().as_uri(),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    console = [line for line in done.stderr.splitlines() if "CONSOLE" in line or "Uncaught" in line]
    assert not [line for line in console if "Uncaught" in line], "\n".join(console)
    return done


def test_chromium_draws_every_figure_without_script_errors(dashboard_store, tmp_path):
    report = dashboard_store.latest  # the fullest page the store gives
    dom = _chromium(report.path, tmp_path, "--dump-dom").stdout
    errors = re.search(r"<pre id=\"script-errors\"[^>]*>(.*?)</pre>", dom, re.S)
    assert errors is not None and errors.group(1).strip() == "", errors and errors.group(1)
    rendered = re.search(r"data-plots-rendered=\"(\d+)\"", dom)
    assert rendered is not None and int(rendered.group(1)) >= report.figures > 0
    for section_id, heading in SECTIONS.items():
        assert re.search(rf"<section id=\"{section_id}\"><h2>{re.escape(heading)}</h2>", dom)
    if "ablation-table" in report.rendered:
        assert '<table class="ablation">' in dom and "<strong>" in dom  # the best cell of each column
    else:
        assert "no ablation runs yet: run scripts/ablate.py" in dom
    shot = tmp_path / "dashboard.png"
    _chromium(report.path, tmp_path, f"--screenshot={shot}", "--window-size=1400,3000", "--hide-scrollbars")
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert shot.stat().st_size > 50_000  # a blank 1400x3000 page compresses to a few kB
