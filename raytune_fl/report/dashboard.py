"""A self-contained HTML dashboard per search space, built from what the MLflow store holds.

`build_dashboard` reads the experiment (each variant's latest tune study, the latest ablation), draws one section
per question (figures from `figures.py`), writes one HTML file with plotly.js inlined once (it opens from disk,
offline) and logs it back to MLflow as `dashboard/dashboard.html`. A section whose data was never logged shows a
one-line note saying what is missing instead of vanishing.
"""

from __future__ import annotations

import argparse
import html
import math
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
from pydantic import ValidationError

from raytune_fl.config import ConfigError, SearchSpace, load_space
from raytune_fl.report import figures
from raytune_fl.report.table import summarise
from raytune_fl.tracking.schema import (
    ABLATION_FOLDER,
    ABLATION_RESULTS_FILE,
    CLIENT_ACCURACY_FILE,
    CONFIG_FILE,
    DASHBOARD_FOLDER,
    PARTITION_FILE,
    PARTITION_FOLDER,
    ROUND_METRICS_FILE,
    SETTING_DEFAULT,
    SPECTRUM_FILE,
    STAGE_ABLATION,
    STAGE_TUNE,
    TAG_CELL,
    TAG_METHOD,
    TAG_PARENT_RUN,
    TAG_SEED,
    TAG_SEEDS,
    TAG_SETTING,
    TAG_STAGE,
    TAG_TRIAL_STATUS,
    TAG_VARIANT,
    TRIAL_FINISHED,
    TRIAL_STOPPED_EARLY,
    TRIAL_UNKNOWN,
    setting_folder,
)
from raytune_fl.tracking.store import (
    Artifacts,
    MlflowClient,
    Run,
    experiment_id,
    is_child,
    metric_history,
    open_client,
    stage_runs,
)
from raytune_fl.tune.importance import completed_trial, importances
from raytune_fl.tune.space import parse_param, search_distributions

# section id -> heading, in page order (tests and the page's navigation use the same ids)
SECTIONS = {
    "ablation-table": "Ablation table",
    "learning-curves": "Learning curves",
    "optuna": "Optuna optimisation history and parameter importances",
    "round-time": "Time per round per method",
    "spectrum": "Classifier singular-value spectrum",
    "client-accuracy": "Per-client accuracy spread",
    "partition": "Partition heat-maps",
}
NO_ABLATION = "no ablation runs yet: run scripts/ablate.py"
COMPLETED = (TRIAL_FINISHED, TRIAL_STOPPED_EARLY)  # what Ray's OptunaSearch told the study as complete (last value)


class DashboardError(Exception):
    """The store cannot give the dashboard anything: no store, or no experiment of that name."""


@dataclass
class DashboardReport:
    path: Path
    rendered: list[str]  # section ids drawn from data
    skipped: dict[str, str]  # section id -> why it shows only a note
    logged_to: list[str]  # run ids the HTML was logged to as dashboard/dashboard.html
    figures: int  # plotly figures in the page


@dataclass
class Section:
    id: str
    parts: list[str] = field(default_factory=list)  # HTML fragments: notes, tables, figure divs
    figures: int = 0
    skipped: str | None = None  # the reason, when the section has no data at all

    def note(self, text: str) -> None:
        self.parts.append(f"<p class='note'>{html.escape(text)}</p>")

    def skip(self, reason: str) -> Section:
        self.skipped = reason
        self.note(reason)
        return self


# ---------------------------------------------------------------- reading the store


@dataclass
class Store:
    """What the dashboard reads: the latest tune study per variant and the latest ablation, runs in start order."""

    uri: str
    space: SearchSpace
    client: MlflowClient
    artifacts: Artifacts
    tune_parents: dict[str, Run]  # variant -> its latest tune parent run
    tune_trials: dict[str, list[Run]]  # variant -> that study's trial runs
    ablation: Run | None  # the latest ablation parent run
    ablation_trials: list[Run]
    all_trials: list[Run]  # every trial run of the experiment, any study or ablation (round times)
    variants: list[str] = field(default_factory=list)
    colors: dict[str, str] = field(default_factory=dict)


def _one_run_per_cell(runs: list[Run]) -> list[Run]:
    """A cell re-run by `ablate.py --resume` has several runs; as in the table: a finished one, else the newest."""
    chosen: dict[str, Run] = {}
    for run in runs:  # oldest first
        cell = run.data.tags.get(TAG_CELL, run.info.run_id)
        if chosen.get(cell) is None or chosen[cell].data.tags.get(TAG_TRIAL_STATUS) != TRIAL_FINISHED:
            chosen[cell] = run
    return [run for run in runs if chosen.get(run.data.tags.get(TAG_CELL, run.info.run_id)) is run]


