"""The dashboard's sections, one builder per question: each reads what it needs from the `Store` (runs.py) and
returns a `Section` of HTML fragments (notes, the ablation table, figure divs). A section whose data was never
logged shows a one-line note saying what is missing instead of vanishing.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
from pydantic import ValidationError

from raytune_fl.ablation.power import table_line
from raytune_fl.ablation.table import MIN_RUNS_FOR_INTERVAL, noise, summarise, to_html
from raytune_fl.metrics import CLIENT_ACC_MEAN, CLIENT_ACC_WORST, ELAPSED_S, ROUND, ROUND_TIME_S, TEST_ACC
from raytune_fl.report import figures
from raytune_fl.report.page import figure_div
from raytune_fl.report.runs import COMPLETED, Store, final_value, representatives, run_label, tune_metric
from raytune_fl.tracking.schema import (
    ABLATION_FOLDER,
    ABLATION_RESULTS_FILE,
    CLIENT_ACCURACY_FILE,
    PARTITION_FILE,
    PARTITION_FOLDER,
    RAN_EVERY_ROUND,
    ROUND_METRICS_FILE,
    SETTING_DEFAULT,
    SPECTRUM_FILE,
    TAG_METHOD,
    TAG_OBJECTIVES,
    TAG_PARETO_FRONT,
    TAG_PARTITION_SEEDS,
    TAG_SEEDS,
    TAG_SETTING,
    TAG_TRIAL_STATUS,
    TAG_VARIANT,
    TRIAL_UNKNOWN,
    TRUE,
    setting_folder,
)
from raytune_fl.tracking.store import Run, metric_history
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
# sections drawn only where their data exists (a benchmark's, not every study's): no note when absent
OPTIONAL_SECTIONS = {
    "search-landscape": "Search landscape: a ground-truth grid and the study trials on it",
    "pareto-front": "Pareto front per variant: the trade-off between the study's objectives",
}
NO_ABLATION = "no ablation runs yet: run scripts/ablate.py"


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


def _figure(section: Section, fig: Any) -> None:
    section.figures += 1
    section.parts.append(figure_div(fig, f"{section.id}-fig-{section.figures}"))


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
    summary = summarise(results, metric=TEST_ACC)
    section.parts.append(to_html(summary))
    seeds = store.ablation.data.tags.get(TAG_SEEDS, "?")
    splits = store.ablation.data.tags.get(TAG_PARTITION_SEEDS)  # set only when the ablation varied the split
    over = f"seeds {seeds}" + (f" x partition seeds {splits} (the split varies)" if splits else "")
    section.note(
        f"Final-round test accuracy in %, mean ± sample std over {over}; bold = best of its column; "
        f"(n/runs) = only n runs finished; k collapsed = k runs ended at chance (not above the chance bound of "
        f"the validation or test split), left out of the mean. Ablation run {run_id}, {len(results)} runs."
    )
    section.note(table_line(summary["std"], summary["n"], summary["variant"].nunique(), summary["setting"].nunique()))
    counts = (len(seeds.split(",")) if seeds != "?" else None, len(splits.split(",")) if splits else 1)
    title = f"Final-round test accuracy: mean over {noise(*counts)}"
    _figure(section, figures.final_accuracy_figure(summary, store.colors, title))
    section.note(
        f"The chart: the table's means, {figures.BARS} (Student's t with n - 1 degrees of freedom; no bar where "
        f"fewer than {MIN_RUNS_FOR_INTERVAL} runs finished: the table shows their spread instead): the uncertainty of "
        "the mean over these runs, not the range a single run falls in."
    )
    return section


def _curves(store: Store, runs: Sequence[Run], setting: Callable[[Run], str]) -> tuple[pd.DataFrame, int]:
    """Long per-round test accuracy and elapsed seconds of `runs`; also how many runs had no round table."""
    frames, missing = [], 0
    for run in runs:
        table = store.artifacts.parquet(run.info.run_id, ROUND_METRICS_FILE)
        if table is None or TEST_ACC not in table:
            missing += 1
            continue
        table = table.sort_values(ROUND)
        frames.append(
            pd.DataFrame(
                {
                    "variant": run.data.tags.get(TAG_VARIANT, ""),
                    "setting": setting(run),
                    "run_id": run.info.run_id,
                    ROUND: table[ROUND].to_numpy(),
                    TEST_ACC: table[TEST_ACC].to_numpy(),
                    ELAPSED_S: figures.elapsed_seconds(table).to_numpy(),
                }
            )
        )
    return (pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()), missing


def learning_curves_section(store: Store) -> Section:
    section = Section("learning-curves")
    seeds_only = bool(store.ablation_trials)  # the runs differ in seed (and split): their mean has an interval
    if store.ablation is not None and seeds_only:  # an ablation's trials come with its run (load_store)
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
        f"Source: {source}. Mean line, {figures.BAND}"
        + (f", {figures.BARS}." if seeds_only else ".")
        + (f" {missing} runs without a round table." if missing else "")
    )
    by_round = figures.curve_figure(
        curves, TEST_ACC, ROUND, ROUND, "Test accuracy per round", store.colors, intervals=seeds_only
    )
    _figure(section, by_round)
    by_time = figures.curve_figure(
        curves,
        TEST_ACC,
        ELAPSED_S,
        f"{figures.ELAPSED_TITLE}; mean over runs at each round",
        "Test accuracy against wall-clock time",
        store.colors,
        intervals=seeds_only,
    )
    _figure(section, by_time)
    return section


def optuna_section(store: Store) -> Section:
    section = Section("optuna")
    unsearched = []
    for variant in store.variants:
        if variant not in store.tune_parents:
            continue
        metric, maximize, config = tune_metric(store, variant)
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
            status, value = run.data.tags.get(TAG_TRIAL_STATUS, TRIAL_UNKNOWN), final_value(run, metric)
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
            f"Study run {parent}: {len(rows)} trials, {len(frozen)} completed (finished, collapsed or stopped early, "
            f"scored by their last {metric})"
            + (f"; {unusable} outside the logged ranges left out" if unusable else "")
            + "."
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
        for point in metric_history(store.client, run.info.run_id, ROUND_TIME_S):
            rows.append(
                {"method": run.data.tags.get(TAG_METHOD, "?"), "run_id": run.info.run_id, ROUND_TIME_S: point.value}
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
                spectra[run_label(run)], owners[run_label(run)] = table, variant
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
            boxes.append(figures.last_round(table).assign(variant=variant, label=run_label(run)))
        if runs and not found:  # logged before client_accuracy.parquet existed: the per-round summary metrics
            table = store.artifacts.parquet(runs[0].info.run_id, ROUND_METRICS_FILE)
            if table is not None and {CLIENT_ACC_MEAN, CLIENT_ACC_WORST} <= set(table.columns):
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
                split, _, setting = folder.partition("/")  # split<P>/<setting> when the ablation varied the split
                if split.startswith("split") and split[5:].isdigit():
                    label = f"{labels.get(setting, setting)}, partition seed {split[5:]}"
                else:
                    label = labels.get(folder, folder)
                title = f"Ablation setting {label}: samples per class"
                _figure(section, figures.partition_figure(store.artifacts.parquet(run_id, path), title))
    if not section.figures:
        return section.skip(f"no {partition_file} on any study or ablation run: run scripts/tune.py")
    return section


def search_landscape_section(store: Store) -> Section:
    section = Section("search-landscape")
    if not store.grid_runs:
        return section.skip("no grid runs in this experiment: benchmarks/search.py logs a ground-truth grid")
    metric = store.space.tune.primary
    rows = [
        {**{k: float(v) for k, v in run.data.params.items()}, "value": final_value(run, metric)}
        for run in store.grid_runs
    ]
    names = sorted({k for row in rows for k in row if k != "value"})
    if len(names) != 2:
        return section.skip(f"the grid runs vary {len(names)} hyperparameters ({', '.join(names)}): a map needs 2")
    grid = pd.DataFrame(rows).dropna()
    x, y = names
    trials = []
    for variant, runs in store.tune_trials.items():
        for run in runs:
            if {x, y} <= set(run.data.params) and run.data.tags.get(TAG_TRIAL_STATUS) in COMPLETED:
                finished = run.data.tags.get(TAG_TRIAL_STATUS) in RAN_EVERY_ROUND  # not cut short by ASHA
                values = {k: float(run.data.params[k]) for k in (x, y)}
                trials.append({**values, "value": final_value(run, metric), "study": variant, "finished": finished})
    columns = [x, y, "value", "study", "finished"]
    _figure(section, figures.landscape_figure(grid, pd.DataFrame(trials, columns=columns), x, y, metric))
    means = grid.groupby([x, y])["value"].agg(["mean", "count"]).reset_index()
    best = means.loc[means["mean"].idxmax()]
    section.note(
        f"Grid: {len(means)} points, {int(means['count'].max())} seed(s) each; its best mean {metric} "
        f"{best['mean']:.4f} at {x}={best[x]:.4g}, {y}={best[y]:.4g}. {len(trials)} study trials overlaid."
    )
    return section


def _objectives(store: Store, variant: str) -> list[tuple[str, str]]:
    """(metric, mode) of each objective of the variant's latest study; one or none: it had a single objective."""
    tagged = store.tune_parents[variant].data.tags.get(TAG_OBJECTIVES, "") if variant in store.tune_parents else ""
    return [tuple(item.split(":", 1)) for item in tagged.split(",") if ":" in item]  # type: ignore[misc]


