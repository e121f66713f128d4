"""A variant study's outcome: its trials counted, the selected trial (tune/selection.py's rule) and its scores."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ray import tune

from raytune_fl.engine.metric_names import (
    CLIENT_ACC_MEAN,
    CLIENT_ACC_WORST,
    DIVERGED,
    PERSONAL_VAL_ACC,
    ROUND,
    SCORES,
    SV_EFFECTIVE_RANK,
    VAL_ACC,
    VAL_ACC_SE,
)
from raytune_fl.methods import METHODS
from raytune_fl.tracking.schema import TRIAL_DIVERGED, TRIAL_ERROR, TRIAL_FINISHED, TRIAL_STOPPED_EARLY
from raytune_fl.tune.selection import best_of, candidacy
from raytune_fl.tune.uncertainty import accuracy_se

# the selected trial's last round, as the outcome keeps it: the selection metric, the test scores reported beside
# it, and the diagnostics a comparison of variants reads
KEPT_METRICS = (*SCORES, ROUND, CLIENT_ACC_MEAN, CLIENT_ACC_WORST, SV_EFFECTIVE_RANK, PERSONAL_VAL_ACC)


@dataclass
class VariantOutcome:
    variant: str
    method: str
    best_params: dict[str, Any]  # searched + fixed hyperparameters of the selected trial
    best_metrics: dict[str, float]  # its last reported round: val_acc (selection), test_acc (reported beside)
    trials: dict[str, int]  # finished / stopped_early / error counts
    parent_run_id: str | None
    storage: str
    wall_time_s: float
    errors: list[str] = field(default_factory=list)
    optuna_study: str | None = None  # its Optuna study (searched variants with an Optuna storage)
    optuna_storage: str | None = None  # that study's storage URL, password masked
    model_id: str | None = None  # the selected trial's global model in MLflow (models:/<model_id>)
    val_samples: int | None = None  # the validation images every score is on (all clients' held-out parts)


def summarise(
    results: tune.ResultGrid,
    variant: str,
    method: str,
    fixed: dict[str, Any],
    metric: str,
    mode: str,
    rounds: int,
    val_samples: int | None = None,
) -> tuple[VariantOutcome, tune.Result | None]:
    """The variant's outcome, and the selected trial's result (None when no trial succeeded).

    With `val_samples` (the validation set's size) the best metrics gain `val_acc_se`, the binomial standard error
    of the selected trial's val_acc (its parent run logs it as best_val_acc_se)."""
    counts = {TRIAL_FINISHED: 0, TRIAL_STOPPED_EARLY: 0, TRIAL_DIVERGED: 0, TRIAL_ERROR: 0}
    candidates, errors = [], []
    for result in results:
        if result.error is not None:
            counts[TRIAL_ERROR] += 1
            errors.append(str(result.error).splitlines()[0][:300])
            continue
        metrics = result.metrics or {}
        if metrics.get(DIVERGED):
            counts[TRIAL_DIVERGED] += 1  # never a candidate: its score is the worst by construction
            continue
        counts[TRIAL_FINISHED if int(metrics.get(ROUND, 0)) >= rounds else TRIAL_STOPPED_EARLY] += 1
        chosen = candidacy(metrics, metric, rounds)
        if chosen is not None:
            candidates.append((*chosen, result))
    if not candidates:
        return VariantOutcome(variant, method, {}, {}, counts, None, "", 0.0, errors, val_samples=val_samples), None
    best = best_of(candidates, maximize=mode == "max")  # trials that ran every round first (tune/selection.py)
    best_metrics = {k: float(best.metrics[k]) for k in KEPT_METRICS if k in best.metrics}
    se = accuracy_se(best_metrics[VAL_ACC], val_samples) if VAL_ACC in best_metrics else None
    if se is not None:
        best_metrics[VAL_ACC_SE] = se
    params = METHODS.get(method).describe({**fixed, **best.config})  # the outcome: no experiment needed
    outcome = VariantOutcome(
        variant, method, params, best_metrics, counts, None, "", 0.0, errors, val_samples=val_samples
    )
    return outcome, best