def open_store(uri: str, space: SearchSpace, artifacts_root: Path) -> Store:
    if uri.startswith("sqlite:///") and not Path(uri.removeprefix("sqlite:///")).is_file():
        # MlflowClient would create an empty database there; say what is wrong instead
        raise DashboardError(f"no MLflow store at {uri} (run scripts/tune.py first, or pass --mlflow-uri)")
    client = open_client(uri)
    experiment = experiment_id(client, space.name)
    if experiment is None:
        raise DashboardError(f"no experiment {space.name!r} in the MLflow store at {uri} (run scripts/tune.py first)")
    tune_runs = stage_runs(client, experiment, STAGE_TUNE)  # newest first
    parents: dict[str, Run] = {}
    for run in tune_runs:
        if not is_child(run):
            parents.setdefault(run.data.tags.get(TAG_VARIANT, run.info.run_name), run)
    trials = {
        variant: [r for r in reversed(tune_runs) if r.data.tags.get(TAG_PARENT_RUN) == parent.info.run_id]
        for variant, parent in parents.items()
    }
    ablation_runs = stage_runs(client, experiment, STAGE_ABLATION)
    ablation = next((r for r in ablation_runs if not is_child(r)), None)
    ablation_trials = (
        _one_run_per_cell(
            [r for r in reversed(ablation_runs) if r.data.tags.get(TAG_PARENT_RUN) == ablation.info.run_id]
        )
        if ablation
        else []
    )
    seen = [*parents, *(r.data.tags.get(TAG_VARIANT, "") for r in ablation_trials)]
    variants = [v for v in space.variants if v in seen] + [v for v in dict.fromkeys(seen) if v not in space.variants]
    return Store(
        uri=uri,
        space=space,
        client=client,
        artifacts=Artifacts(client, artifacts_root),
        tune_parents=parents,
        tune_trials=trials,
        ablation=ablation,
        ablation_trials=ablation_trials,
        all_trials=[r for r in tune_runs + ablation_runs if is_child(r)],
        variants=variants,
        colors=figures.variant_colors(variants),
    )


def _tune_metric(store: Store, variant: str) -> tuple[str, bool, dict[str, Any]]:
    """The study's metric, whether it is maximised, and its config.yaml (the study's own, not today's file)."""
    config = store.artifacts.yaml(store.tune_parents[variant].info.run_id, CONFIG_FILE) or {}
    metric = (config.get("tune") or {}).get("metric", store.space.tune.metric)
    return metric, metric != "val_loss", config


def _final(run: Run, metric: str) -> float:
    return float(run.data.metrics.get(metric, math.nan))  # MLflow's latest value = the highest step's


def best_trial(trials: Sequence[Run], metric: str, maximize: bool) -> Run | None:
    """As the study selected: trials that ran every round first, then the best final value."""
    sign = 1.0 if maximize else -1.0
    scored = [
        (r.data.tags.get(TAG_TRIAL_STATUS) == TRIAL_FINISHED, sign * _final(r, metric), r)
        for r in trials
        if r.data.tags.get(TAG_TRIAL_STATUS) in COMPLETED and math.isfinite(_final(r, metric))
    ]
    return max(scored, key=lambda s: s[:2])[2] if scored else None


def representatives(store: Store) -> tuple[dict[str, list[Run]], str]:
    """Per variant, the runs that stand for it where one configuration is shown (spectrum, client spread):
    the ablation's first setting (every seed, lowest seed first), else the best tune trial."""
    if store.ablation_trials:
        first = store.ablation_trials[0].data.tags.get(TAG_SETTING, SETTING_DEFAULT)
        reps: dict[str, list[Run]] = {}
        for run in store.ablation_trials:
            if run.data.tags.get(TAG_SETTING, SETTING_DEFAULT) == first:
                reps.setdefault(run.data.tags.get(TAG_VARIANT, ""), []).append(run)
        for runs in reps.values():
            runs.sort(key=lambda r: int(r.data.tags.get(TAG_SEED, 0)))
        return reps, f"ablation setting {first}"
    reps = {}
    for variant, trials in store.tune_trials.items():
        metric, maximize, _ = _tune_metric(store, variant)
        best = best_trial(trials, metric, maximize)
        if best is not None:
            reps[variant] = [best]
    return reps, "each variant's best tune trial"


