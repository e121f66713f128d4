"""The real MLflow UI (what `mlflow ui` / `mlflow server` serves), driven in headless Chromium: a study's runs table
with the nested trial runs expanded, the chart view of a metric per round, and the compare view's parallel
coordinates of one variant's trials. Standard library only (the browser is tools/browser.py); run as
`python -m tools.mlflow_ui`, tested by tests/tooling/test_mlflow_ui.py. The links are raytune_fl/tracking/urls.py's,
but for the compare view's (compare_url, here: only this tool opens it).

Where the UI opens: MLflow 3.10-3.17 open an experiment on the page of the browser's *workflow type*, the
"GenAI | Model training" switch at the top of the sidebar, stored in the browser (localStorage) and GenAI until
switched; in 3.17 `?workflowType=machine_learning` in the URL overrides it. So `runs_url` names the runs tab and
carries that parameter. The experiment tag `mlflow.experimentKind` (set by tracking/tracker.py) is what builds
without that switch go by (the UI's feature flag for it is on in 3.10-3.17).

The page structure this relies on (checked against MLflow 3.17's UI): the runs table is an ag-grid whose rows
(`.ag-row`, `row-id` = run id, `row-index` = position) hold a link to the run (`a[href*="/runs/"]`) and, for a
parent run, an expander button in the same cell; child rows follow their parent, indented.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from raytune_fl.tracking.urls import runs_url, ui_url
from tools.browser import Browser, BrowserError, Page

DEFAULT_METRIC = "val_acc"
RUN_COLUMNS = ("best_val_acc", "val_acc", "trial_status")  # added to the runs table (metrics, then a tag)

# every rendered row of the runs table, in row order: [{index, id, name, left, expander}]
_ROWS_JS = r"""(() => {
  const rows = new Map();
  for (const row of document.querySelectorAll('.ag-row[row-id]')) {
    const link = row.querySelector('a[href*="/runs/"]');
    if (!link) continue;
    const cell = link.closest('[role=gridcell]') || row;
    rows.set(Number(row.getAttribute('row-index')), {
      index: Number(row.getAttribute('row-index')),
      id: row.getAttribute('row-id'),
      name: link.innerText.trim(),
      left: Math.round(link.getBoundingClientRect().left),
      expander: !!cell.querySelector('button'),
    });
  }
  return Array.from(rows.values()).sort((a, b) => a.index - b.index);
})()"""

# how long to wait for the UI to draw a step: a 2-core machine running a test tier beside it took over 15 s to
# draw a chart's axis; a step that never comes still fails, only later
UI_WAIT_S = 45
PICK_ATTEMPTS = 3  # tries at choosing the plotted metric, each waiting up to PICK_WAIT_S for its axis
PICK_WAIT_S = 30


def compare_url(server: str, experiment_id: str, run_ids: Sequence[str]) -> str:
    """The compare view of these runs (parallel coordinates, scatter, box and contour plots, then the tables)."""
    query = {"runs": json.dumps(list(run_ids)), "experiments": json.dumps([experiment_id])}
    return ui_url(server, "compare-runs", query)


class UIError(RuntimeError):
    pass


@dataclass(frozen=True)
class RunRow:
    """One row of the runs table as drawn: `depth` 0 for a top-level run, 1 for a run nested under the row above."""

    index: int
    run_id: str
    name: str
    depth: int
    expander: bool  # a parent row (its children are shown or hidden by its button)


def nested(rows: Sequence[RunRow]) -> list[tuple[RunRow, list[RunRow]]]:
    """The runs table as drawn: each top-level row with the rows nested under it, in row order."""
    tree: list[tuple[RunRow, list[RunRow]]] = []
    for row in rows:
        if row.depth == 0:
            tree.append((row, []))
        elif tree:
            tree[-1][1].append(row)
    return tree


class MlflowUI:
    """One MLflow server's UI in a browser page."""

    def __init__(self, page: Page, server: str, timeout_s: float = 120) -> None:
        self.page = page
        self.server = server.rstrip("/")
        self.timeout_s = timeout_s

    def experiment_id(self, name: str) -> str:
        """The id of the experiment named `name`, asked by the UI's own page (its REST API, same origin)."""
        self.page.goto(f"{self.server}/")
        self.page.wait_for("document.readyState === 'complete'", self.timeout_s, "the MLflow UI to load")
        query = urllib.parse.urlencode({"experiment_name": name})
        reply = self.page.evaluate(
            f"fetch('ajax-api/2.0/mlflow/experiments/get-by-name?{query}')"
            ".then(r => r.json().then(body => ({status: r.status, body})))"
        )
        if reply["status"] != 200:
            raise UIError(f"no experiment {name!r} at {self.server}: {reply['body'].get('message', reply['body'])}")
        return reply["body"]["experiment"]["experiment_id"]

    # ---------------------------------------------------------------- the runs table

    def open_runs(self, experiment_id: str, charts: bool = False) -> list[RunRow]:
        """The runs table (or chart view) with every parent row expanded: its rows."""
        self.page.goto(runs_url(self.server, experiment_id, charts))
        self.page.wait_for(
            "document.querySelectorAll('.ag-row a[href*=\"/runs/\"]').length > 0 || "
            "/No runs|No results/.test(document.body.innerText)",
            self.timeout_s,
            "the runs table",
        )
        if "/runs" not in self.page.evaluate("location.hash"):
            raise UIError(f"the UI did not open the runs table: {self.page.evaluate('location.href')}")
        self.close_assistant()
        return self.expand_all()

    def matching_runs(self) -> int | None:
        """The runs the table says match its filter ("N matching runs" under the table)."""
        found = re.search(r"(\d+) matching runs?", self.page.text())
        return int(found.group(1)) if found else None

    def rows(self) -> list[RunRow]:
        raw = self.page.evaluate(_ROWS_JS) or []
        lefts = sorted({r["left"] for r in raw})
        return [RunRow(r["index"], r["id"], r["name"], lefts.index(r["left"]), r["expander"]) for r in raw]

    def expand_all(self) -> list[RunRow]:
        """Clicks the expander of every parent row whose children are hidden (the UI collapses them by default)."""
        tried: set[str] = set()  # a parent whose button showed no rows (none to show) is clicked once
        for _ in range(500):
            rows = self.rows()
            collapsed = [
                row
                for i, row in enumerate(rows)
                if row.expander and row.run_id not in tried and (i + 1 == len(rows) or rows[i + 1].depth <= row.depth)
            ]
            if not collapsed:
                return rows
            row = collapsed[0]
            tried.add(row.run_id)
            link = f"document.querySelector('.ag-row[row-id={json.dumps(row.run_id)}] a[href*=\"/runs/\"]')"
            cell = f"({link}.closest('[role=gridcell]') || {link})"
            self.page.click(f"{cell}.querySelector('button')", f"the expander of {row.name}")
            try:
                self.page.wait_for(f"({_ROWS_JS}).length > {len(rows)}", UI_WAIT_S, f"the runs nested under {row.name}")
            except BrowserError:
                continue
        raise UIError("expanding the parent rows did not end")

    def fit_rows(self, width: int, rows: int) -> None:
        """A viewport tall enough for `rows` rows of the table (the table draws only the rows in view)."""
        self.page.resize(width, min(max(700, 330 + 33 * rows), 4000))

    def add_columns(self, names: Sequence[str]) -> list[str]:
        """Adds columns through the table's Columns menu (searched by name, the first exact match: a metric before a
        param before a tag of that name); the column headers afterwards. Names not in the menu are skipped."""
        for name in names:
            self.page.click("document.querySelector('[data-testid=column-selection-dropdown]')", "the Columns menu")
            search = "document.querySelector('input[placeholder=\"Search columns\"]')"
            self.page.wait_for(f"!!{search}", UI_WAIT_S, "the column search box")
            self.page.click(search)
            self.page.type(name)
            node = (
                "Array.from(document.querySelectorAll('[data-testid=column-selector-tree] "
                f"[class*=tree-node-content-wrapper]')).find(e => e.innerText.trim() === {json.dumps(name)})"
            )
            try:
                self.page.wait_for(f"!!{node}", 5, f"column {name}")
                self.page.click(node, f"column {name}")
            except BrowserError:
                pass
            self.page.press("Escape")
            time.sleep(0.3)
        return self.page.evaluate(
            "Array.from(document.querySelectorAll('.ag-header-cell')).map(h => h.innerText.trim()).filter(t => t)"
        )

    def show_all_runs(self) -> None:
        """The charts draw the first 10 runs of the table unless told otherwise: its eye menu, "Show all runs"."""
        self.page.click(
            "document.querySelector('[data-testid=experiment-view-runs-visibility-column-header]')", "the eye menu"
        )
        item = (
            "Array.from(document.querySelectorAll('[role=menuitemradio]')).find(e => /Show all runs/.test(e.innerText))"
        )
        self.page.wait_for(f"!!{item}", UI_WAIT_S, "Show all runs")
        self.page.click(item, "Show all runs")
        self.page.wait_for("!document.querySelector('[role=menuitemradio]')", UI_WAIT_S, "the eye menu to close")

    def close_assistant(self) -> None:
        """Closes the "MLflow Assistant" side panel if it is open (it takes a third of the page)."""
        self.page.evaluate(
            "document.querySelectorAll('button[data-component-id=\"mlflow.assistant.chat_panel.close\"]')"
            ".forEach(b => b.click())"
        )

    # ---------------------------------------------------------------- charts and compare

    def show_metric_chart(self, metric: str, min_lines: int = 1, enlarge: bool = True) -> list[str]:
        """In the chart view: the charts filtered to `metric`, its line chart (x = step) drawn, and with `enlarge`
        opened full screen (its card's button), where the legend names every run; the legend's entries."""
        search = "document.querySelector('input[placeholder=\"Search metric charts\"]')"
        self.page.wait_for(f"!!{search}", self.timeout_s, "the chart search box")
        self.page.click(search)
        self.page.type(metric)
        card = (
            "Array.from(document.querySelectorAll('[data-testid=experiment-view-compare-runs-card]'))"
            f".find(c => c.innerText.split('\\n')[0].trim() === {json.dumps(metric)})"
        )
        lines = "p.querySelectorAll('.scatterlayer .trace').length"
        self.page.wait_for(
            f"(() => {{ const c = {card}; const p = c && c.querySelector('.js-plotly-plot'); "
            f"return !!p && {lines} > 0 && /Step/.test(p.textContent); }})()",
            self.timeout_s,
            f"the {metric} line chart",
        )
        self.close_assistant()
        box = card
        if enlarge:
            self.page.click(f"({card}).querySelector('button[data-component-id=fullscreen_button_chartcard]')")
            box = "document.querySelector('[role=dialog]')"
        plot = f"({box}).querySelector('.js-plotly-plot')"
        legend = (  # the UI's own legend under the plot: "<run name> (<metric>)" per run
            f"Array.from(({box}).querySelectorAll('span')).map(e => e.textContent)"
            f".filter(t => t.endsWith({json.dumps(f' ({metric})')}))"
        )
        self.page.wait_for(
            f"(() => {{ const p = {box} && {plot}; return !!p && {lines} > 0 && /Step/.test(p.textContent) && "
            f"{legend}.length >= {min_lines}; }})()",
            self.timeout_s,
            f"the {metric} line chart with {min_lines} runs in its legend",
        )
        return self._settled(legend)  # the runs' histories arrive one by one

    def _settled(self, expression: str, quiet_s: float = 2.0, timeout_s: float = 30) -> object:
        """The value of a JavaScript expression once it has not changed for `quiet_s` seconds."""
        value, since, deadline = self.page.evaluate(expression), time.monotonic(), time.monotonic() + timeout_s
        while time.monotonic() - since < quiet_s and time.monotonic() < deadline:
            time.sleep(0.25)
            now = self.page.evaluate(expression)
            if now != value:
                value, since = now, time.monotonic()
        return value

    def open_parallel_coordinates(self, experiment_id: str, run_ids: Sequence[str], metric: str) -> list[str]:
        """The compare view of `run_ids`, its parallel coordinates plot showing `metric` (the parameters left as the
        UI picks them: for a study's trials, the searched ones); the plot's axis titles."""
        self.page.goto(compare_url(self.server, experiment_id, run_ids))
        plot = "document.querySelector('.parcoords')"
        self.page.wait_for(f"!!{plot}", self.timeout_s, "the parallel coordinates plot")
        self.close_assistant()
        selects = "Array.from(document.querySelectorAll('[class*=select-multiple]'))"
        metrics = f"{selects}[1]"
        chosen = f"Array.from({metrics}.querySelectorAll('[class*=selection-item-content]')).map(e => e.innerText)"
        for _ in range(100):  # remove the metrics the UI chose (every metric a run logs: dozens)
            if not self.page.evaluate(f"{chosen}.length"):
                break
            self.page.click(f"{metrics}.querySelector('[class*=selection-item-remove]')", "a metric's remove button")
            time.sleep(0.3)
        option = f"document.querySelector('[class*=select-item-option][title={json.dumps(metric)}]')"
        axes = "Array.from(document.querySelectorAll('.parcoords .axis-title')).map(e => e.textContent)"
        has_axis = f"{axes}.includes({json.dumps(metric)})"
        for attempt in range(PICK_ATTEMPTS):
            # on a loaded machine a click can land while the dropdown still animates and pick nothing: pick again
            if not self.page.evaluate(f"{chosen}.includes({json.dumps(metric)})"):
                self.page.click(f"{metrics}.querySelector('[class*=select-selector]')", "the metrics box")
                self.page.type(metric)
                self.page.wait_for(f"!!{option}", UI_WAIT_S, f"{metric} among the metrics")
                self.page.click(option, f"the {metric} option")
                self.page.press("Escape")
            try:
                self.page.wait_for(has_axis, PICK_WAIT_S, f"a {metric} axis")
                break
            except BrowserError as error:
                if attempt == PICK_ATTEMPTS - 1:
                    shown = self.page.evaluate(f"[{chosen}, {axes}]")
                    picked = f"after {PICK_ATTEMPTS} picks (chosen: {shown[0]}; axes: {shown[1]})"
                    raise UIError(f"{error} {picked}") from error
        time.sleep(0.5)
        return self.page.evaluate(axes)