def pareto_front_section(store: Store) -> Section:
    """Each multi-objective study's trials on its first two objectives, its Pareto front (the trial runs tagged
    pareto_front by the study) drawn apart."""
    section = Section("pareto-front")
    for variant in store.variants:
        objectives = _objectives(store, variant)
        if len(objectives) < 2:
            continue
        (x, _), (y, _) = objectives[:2]
        rows = [
            {
                x: final_value(run, x),
                y: final_value(run, y),
                "name": run.info.run_name,
                "front": run.data.tags.get(TAG_PARETO_FRONT) == TRUE,
            }
            for run in store.tune_trials.get(variant, [])
            if run.data.tags.get(TAG_TRIAL_STATUS) in COMPLETED
        ]
        section.parts.append(f"<h3>{html.escape(variant)}</h3>")
        trials = pd.DataFrame(rows, columns=[x, y, "name", "front"]).dropna(subset=[x, y])
        if trials.empty:
            section.note(f"study run {store.tune_parents[variant].info.run_id} has no completed trial")
            continue
        _figure(section, figures.pareto_figure(trials, x, y, variant))
        listed = ", ".join(f"{metric} ({mode})" for metric, mode in objectives)
        many = len(objectives) > 2
        beyond = f"; the front is over all {len(objectives)}, the plot shows the first two" if many else ""
        section.note(
            f"Objectives {listed}: {int(trials['front'].sum())} of {len(trials)} completed trials on the Pareto front "
            f"(no other trial as good on every objective and better on one){beyond}; the ablation runs the front's "
            f"best {x}."
        )
    return section


def _multi_objective(store: Store) -> bool:
    return any(len(_objectives(store, variant)) > 1 for variant in store.variants)


BUILDERS: dict[str, Callable[[Store], Section]] = {
    "ablation-table": ablation_table_section,
    "learning-curves": learning_curves_section,
    "optuna": optuna_section,
    "round-time": round_time_section,
    "spectrum": spectrum_section,
    "client-accuracy": client_accuracy_section,
    "partition": partition_section,
}
OPTIONAL_BUILDERS: dict[str, tuple[Callable[[Store], bool], Callable[[Store], Section]]] = {
    "search-landscape": (lambda store: bool(store.grid_runs), search_landscape_section),
    "pareto-front": (_multi_objective, pareto_front_section),
}
