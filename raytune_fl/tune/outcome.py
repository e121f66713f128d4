"""A variant study's outcome: its trials counted, the selected trial (tune/selection.py's rule) and its scores; with
several objectives, its Pareto front too."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, cast

from ray import tune
from ray.tune.result import TRIAL_ID

from raytune_fl.config import Objective, ParamSchedule, TuneSettings, VariantTrials
from raytune_fl.methods import METHODS
from raytune_fl.metrics import (
    CLIENT_ACC_BOTTOM10,
    CLIENT_ACC_MEAN,
    CLIENT_ACC_VAR,
    CLIENT_ACC_WORST,
    EPSILON,
    PERSONAL_VAL_ACC,
    ROUND,
    SCORES,
    SV_EFFECTIVE_RANK,
    VAL_ACC,
    VAL_ACC_SE,
)
from raytune_fl.tracking.records import ENDED_STATUSES, ended_status
from raytune_fl.tracking.schema import TRIAL_DIVERGED, TRIAL_ERROR
from raytune_fl.tune.edges import Edge
from raytune_fl.tune.selection import best_of, candidacy, pareto_front
from raytune_fl.tune.uncertainty import accuracy_se
from raytune_fl.tune.warm_start import ranked_configs

# the selected trial's last round, as the outcome keeps it: the selection metric, the test scores reported beside
# it, and the diagnostics a comparison of variants reads
KEPT_METRICS = (
    *SCORES,
    ROUND,
    CLIENT_ACC_MEAN,
    CLIENT_ACC_WORST,
    CLIENT_ACC_BOTTOM10,
    CLIENT_ACC_VAR,
    SV_EFFECTIVE_RANK,
    PERSONAL_VAL_ACC,
    EPSILON,  # base.privacy: the budget the selected trial spent
)


@dataclass(frozen=True)
class FrontTrial:
    """A trial on its variant's Pareto front: no other trial that ran every round is as good on every objective
    and better on one."""

    trial_id: str
    params: dict[str, Any]  # its searched values
    scores: dict[str, float]  # its last round's value of each objective
    selected: bool  # the front's best on the first objective: the configuration the ablation runs


@dataclass
class VariantOutcome:
    variant: str
    method: str
    best_params: dict[str, Any]  # searched + fixed hyperparameters of the selected trial
    best_metrics: dict[str, float]  # its last reported round: val_acc (selection), test_acc (reported beside)
    trials: dict[str, int]  # finished / collapsed / stopped_early / diverged / error counts
    parent_run_id: str | None
    storage: str
    wall_time_s: float
    errors: list[str] = field(default_factory=list)
    optuna_study: str | None = None  # its Optuna study (searched variants with an Optuna storage)
    optuna_storage: str | None = None  # that study's storage URL, password masked
    model_id: str | None = None  # the selected trial's global model in MLflow (models:/<model_id>)
    val_samples: int | None = None  # the validation images every score is on (all clients' held-out parts)
    front: list[FrontTrial] = field(default_factory=list)  # several objectives: the Pareto front, else empty
    setting: str | None = None  # the grid setting it was tuned at (tune --per-setting), as fields=values
    edges: list[Edge] = field(default_factory=list)  # selected values near a bound of their range (tune/edges.py)
    # a PBT study: the selected trial's schedule, what `ablate` replays (best_params: its last segment's values)
    schedule: ParamSchedule | None = None
    # the searched values of the trials that ran every round, best first by the primary metric: what a warm start of
    # another study takes the top of (tune/warm_start.py)
    ranked: list[dict[str, Any]] = field(default_factory=list)
    warm_start: str = ""  # how its study was warm-started ("2 configurations from partition.alpha=0.1"); "": cold

    def __post_init__(self) -> None:
        # a study manifest stores the outcome as JSON (dataclasses.asdict): its edges and schedule come back as dicts
        self.edges = [e if isinstance(e, Edge) else Edge(**e) for e in self.edges]
        self.schedule = ParamSchedule.of(self.schedule)


def selected_schedule(best: tune.Result) -> ParamSchedule | None:
    """The schedule a PBT trial ran, from its last checkpoint (tune/trainable.py writes it there); None without
    one."""
    from raytune_fl.tune.trainable import read_schedule

    if best.checkpoint is None:
        return None
    with best.checkpoint.as_directory() as directory:
        schedule = read_schedule(directory)
    return schedule if schedule.segments else None


def summarise(
    results: tune.ResultGrid,
    variant: str,
    trials: VariantTrials,
    settings: TuneSettings,
    val_samples: int | None = None,
) -> tuple[VariantOutcome, tune.Result | None]:
    """The variant's outcome, and the selected trial's result (None when no trial succeeded): selected by
    `settings`' rule (its primary metric and mode) among the trials that ran the experiment's every round.

    With `val_samples` (the validation set's size) the best metrics gain `val_acc_se`, the binomial standard error
    of the selected trial's val_acc (its parent run logs it as best_val_acc_se). With several objectives (the
    first is the primary metric) the outcome lists the Pareto front of the trials that ran every round, and the
    selected trial is the front's best on that metric."""
    counts, candidates, errors = _counted(results, settings.primary, trials.experiment.rounds)
    empty = VariantOutcome(variant, trials.method, {}, {}, counts, None, "", 0.0, errors, val_samples=val_samples)
    maximize = settings.mode == "max"
    empty.ranked = ranked_configs([(full, value, dict(r.config or {})) for full, value, r in candidates], maximize)
    objectives = settings.objectives
    front = _front([c[2] for c in candidates if c[0]], objectives) if len(objectives) > 1 else []
    if front:  # the selection comes from the front: of equal first scores, one another trial dominates never does
        on_front = {id(result) for result, _ in front}
        candidates = [c for c in candidates if id(c[2]) in on_front]
    best = best_of(candidates, maximize=maximize)  # trials that ran every round first (selection.py)
    if best is None:
        return empty, None
    best_metrics = {k: float(best.metrics[k]) for k in KEPT_METRICS if k in best.metrics}
    se = accuracy_se(best_metrics[VAL_ACC], val_samples) if VAL_ACC in best_metrics else None
    if se is not None:
        best_metrics[VAL_ACC_SE] = se
    params = METHODS.get(trials.method).describe({**trials.fixed, **best.config})  # the outcome: no experiment needed
    outcome = replace(empty, best_params=params, best_metrics=best_metrics)
    outcome.front = [replace(trial, selected=result is best) for result, trial in front]
    return outcome, best


