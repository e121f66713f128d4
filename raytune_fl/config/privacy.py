"""The experiment settings a variant may fix or search like a method's hyperparameters, over base's values for that
variant's trials: `privacy.clip_norm`, `privacy.noise_multiplier` and `privacy.target_epsilon` (base.privacy's),
`personalise.finetune_steps` (a "FedAvg + fine-tuning" row beside FedAvg in one table), and the clients' optimiser,
`optimizer.lr`, `optimizer.momentum` and `optimizer.weight_decay` (the variant's optimiser's: the learning rate is
the hyperparameter FL studies tune most, and the one PBT turns into a schedule over rounds).

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
PERSONALISE_PREFIX = "personalise."
FINETUNE_STEPS = Param(
    int,
    0,
    "fine-tuning steps at evaluation (base.personalise.finetune_steps) for this variant's trials",
    name="personalise.finetune_steps",
    ge=0,
)
OPTIMIZER_PREFIX = "optimizer."
# the bounds are OptimizerConfig's, so a value the space accepts is one the trial's experiment accepts
OPTIMIZER_PARAMS: Mapping[str, Param] = hyperparameters(
    Param(float, 0.01, "the clients' SGD learning rate (a schedule's base rate)", name="optimizer.lr", gt=0),
    Param(float, 0.9, "the clients' SGD momentum", name="optimizer.momentum", ge=0, lt=1),
    Param(float, 1e-5, "the clients' SGD weight decay (L2)", name="optimizer.weight_decay", ge=0),
)
# everything a variant may set besides its method's hyperparameters
VARIANT_SETTINGS: Mapping[str, Param] = {**PRIVACY_PARAMS, **hyperparameters(FINETUNE_STEPS), **OPTIMIZER_PARAMS}


def variant_spec(spec: MethodSpec) -> MethodSpec:
    """`spec` with the experiment settings beside its hyperparameters: what a variant's `fixed` and `search` may
    name."""
    return dataclasses.replace(spec, params={**spec.params, **VARIANT_SETTINGS})


def split_settings(values: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the experiment settings among `values`: privacy's, personalise's and optimizer's, the rest: the method's
    hyperparameters)."""
    settings = {k: v for k, v in values.items() if k in VARIANT_SETTINGS}
    return settings, {k: v for k, v in values.items() if k not in VARIANT_SETTINGS}


def with_settings(experiment: ExperimentConfig, values: Mapping[str, Any]) -> ExperimentConfig:
    """`experiment` with a variant's settings: `privacy.<field>` in its privacy section, `personalise.<field>` in
    its personalise section, `optimizer.<field>` in its optimizer section."""
    optimizer = {k.removeprefix(OPTIMIZER_PREFIX): float(v) for k, v in values.items() if k in OPTIMIZER_PARAMS}
    if optimizer:
        experiment = experiment.model_copy(update={"optimizer": experiment.optimizer.model_copy(update=optimizer)})
    personal = {k.removeprefix(PERSONALISE_PREFIX): v for k, v in values.items() if k.startswith(PERSONALISE_PREFIX)}
    if personal:
        section = experiment.personalise.model_copy(update=personal)
        experiment = experiment.model_copy(update={"personalise": section})
    values = {k: v for k, v in values.items() if k in PRIVACY_PARAMS}
    if not values:
        return experiment
    if experiment.privacy is None:  # the space's checks refuse this before Ray; a direct caller learns it here
        raise ValueError(f"{next(iter(values))}: base.privacy is unset; set it to use the privacy settings")
    fields = {name.removeprefix(PREFIX): float(value) for name, value in values.items()}
    # validated again: a variant's target beside a noise multiplier (its own or base's) is one setting too many
    privacy = type(experiment.privacy).model_validate({**experiment.privacy.model_dump(), **fields})
    return experiment.model_copy(update={"privacy": privacy})
