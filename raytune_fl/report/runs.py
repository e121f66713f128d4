"""What the dashboard reads from the MLflow store: each variant's latest tune study and the latest ablation.

The reads themselves are tracking/store.py's; this module chooses the runs (one per ablation cell, the best trial
of a study, the runs that stand for a variant) and hands them to the section builders as a `Store`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from raytune_fl.config import SearchSpace, TuneSettings
from raytune_fl.errors import RaytuneFLError
from raytune_fl.report.figures import variant_colors
from raytune_fl.tracking.schema import (
    CONFIG_FILE,
    RAN_EVERY_ROUND,
    SETTING_DEFAULT,
    STAGE_ABLATION,
    STAGE_GRID,
    STAGE_TUNE,
    TAG_CELL,
    TAG_PARENT_RUN,
    TAG_SEED,
    TAG_SETTING,
    TAG_STAGE,
    TAG_TRIAL_STATUS,
    TAG_VARIANT,
    TRIAL_COLLAPSED,
    TRIAL_FINISHED,
    TRIAL_STOPPED_EARLY,
)
from raytune_fl.tracking.store import (
    Artifacts,
    MlflowClient,
    Run,
    experiment_id,
    is_child,
    one_run_per_cell,
    open_client,
    stage_runs,
)
from raytune_fl.tune.selection import best_of

# what Ray's OptunaSearch told the study as complete, with its last value: a collapsed trial (ran every round, ended
# at chance: engine/chance.py) is one too, its value a real if useless score
COMPLETED = (TRIAL_FINISHED, TRIAL_COLLAPSED, TRIAL_STOPPED_EARLY)


class DashboardError(RaytuneFLError):
    """The store cannot give the dashboard anything: no store, or no experiment of that name."""


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
    grid_runs: list[Run] = field(default_factory=list)  # ground-truth grid points (benchmarks/search.py)
    variants: list[str] = field(default_factory=list)
    colors: dict[str, str] = field(default_factory=dict)


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
    ablation_runs = stage_runs(client, experiment, STAGE_ABLATION)  # newest first
    ablation = next((r for r in ablation_runs if not is_child(r)), None)
    ablation_trials: list[Run] = []
    if ablation:  # one run per cell, as in the table; then in start order
        children = [r for r in ablation_runs if r.data.tags.get(TAG_PARENT_RUN) == ablation.info.run_id]
        ablation_trials = one_run_per_cell(children, _cell, lambda r: r.data.tags.get(TAG_TRIAL_STATUS, ""))[::-1]
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
        grid_runs=stage_runs(client, experiment, STAGE_GRID),
        variants=variants,
        colors=variant_colors(variants),
    )


def _cell(run: Run) -> str:
    return run.data.tags.get(TAG_CELL, run.info.run_id)


def tune_metric(store: Store, variant: str) -> tuple[str, bool, dict[str, Any]]:
    """The study's metric, whether it is maximised, and its config.yaml (the study's own, not today's file)."""
    config = store.artifacts.yaml(store.tune_parents[variant].info.run_id, CONFIG_FILE) or {}
    logged = (config.get("tune") or {}).get("metric")
    # the study's own selection metric: the first of its objectives (a list since multi-objective studies)
    settings = store.space.tune if logged is None else TuneSettings(metric=logged)
    return settings.primary, settings.mode == "max", config


def final_value(run: Run, metric: str) -> float:
    return float(run.data.metrics.get(metric, math.nan))  # MLflow's latest value = the highest step's


def best_trial(trials: Sequence[Run], metric: str, maximize: bool) -> Run | None:
    """As the study selected (tune/selection.py): trials that ran every round first, then the best final value."""
    completed = [r for r in trials if r.data.tags.get(TAG_TRIAL_STATUS) in COMPLETED]
    return best_of(
        ((r.data.tags.get(TAG_TRIAL_STATUS) in RAN_EVERY_ROUND, final_value(r, metric), r) for r in completed),
        maximize,
    )


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
        metric, maximize, _ = tune_metric(store, variant)
        best = best_trial(trials, metric, maximize)
        if best is not None:
            reps[variant] = [best]
    return reps, "each variant's best tune trial"


def run_label(run: Run) -> str:
    tags = run.data.tags
    if tags.get(TAG_STAGE) == STAGE_ABLATION:
        setting = tags.get(TAG_SETTING, SETTING_DEFAULT)
        return f"{tags.get(TAG_VARIANT, '')} (seed {tags.get(TAG_SEED, '?')}, {setting})"
    return f"{tags.get(TAG_VARIANT, '')} ({run.info.run_name})"