def _label(run: Run) -> str:
    tags = run.data.tags
    if tags.get(TAG_STAGE) == STAGE_ABLATION:
        setting = tags.get(TAG_SETTING, SETTING_DEFAULT)
        return f"{tags.get(TAG_VARIANT, '')} (seed {tags.get(TAG_SEED, '?')}, {setting})"
    return f"{tags.get(TAG_VARIANT, '')} ({run.info.run_name})"


# ---------------------------------------------------------------- sections


def _figure(section: Section, fig: Any) -> None:
    section.figures += 1
    section.parts.append(figures.figure_div(fig, f"{section.id}-fig-{section.figures}"))


def ablation_table_section(store: Store) -> Section:
    section = Section("ablation-table")
    if store.ablation is None:
        return section.skip(NO_ABLATION)
    run_id = store.ablation.info.run_id
    results = store.artifacts.parquet(run_id, f"{ABLATION_FOLDER}/{ABLATION_RESULTS_FILE}")
    if results is None or results.empty:
        return section.skip(
            f"the latest ablation run {run_id} has no {ABLATION_FOLDER}/{ABLATION_RESULTS_FILE} (unfinished or failed)"
        )
    summary = summarise(results, metric="test_acc")
    section.parts.append(figures.ablation_table_html(summary))
    seeds = store.ablation.data.tags.get(TAG_SEEDS, "?")
    section.note(
        f"Final-round test accuracy in %, mean ± sample std over seeds {seeds}; bold = best of its column; "
        f"(n/runs) = only n runs finished. Ablation run {run_id}, {len(results)} runs."
    )
    return section


def _curves(store: Store, runs: Sequence[Run], setting: Callable[[Run], str]) -> tuple[pd.DataFrame, int]:
    """Long per-round test accuracy and elapsed seconds of `runs`; also how many runs had no round table."""
    frames, missing = [], 0
    for run in runs:
        table = store.artifacts.parquet(run.info.run_id, ROUND_METRICS_FILE)
        if table is None or "test_acc" not in table:
            missing += 1
            continue
        table = table.sort_values("round")
        frames.append(
            pd.DataFrame(
                {
                    "variant": run.data.tags.get(TAG_VARIANT, ""),
                    "setting": setting(run),
                    "run_id": run.info.run_id,
                    "round": table["round"].to_numpy(),
                    "test_acc": table["test_acc"].to_numpy(),
                    "elapsed_s": figures.elapsed_seconds(table).to_numpy(),
                }
            )
        )
    return (pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()), missing


def learning_curves_section(store: Store) -> Section:
    section = Section("learning-curves")
    if store.ablation_trials:
        curves, missing = _curves(store, store.ablation_trials, lambda r: r.data.tags.get(TAG_SETTING, SETTING_DEFAULT))
        source = f"ablation run {store.ablation.info.run_id}: runs over seeds, one panel per setting"
    else:
        runs = [r for v in store.variants for r in store.tune_trials.get(v, [])]
        curves, missing = _curves(store, runs, lambda r: "tune trials")
        source = (
            f"{NO_ABLATION}. Shown instead: each variant's latest tune study, runs = its trials "
            "(different hyperparameters, not seeds; ASHA-stopped trials end early)"
        )
    if curves.empty:
        return section.skip(f"no run has a {ROUND_METRICS_FILE} artifact yet: run scripts/tune.py")
    section.note(
        f"Source: {source}. Mean line, {figures.BAND}." + (f" {missing} runs without a round table." if missing else "")
    )
    by_round = figures.curve_figure(curves, "test_acc", "round", "round", "Test accuracy per round", store.colors)
    _figure(section, by_round)
    by_time = figures.curve_figure(
        curves,
        "test_acc",
        "elapsed_s",
        f"{figures.ELAPSED_TITLE}; mean over runs at each round",
        "Test accuracy against wall-clock time",
        store.colors,
    )
    _figure(section, by_time)
    return section


