"""A finished study's Optuna trials rebuilt from the values MLflow holds, and their fANOVA importances."""

from __future__ import annotations

from typing import Any

import optuna
from optuna.distributions import BaseDistribution

FrozenTrial = optuna.trial.FrozenTrial


def completed_trial(params: dict[str, Any], distributions: dict[str, BaseDistribution], value: float) -> FrozenTrial:
    """A completed Optuna trial with these params and final value (ValueError when a value is out of range)."""
    return optuna.trial.create_trial(params=params, distributions=distributions, value=value)


def importances(
    distributions: dict[str, BaseDistribution], trials: list[FrozenTrial], maximize: bool
) -> tuple[dict[str, float] | None, str]:
    """fANOVA importances of a rebuilt study, or None and why not."""
    if len(trials) < 2:
        return None, f"importances need at least 2 completed trials (this study has {len(trials)})"
    if len(distributions) == 1:
        return {next(iter(distributions)): 1.0}, "one searched hyperparameter: trivially 1"
    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # no "A new study created" line per variant
    try:
        study = optuna.create_study(direction="maximize" if maximize else "minimize")
        study.add_trials(trials)
        evaluator = optuna.importance.FanovaImportanceEvaluator(seed=0)
        found = optuna.importance.get_param_importances(study, evaluator=evaluator)
        return {k: float(v) for k, v in found.items()}, "fANOVA, seed 0"
    except (RuntimeError, ValueError) as error:  # e.g. every trial scored the same: zero variance
        return None, f"importances undefined: {error}"
    finally:
        optuna.logging.set_verbosity(verbosity)