# ---------------------------------------------------------------- the screenshots


@dataclass
class Screenshots:
    runs: Path
    charts: Path
    parallel: Path | None
    tree: list[tuple[str, list[str]]]  # the runs table as drawn: each parent's name, its nested runs' names
    columns: list[str]
    parallel_axes: list[str]
    variant: str | None  # whose trials the parallel coordinates show


def take_screenshots(
    server: str,
    experiment: str,
    out: str | Path,
    variant: str | None = None,
    metric: str = DEFAULT_METRIC,
    columns: Sequence[str] = RUN_COLUMNS,
    chromium: str | None = None,
    width: int = 1800,
    echo=print,
) -> Screenshots:
    """mlflow_runs.png (the runs table, nested runs expanded, `columns` added), mlflow_charts.png (the chart view
    of `metric` per round) and mlflow_parallel.png (the compare view's parallel coordinates of `variant`'s trials;
    default the variant with the most trials; none if no variant has two) under `out`."""
    out = Path(out)
    with Browser(chromium) as browser:
        ui = MlflowUI(browser.new_page(width, 900), server)
        experiment_id = ui.experiment_id(experiment)

        rows = ui.open_runs(experiment_id)
        ui.fit_rows(width, ui.matching_runs() or len(rows))
        rows = ui.expand_all()
        shown = ui.add_columns(columns)
        tree = [(parent.name, [child.name for child in children]) for parent, children in nested(rows)]
        runs = ui.page.screenshot(out / "mlflow_runs.png")
        echo(f"wrote: {runs} ({sum(len(c) for _, c in tree)} trial runs nested under {len(tree)} parent runs)")

        rows = ui.open_runs(experiment_id, charts=True)
        ui.page.resize(width, 900)
        ui.show_all_runs()
        legend = ui.show_metric_chart(metric)
        charted = [row.name for row in rows if row.depth > 0 and f"{row.name} ({metric})" in legend]
        charts = ui.page.screenshot(out / "mlflow_charts.png")
        echo(f"wrote: {charts} ({metric} per round of {len(charted)} trial runs)")

        studies: dict[str, list[RunRow]] = {}  # variant -> its newest study's trials (the table is newest first)
        for parent, children in nested(rows):
            studies.setdefault(parent.name, children)
        if variant is None and studies:
            variant = max(studies, key=lambda name: len(studies[name]))
        if variant is not None and variant not in studies:
            raise UIError(f"no variant {variant!r} in {experiment!r}: {sorted(studies)}")
        parallel, axes = None, []
        if variant is not None and len(studies[variant]) >= 2:
            trials = studies[variant]
            axes = ui.open_parallel_coordinates(experiment_id, [row.run_id for row in trials], metric)
            parallel = ui.page.screenshot(out / "mlflow_parallel.png")
            echo(f"wrote: {parallel} (variant {variant}: {len(trials)} trials, axes {', '.join(axes)})")
        else:
            echo(f"no parallel coordinates: no variant with two trial runs ({variant or 'none'})")
    return Screenshots(runs, charts, parallel, tree, shown, axes, variant)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mlflow_ui_screenshots.py",
        description="PNG screenshots of a study in the real MLflow UI (headless Chromium): the runs table with the "
        "nested trial runs expanded, the chart view of a metric per round, and the parallel coordinates of one "
        "variant's trials.",
    )
    parser.add_argument(
        "--mlflow-uri", required=True, help="the MLflow server (or `mlflow ui`), e.g. http://127.0.0.1:5000"
    )
    parser.add_argument("--experiment", required=True, help="the experiment: the search space's name")
    parser.add_argument(
        "--out", default="docs", help="folder for mlflow_runs.png, mlflow_charts.png, mlflow_parallel.png"
    )
    parser.add_argument(
        "--variant", help="whose trials the parallel coordinates show; default: the one with most trials"
    )
    parser.add_argument("--metric", default=DEFAULT_METRIC, help=f"charted metric (default {DEFAULT_METRIC})")
    parser.add_argument("--chromium", help="the browser binary (default /usr/bin/chromium, else chromium on PATH)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if not args.mlflow_uri.startswith(("http://", "https://")):
        print(
            f"error: --mlflow-uri {args.mlflow_uri!r}: the UI's address, e.g. http://127.0.0.1:5000 (start it with "
            "`mlflow ui --backend-store-uri sqlite:///$PWD/mlflow.db --port 5000`)",
            file=sys.stderr,
        )
        return 2
    try:
        take_screenshots(args.mlflow_uri, args.experiment, args.out, args.variant, args.metric, chromium=args.chromium)
    except (BrowserError, UIError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