def optuna_section(store: Store) -> Section:
    section = Section("optuna")
    unsearched = []
    for variant in store.variants:
        if variant not in store.tune_parents:
            continue
        metric, maximize, config = _tune_metric(store, variant)
        parent = store.tune_parents[variant].info.run_id
        if not config:
            section.note(f"{variant}: study run {parent} has no config.yaml: its search space cannot be rebuilt")
            continue
        try:
            distributions = search_distributions(config)
        except ValidationError as error:  # a config.yaml of another version of the schema
            section.note(f"{variant}: the search ranges in config.yaml of study run {parent} do not parse: {error}")
            continue
        if not distributions:
            unsearched.append(variant)
            continue
        rows, frozen, unusable = [], [], 0
        for index, run in enumerate(store.tune_trials.get(variant, [])):
            status, value = run.data.tags.get(TAG_TRIAL_STATUS, TRIAL_UNKNOWN), _final(run, metric)
            rows.append({"index": index, "name": run.info.run_name, "value": value, "status": status})
            if status not in COMPLETED or not math.isfinite(value):
                continue
            try:
                params = {name: parse_param(run.data.params[name], d) for name, d in distributions.items()}
                frozen.append(completed_trial(params, distributions, value))
            except (KeyError, ValueError):  # a trial of an older file whose ranges no longer hold its values
                unusable += 1
        section.parts.append(f"<h3>{html.escape(variant)}</h3>")
        if not rows:
            section.note(f"study run {parent} has no trial runs")
            continue
        trials = pd.DataFrame(rows)
        _figure(section, figures.history_figure(trials, metric, maximize, variant))
        found, how = importances(distributions, frozen, maximize)
        if found is None:
            section.note(how)
        else:
            _figure(section, figures.importance_figure(found, variant, how))
        section.note(
            f"Study run {parent}: {len(rows)} trials, {len(frozen)} completed (finished or stopped early, scored by "
            f"their last {metric})" + (f"; {unusable} outside the logged ranges left out" if unusable else "") + "."
        )
    if unsearched:
        section.note(f"Nothing searched (one trial each): {', '.join(unsearched)}.")
    if not section.figures:
        missing = "no searched variant has a tune study" if store.tune_parents else "no tune studies yet"
        return section.skip(f"{missing}: run scripts/tune.py")
    return section


def round_time_section(store: Store) -> Section:
    section = Section("round-time")
    rows = []
    for run in store.all_trials:
        for point in metric_history(store.client, run.info.run_id, "round_time_s"):
            rows.append(
                {"method": run.data.tags.get(TAG_METHOD, "?"), "run_id": run.info.run_id, "round_time_s": point.value}
            )
    if not rows:
        return section.skip("no run has logged round_time_s yet: run scripts/tune.py")
    times = pd.DataFrame(rows)
    _figure(section, figures.round_time_figure(times))
    section.note(f"{len(times)} rounds of {times['run_id'].nunique()} runs (tune and ablation, every study).")
    return section


def spectrum_section(store: Store) -> Section:
    section = Section("spectrum")
    reps, which = representatives(store)
    spectra, owners = {}, {}
    for variant in store.variants:
        for run in reps.get(variant, [])[:1]:
            table = store.artifacts.parquet(run.info.run_id, SPECTRUM_FILE)
            if table is not None and not table.empty:
                spectra[_label(run)], owners[_label(run)] = table, variant
    if not spectra:
        return section.skip(f"no {SPECTRUM_FILE} on the runs shown ({which}): diagnostics.spectrum off?")
    _figure(section, figures.spectrum_figure(spectra, store.colors, owners))
    section.note(f"One run per variant: {which}" + (", seed 0 (the lowest seed)." if store.ablation_trials else "."))
    return section


def client_accuracy_section(store: Store) -> Section:
    section = Section("client-accuracy")
    reps, which = representatives(store)
    boxes, curves = [], []
    for variant in store.variants:
        runs = reps.get(variant, [])
        tables = [(run, store.artifacts.parquet(run.info.run_id, CLIENT_ACCURACY_FILE)) for run in runs]
        found = [(run, t) for run, t in tables if t is not None and not t.empty]
        for run, table in found:
            boxes.append(figures.last_round(table).assign(variant=variant, label=_label(run)))
        if runs and not found:  # logged before client_accuracy.parquet existed: the per-round summary metrics
            table = store.artifacts.parquet(runs[0].info.run_id, ROUND_METRICS_FILE)
            if table is not None and {"client_acc_mean", "client_acc_worst"} <= set(table.columns):
                curves.append(table.assign(variant=variant))
    if boxes:
        title = f"Accuracy of the global model on each client's held-out data, last round ({which}, runs pooled)"
        _figure(section, figures.client_box_figure(pd.concat(boxes, ignore_index=True), store.colors, title))
    if curves:
        title = f"Client accuracy per round ({which}; no client_accuracy.parquet: summary metrics)"
        _figure(section, figures.client_curve_figure(pd.concat(curves, ignore_index=True), store.colors, title))
        section.note("Runs logged before client_accuracy.parquet existed show the per-round mean/worst/std instead.")
    if not section.figures:
        return section.skip(f"no per-client accuracy on the runs shown ({which}): diagnostics.client_accuracy off?")
    return section


