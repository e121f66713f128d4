"""Warm starts: the configurations a study tries before its sampler proposes (OptunaSearch's points_to_evaluate,
Optuna's enqueue_trial underneath), the best finished ones of a source study, fitted to this variant's ranges.

Where they come from is planned before any study runs (`plan`: the source's study must run first); what they are
is known once the source's study has run (`from_outcome`) or, for a study in MLflow, read before Ray starts
(`from_mlflow`). A configuration that does not fit this variant (other hyperparameters, a value outside its range
or choices) is refused (`fitted`), before the variant's Tune run starts and before anything of it is written.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from raytune_fl.config import PREVIOUS_SETTING, ConfigError, Distribution, SearchSpace
from raytune_fl.tracking.schema import (
    RAN_EVERY_ROUND,
    STAGE_TUNE,
    TAG_PARENT_RUN,
    TAG_SEARCHED,
    TAG_STAGE,
    TAG_TRIAL_STATUS,
    decode_value,
    encode_value,
    study_key,
)


class WarmStartError(ConfigError):
    """A warm start's source cannot serve its study: it runs later, or its configurations do not fit."""


@dataclass(frozen=True)
class WarmPoints:
    """The configurations a study is warm-started with, and where they came from."""

    source: str  # as the summary names it: "partition.alpha=0.1", "variant fedavg", "MLflow run 3f2a..."
    configs: tuple[dict[str, Any], ...]
    run_id: str | None = None  # the source study's MLflow parent run, where it has one

    def describe(self) -> str:
        n = len(self.configs)
        return f"{n} configuration{'s' if n != 1 else ''} from {self.source}"


@dataclass(frozen=True)
class WarmPlan:
    """A study's warm start, as planned before any study runs: its source and how many of its best it takes."""

    field: str  # the file's field that asked for it (what a refusal names)
    top: int
    study: str | None  # the study of this run it takes them from (its key); None: an MLflow run
    source: str  # as WarmPoints.source names it
    mlflow_run: str | None = None


def ranked_configs(candidates: Iterable[tuple[bool, float, dict[str, Any]]], maximize: bool) -> list[dict[str, Any]]:
    """The configurations of the trials that ran every round, best first (a tie keeps the earlier trial first);
    a trial stopped early, or without a finite score, never counts: its score is not a final one."""
    sign = 1.0 if maximize else -1.0
    finished = [(sign * value, i, config) for i, (full, value, config) in enumerate(candidates) if full]
    finished = [entry for entry in finished if math.isfinite(entry[0])]
    return [dict(config) for _, _, config in sorted(finished, key=lambda e: (-e[0], e[1]))]


def plan(space: SearchSpace, studies: Sequence[tuple[str, str | None]]) -> dict[str, WarmPlan]:
    """Each warm-started study's plan by its key, for `studies` (variant, setting) in the order the command runs
    them; a source that runs later than its study, or not at all, is refused with the field that names it."""
    keys = [study_key(variant, setting) for variant, setting in studies]
    settings = list(dict.fromkeys(setting for _, setting in studies))
    plans: dict[str, WarmPlan] = {}
    for index, (variant, setting) in enumerate(studies):
        warm, field = space.warm_start_for(variant)
        if warm is None or not space.variants[variant].search:  # a variant that searches nothing runs once
            continue
        key = study_key(variant, setting)
        if warm.mlflow_run is not None:
            plans[key] = WarmPlan(field, warm.top, None, f"MLflow run {warm.mlflow_run}", warm.mlflow_run)
        elif warm.source == PREVIOUS_SETTING:
            at = settings.index(setting)
            if at > 0:  # the first setting (and a study without --per-setting) has none before it
                previous = settings[at - 1]
                plans[key] = WarmPlan(field, warm.top, study_key(variant, previous), str(previous))
        elif warm.source != variant:  # tune.warm_start's own source variant starts cold (config/space.py)
            source = study_key(warm.source, setting)
            if source not in keys:
                raise WarmStartError(
                    f"{field}.from: variant {warm.source!r} is not tuned in this run; add it to --variants, before "
                    f"{variant!r}"
                )
            if keys.index(source) > index:
                order = ", ".join(dict.fromkeys(v for v, _ in studies))
                raise WarmStartError(
                    f"{field}.from: variant {warm.source!r} is tuned after {variant!r} (the variants run in the "
                    f"order {order}); list {warm.source!r} first (in the file, or in --variants)"
                )
            plans[key] = WarmPlan(field, warm.top, source, f"variant {warm.source}")
    return plans


