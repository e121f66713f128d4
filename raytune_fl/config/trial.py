"""One trial resolved once (TrialSpec): the experiment, the method and every hyperparameter, the same object for
the trainable, MLflow's params and the model export."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from raytune_fl.config.experiment import ExperimentConfig, ResourcesConfig

if TYPE_CHECKING:
    from raytune_fl.config.space import SearchSpace


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
        from raytune_fl.config.privacy import split_settings, with_settings
        from raytune_fl.methods import METHODS

        # privacy.*, personalise.*, optimizer.*: the experiment
        private, values = split_settings({**fixed, **(searched or {})})
        return cls(with_settings(experiment, private), method, METHODS.get(method).resolve(values))

    @property
    def placement(self) -> ResourcesConfig:
        """Where its clients and evaluation run (actors, CPUs and GPU shares per bundle)."""
        return self.experiment.resources

    def described(self) -> dict[str, Any]:
        """The hyperparameters for display: a data-derived default shown as its rule (e.g. "D/4")."""
        from raytune_fl.methods import METHODS

        return METHODS.get(self.method).describe(self.params)


@dataclass(frozen=True)
class VariantTrials:
    """A variant's trials: its experiment, method and fixed values, each trial resolved from what Tune drew. What
    the trainable, the trial runs' records and the model export all resolve a trial from."""

    experiment: ExperimentConfig
    method: str
    fixed: Mapping[str, Any]

    @classmethod
    def of(cls, space: SearchSpace, variant_name: str) -> VariantTrials:
        """The variant's trials in `space` (its experiment: the base with the variant's own optimiser)."""
        variant = space.variants[variant_name]
        return cls(space.experiment_for(variant_name), variant.method, dict(variant.fixed))

    def trial(self, config: Mapping[str, Any] | None = None) -> TrialSpec:
        """The trial Tune's `config` (None: nothing searched) makes of the variant."""
        return TrialSpec.resolve(self.experiment, self.method, self.fixed, config)