def partition_section(store: Store) -> Section:
    section = Section("partition")
    shown: list[tuple[pd.DataFrame, list[str]]] = []  # tune studies share a partition unless overridden
    partition_file = f"{PARTITION_FOLDER}/{PARTITION_FILE}"
    for variant in store.variants:
        parent = store.tune_parents.get(variant)
        table = None if parent is None else store.artifacts.parquet(parent.info.run_id, partition_file)
        if table is None:
            continue
        same = next((names for seen, names in shown if seen.equals(table)), None)
        if same is None:
            shown.append((table, [variant]))
        else:
            same.append(variant)
    for table, names in shown:
        _figure(section, figures.partition_figure(table, f"Tune studies of {', '.join(names)}: samples per class"))
    if store.ablation is not None:  # partition/partition.parquet, or partition/<setting>/... with a grid
        run_id = store.ablation.info.run_id
        settings = list(dict.fromkeys(r.data.tags.get(TAG_SETTING, SETTING_DEFAULT) for r in store.ablation_trials))
        labels = {setting_folder(s): s for s in settings}
        labels[""] = settings[0] if len(settings) == 1 else SETTING_DEFAULT  # one setting: no folder per setting
        for path in store.artifacts.files(run_id, PARTITION_FOLDER):
            if path.endswith(f"/{PARTITION_FILE}"):
                folder = path.removeprefix(f"{PARTITION_FOLDER}/").removesuffix(PARTITION_FILE).strip("/")
                title = f"Ablation setting {labels.get(folder, folder)}: samples per class"
                _figure(section, figures.partition_figure(store.artifacts.parquet(run_id, path), title))
    if not section.figures:
        return section.skip(f"no {partition_file} on any study or ablation run: run scripts/tune.py")
    return section


BUILDERS: dict[str, Callable[[Store], Section]] = {
    "ablation-table": ablation_table_section,
    "learning-curves": learning_curves_section,
    "optuna": optuna_section,
    "round-time": round_time_section,
    "spectrum": spectrum_section,
    "client-accuracy": client_accuracy_section,
    "partition": partition_section,
}


# ---------------------------------------------------------------- the page


def render_page(space: SearchSpace, store: Store, sections: list[Section]) -> str:
    parents = ", ".join(f"{v}: {r.info.run_id}" for v, r in store.tune_parents.items()) or "none"
    ablation = store.ablation.info.run_id if store.ablation else "none"
    header = (
        f"<p class='meta'>MLflow store {html.escape(store.uri)}, experiment {html.escape(space.name)}; "
        f"latest tune studies: {html.escape(parents)}; latest ablation: {ablation}. "
        f"Built {time.strftime('%Y-%m-%d %H:%M:%S')}.</p>"
    )
    parts = [(s.id, SECTIONS[s.id], "".join(s.parts)) for s in sections]
    return figures.page(f"{space.name}: tuning and ablation dashboard", header, parts)


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


# ---------------------------------------------------------------- command line


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="build.py", description="Build a self-contained HTML dashboard of a search space's MLflow runs."
    )
    parser.add_argument("--space", required=True, help="search-space YAML file, e.g. search_spaces/univarfl.yaml")
    parser.add_argument("--mlflow-uri", help="MLflow tracking URI; default: sqlite:///<cwd>/mlflow.db")
    parser.add_argument("--out", help="HTML file to write; default: reports/<space name>/dashboard.html")
    parser.add_argument("--no-log", action="store_true", help="do not log the HTML back to MLflow")
    args = parser.parse_args(argv)
    try:
        space = load_space(args.space)
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except (OSError, UnicodeDecodeError) as error:
        print(f"error: --space: cannot read {args.space}: {error}", file=sys.stderr)
        return 2
    from raytune_fl.tracking import default_tracking_uri

    uri = args.mlflow_uri or default_tracking_uri()
    out = Path(args.out) if args.out else Path("reports") / re.sub(r"[^\w.-]", "_", space.name) / "dashboard.html"
    try:
        build_dashboard(uri, space, out, log_artifact=not args.no_log)
    except DashboardError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0