def _counted(results: tune.ResultGrid, metric: str, rounds: int) -> tuple[dict[str, int], list[Any], list[str]]:
    """The trials by how they ended, the candidates for selection (candidacy's keys, with the result), and the
    errors' first lines."""
    counts = dict.fromkeys((*ENDED_STATUSES, TRIAL_ERROR), 0)  # finished, collapsed, stopped_early, diverged, error
    candidates: list[Any] = []
    errors: list[str] = []
    for result in cast("Iterable[tune.Result]", results):  # a ResultGrid iterates by index
        if result.error is not None:
            counts[TRIAL_ERROR] += 1
            errors.append(str(result.error).splitlines()[0][:300])
            continue
        metrics = result.metrics or {}
        status = ended_status(metrics, int(metrics.get(ROUND, 0)), rounds)
        counts[status] += 1
        if status == TRIAL_DIVERGED:
            continue  # never a candidate: its score is the worst by construction
        # a collapsed trial stays one: it ran every round, and a study where every trial is at chance selects one
        chosen = candidacy(metrics, metric, rounds)
        if chosen is not None:
            candidates.append((*chosen, result))
    return counts, candidates, errors


def _front(results: list[tune.Result], objectives: Sequence[Objective]) -> list[tuple[tune.Result, FrontTrial]]:
    """The results on the Pareto front of `objectives`, each with its FrontTrial (not yet marked selected)."""
    points = [[float((r.metrics or {}).get(o.metric, math.nan)) for o in objectives] for r in results]
    chosen = pareto_front(points, [o.mode == "max" for o in objectives])
    return [
        (
            results[i],
            FrontTrial(
                str((results[i].metrics or {}).get(TRIAL_ID, "")),
                dict(results[i].config or {}),
                {o.metric: value for o, value in zip(objectives, points[i], strict=True)},
                selected=False,
            ),
        )
        for i in chosen
    ]
