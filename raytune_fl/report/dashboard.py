"""A self-contained HTML dashboard per search space, built from what the MLflow store holds.

`build_dashboard` wires the pieces: runs.py reads the experiment (each variant's latest tune study, the latest
ablation), sections.py draws one section per question (figures from figures.py), page.py renders one HTML file
with plotly.js inlined once (it opens from disk, offline), and the file is logged back to MLflow as
`dashboard/dashboard.html`. The command line is raytune_fl/cli/dashboard.py.
"""

from __future__ import annotations

import html
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from raytune_fl.config import SearchSpace
from raytune_fl.report.page import page
from raytune_fl.report.runs import Store, open_store
from raytune_fl.report.sections import BUILDERS, OPTIONAL_BUILDERS, OPTIONAL_SECTIONS, SECTIONS, Section
from raytune_fl.tracking.schema import DASHBOARD_FOLDER


@dataclass
class DashboardReport:
    path: Path
    rendered: list[str]  # section ids drawn from data
    skipped: dict[str, str]  # section id -> why it shows only a note
    logged_to: list[str]  # run ids the HTML was logged to as dashboard/dashboard.html
    figures: int  # plotly figures in the page


def render_page(space: SearchSpace, store: Store, sections: list[Section]) -> str:
    parents = ", ".join(f"{v}: {r.info.run_id}" for v, r in store.tune_parents.items()) or "none"
    ablation = store.ablation.info.run_id if store.ablation else "none"
    header = (
        f"<p class='meta'>MLflow store {html.escape(store.uri)}, experiment {html.escape(space.name)}; "
        f"latest tune studies: {html.escape(parents)}; latest ablation: {ablation}. "
        f"Built {time.strftime('%Y-%m-%d %H:%M:%S')}.</p>"
    )
    headings = {**SECTIONS, **OPTIONAL_SECTIONS}
    parts = [(s.id, headings[s.id], "".join(s.parts)) for s in sections]
    return page(f"{space.name}: tuning and ablation dashboard", header, parts)


def _log(store: Store, out: Path) -> list[str]:
    """dashboard/dashboard.html on the latest ablation run, else on each variant's latest tune study run."""
    targets = [store.ablation] if store.ablation else list(store.tune_parents.values())
    with tempfile.TemporaryDirectory() as tmp:
        local = out
        if out.name != "dashboard.html":  # the artifact keeps one name whatever --out was
            local = Path(tmp) / "dashboard.html"
            shutil.copyfile(out, local)
        for run in targets:
            store.client.log_artifact(run.info.run_id, str(local), artifact_path=DASHBOARD_FOLDER)
    return [run.info.run_id for run in targets]


def build_dashboard(
    tracking_uri: str,
    space: SearchSpace,
    out: Path,
    log_artifact: bool = True,
    *,
    echo: Callable[[str], None] = print,
) -> DashboardReport:
    """Read the store, write the HTML to `out`, log it to MLflow (unless `log_artifact` is False)."""
    out = Path(out)
    with tempfile.TemporaryDirectory(prefix="dashboard-") as tmp:
        store = open_store(tracking_uri, space, Path(tmp))
        trials = sum(len(t) for t in store.tune_trials.values())
        echo(
            f"read: experiment {space.name!r} at {tracking_uri}: {len(store.tune_parents)} tune studies "
            f"({trials} trials), "
            + (
                f"ablation run {store.ablation.info.run_id} ({len(store.ablation_trials)} runs)"
                if store.ablation
                else "no ablation"
            )
        )
        sections = [build(store) for build in BUILDERS.values()]
        sections += [build(store) for wanted, build in OPTIONAL_BUILDERS.values() if wanted(store)]
        page = render_page(space, store, sections)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(page, encoding="utf-8")
        report = DashboardReport(
            path=out,
            rendered=[s.id for s in sections if s.skipped is None],
            skipped={s.id: s.skipped for s in sections if s.skipped is not None},
            logged_to=[],
            figures=sum(s.figures for s in sections),
        )
        echo(f"wrote: {out} ({out.stat().st_size / 1e6:.1f} MB, {report.figures} figures)")
        for section_id, reason in report.skipped.items():
            echo(f"  {section_id}: {reason}")
        if log_artifact:
            report.logged_to = _log(store, out)
            for run_id in report.logged_to:
                echo(f"logged: runs:/{run_id}/dashboard/dashboard.html")
    return report