def fitted(points: WarmPoints, search: dict[str, Distribution], plan: WarmPlan, study: str) -> WarmPoints:
    """`points` as `study`'s `search` holds them (a choice as its own value); refused (a ConfigError naming the
    field, the study and the hyperparameter) where one sets other hyperparameters or a value outside a range or the
    choices."""
    configs = []
    for config in points.configs:
        _same_names(config, search, plan, study)
        configs.append({name: _fitted_value(name, config[name], search[name], plan, study) for name in search})
    return WarmPoints(points.source, tuple(configs), points.run_id)


def _same_names(searched: Iterable[str], search: dict[str, Distribution], plan: WarmPlan, study: str) -> None:
    if sorted(searched) != sorted(search):
        raise WarmStartError(
            f"{plan.field}.from: {plan.source} searched {', '.join(sorted(searched)) or 'nothing'}, study {study!r} "
            f"searches {', '.join(sorted(search))}: its configurations do not fit; warm-start from a study of the "
            "same hyperparameters"
        )


def _fitted_value(name: str, value: Any, spec: Distribution, plan: WarmPlan, study: str) -> Any:
    kind = spec.kind
    if kind == "choice":
        for choice in spec.choice or []:  # by their encoding: 1 and True, 1 and 1.0 are different choices
            if encode_value(choice) == encode_value(value):
                return choice
        fits = False
    else:
        low, high = getattr(spec, kind)
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        fits = number and low <= value <= high and (kind != "int" or float(value).is_integer())
        if fits:
            return int(value) if kind == "int" else float(value)
    raise WarmStartError(
        f"{plan.field}.from: {plan.source} tried {name}={value!r}, outside the {kind} {list(getattr(spec, kind))} "
        f"study {study!r} searches; widen its search.{name}, or warm-start from a study of the same ranges"
    )


def from_outcome(plan: WarmPlan, ranked: Sequence[dict[str, Any]], run_id: str | None) -> WarmPoints:
    """The top of a study of this run (its outcome's ranked configurations)."""
    return WarmPoints(plan.source, tuple(dict(c) for c in ranked[: plan.top]), run_id)


def from_mlflow(
    uri: str, plan: WarmPlan, search: dict[str, Distribution], study: str, metric: str, maximize: bool
) -> WarmPoints:
    """The top of a finished study in MLflow, fitted to `study`'s `search`: its parent run's trial runs that ran
    every round, ranked by their last `metric`; refused (ConfigError naming the field) where the run is no tune
    study's parent, or its study searched other hyperparameters (said even where none of its trials finished)."""
    from raytune_fl.tracking import store  # MLflow: imported where a study in it is the source

    run_id, where = plan.mlflow_run or "", f"{plan.field}.from"
    try:
        parent, trials = store.study_with_trials(uri, run_id)
    except LookupError as error:
        raise WarmStartError(f"{where}: {error}") from None
    tags = parent.data.tags
    if tags.get(TAG_STAGE) != STAGE_TUNE or TAG_PARENT_RUN in tags:
        raise WarmStartError(f"{where}: MLflow run {run_id} is not a tune study's parent run (its variant's study)")
    searched = [name for name in tags.get(TAG_SEARCHED, "").split(",") if name and name != "(none)"]
    candidates = [
        (True, float(run.data.metrics[metric]), _searched_values(run.data.params, searched))
        for run in trials
        if run.data.tags.get(TAG_TRIAL_STATUS) in RAN_EVERY_ROUND and metric in run.data.metrics
    ]
    _same_names(searched, search, plan, study)
    points = WarmPoints(plan.source, tuple(ranked_configs(candidates, maximize)[: plan.top]), run_id)
    return fitted(points, search, plan, study)


def _searched_values(params: dict[str, str], searched: Sequence[str]) -> dict[str, Any]:
    """A trial run's searched values, from their MLflow text (the params codec: strings raw, the rest JSON)."""
    return {name: decode_value(params.get(name, "")) for name in searched}
