"""The privacy settings a variant may fix or search like a method's hyperparameters: `privacy.clip_norm` and
`privacy.noise_multiplier` in a variant's `fixed` or `search`, over base.privacy's values for that variant's trials.

They are declared as `Param`s, so the search-space checks, the samplers and the records treat them as they treat a
method's own; `TrialSpec.resolve` moves them into the trial's experiment (its `privacy` section), which is where the
engine reads them and what a trial's MLflow params show (`privacy.clip_norm` is the flattened section's own name).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from raytune_fl.config.experiment import ExperimentConfig
from raytune_fl.methods.base import MethodSpec, Param, hyperparameters

PREFIX = "privacy."
PRIVACY_PARAMS: Mapping[str, Param] = hyperparameters(
    Param(
        float, 1.0, "the clip norm (base.privacy.clip_norm) for this variant's trials", name="privacy.clip_norm", gt=0
    ),
    Param(
        float,
        1.0,
        "the noise multiplier (base.privacy.noise_multiplier) for this variant's trials",
        name="privacy.noise_multiplier",
        ge=0,
    ),
    # fixed per variant, a budget per row: one table puts epsilon = 2, 8 and no noise side by side
    Param(
        float,
        8.0,
        "the target epsilon (base.privacy.target_epsilon) for this variant's trials: the noise follows from it",
        name="privacy.target_epsilon",
        gt=0,
    ),
)


def variant_spec(spec: MethodSpec) -> MethodSpec:
    """`spec` with the privacy settings beside its hyperparameters: what a variant's `fixed` and `search` may name."""
    return dataclasses.replace(spec, params={**spec.params, **PRIVACY_PARAMS})


def split_privacy(values: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the privacy settings among `values`, the rest: the method's hyperparameters)."""
    private = {k: v for k, v in values.items() if k in PRIVACY_PARAMS}
    return private, {k: v for k, v in values.items() if k not in PRIVACY_PARAMS}


def with_privacy(experiment: ExperimentConfig, values: Mapping[str, Any]) -> ExperimentConfig:
    """`experiment` with a variant's privacy settings (`privacy.<field>`: value) in its privacy section."""
    if not values:
        return experiment
    if experiment.privacy is None:  # the space's checks refuse this before Ray; a direct caller learns it here
        raise ValueError(f"{next(iter(values))}: base.privacy is unset; set it to use the privacy settings")
    fields = {name.removeprefix(PREFIX): float(value) for name, value in values.items()}
    # validated again: a variant's target beside a noise multiplier (its own or base's) is one setting too many
    privacy = type(experiment.privacy).model_validate({**experiment.privacy.model_dump(), **fields})
    return experiment.model_copy(update={"privacy": privacy})
