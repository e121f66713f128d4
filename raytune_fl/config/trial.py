"""One trial resolved once (TrialSpec): the experiment, the method and every hyperparameter, the same object for
the trainable, MLflow's params and the model export."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from raytune_fl.config.experiment import ExperimentConfig, ResourcesConfig


@dataclass(frozen=True)
class TrialSpec:
    """One trial, resolved once: the experiment it runs, the method, and every hyperparameter (the variant's fixed
    values, then the searched ones, checked, defaults filled in). What the trainable builds its federation from,
    what MLflow logs as the run's params and what the model export rebuilds the model from: the same object."""

    experiment: ExperimentConfig
    method: str
    params: dict[str, Any]  # resolved: every hyperparameter of the method (None where derived from the data)

    @classmethod
    def resolve(
        cls,
        experiment: ExperimentConfig,
        method: str,
        fixed: Mapping[str, Any],
        searched: Mapping[str, Any] | None = None,
    ) -> TrialSpec:
        """`searched` (a Tune trial's config) over the variant's `fixed` values: the one place they merge."""
        from raytune_fl.methods import METHODS

        return cls(experiment, method, METHODS.get(method).resolve({**fixed, **(searched or {})}))

    @property
    def placement(self) -> ResourcesConfig:
        """Where its clients and evaluation run (actors, CPUs and GPU shares per bundle)."""
        return self.experiment.resources

    def described(self) -> dict[str, Any]:
        """The hyperparameters for display: a data-derived default shown as its rule (e.g. "D/4")."""
        from raytune_fl.methods import METHODS

        return METHODS.get(self.method).describe(self.params)
