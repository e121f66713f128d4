"""Population-based training over rounds (tune.scheduler.pbt): the search ranges as Ray's mutation space (PBT) or
bounds (PB2, explore: bandit), new values kept in their ranges, and a trial's last round left alone."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ray import tune
from ray.tune.schedulers import PopulationBasedTraining, TrialScheduler
from ray.tune.schedulers.pb2 import PB2

from raytune_fl.config import Distribution, PbtConfig
from raytune_fl.metrics import ROUND


def tune_domain(spec: Distribution) -> Any:
    """The range as Ray Tune's domain (what PBT draws and resamples from); an int range includes its high end."""
    if spec.loguniform is not None:
        return tune.loguniform(*spec.loguniform)
    if spec.uniform is not None:
        return tune.uniform(*spec.uniform)
    if spec.int is not None:
        low, high = spec.int
        return tune.randint(low, high + 1)
    return tune.choice(list(spec.choice or []))


def mutations(search: Mapping[str, Distribution]) -> dict[str, Any]:
    """PBT's hyperparam_mutations: a numeric range as its domain (perturbed by a factor, or drawn afresh), a choice
    as its list (a step to a neighbouring value, or drawn afresh)."""
    return {name: list(spec.choice) if spec.choice is not None else tune_domain(spec) for name, spec in search.items()}


def within_ranges(search: Mapping[str, Distribution]) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """PBT's custom_explore_fn: a perturbed value (x 1.2 of a range's high end) clipped back into its range, so the
    method's checks (config/space.py holds the ranges' ends to them) never refuse what PBT proposes; an int range's
    value rounded (Ray rounds only a Python int, and its draws are numpy's)."""

    def clip(config: dict[str, Any]) -> dict[str, Any]:
        clipped = dict(config)
        for name, spec in search.items():
            if name not in clipped or spec.choice is not None:
                continue
            low, high = spec.loguniform or spec.uniform or spec.int or (0, 0)
            value = min(max(float(clipped[name]), low), high)
            clipped[name] = int(round(value)) if spec.int is not None else value
        return clipped

    return clip


class _LastRoundLeftAlone:
    """Ray's PBT (or PB2), leaving a trial's last round alone: a perturbation there would restart the trial from a
    copied state with no round left to run, and its result would be one trial's while its checkpoint is another's."""

    def __init__(self, rounds: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.rounds = rounds

    def on_trial_result(self, tune_controller: Any, trial: Any, result: dict[str, Any]) -> str:
        if result.get(ROUND, 0) >= self.rounds:
            return TrialScheduler.CONTINUE
        return str(super().on_trial_result(tune_controller, trial, result))  # type: ignore[misc]


class RoundsPBT(_LastRoundLeftAlone, PopulationBasedTraining):
    """PBT over rounds: a copying trial perturbs the copied values by a factor, or draws them afresh."""


class RoundsPB2(_LastRoundLeftAlone, PB2):
    """PB2 over rounds (Parker-Holder et al., 2020): a time-varying GP bandit, fitted to the population's change in
    the metric per round, picks a copying trial's new values within the ranges."""


def bounds(search: Mapping[str, Distribution]) -> dict[str, list[float]]:
    """PB2's hyperparam_bounds: each numeric range's ends (PB2 rescales them linearly to [0, 1] for its GP)."""
    return {name: list(spec.loguniform or spec.uniform or spec.int or ()) for name, spec in search.items()}


def make_pbt(pbt: PbtConfig, search: Mapping[str, Distribution], rounds: int) -> PopulationBasedTraining:
    """Synchronous PBT (or PB2) on rounds: a trial that reaches a perturbation waits (paused, its resources freed)
    until the whole population has, so the population advances together whatever the concurrency."""
    common: dict[str, Any] = {
        "time_attr": ROUND,
        "perturbation_interval": pbt.interval,
        "quantile_fraction": pbt.quantile,
        "custom_explore_fn": within_ranges(search),
        "log_config": False,  # the schedule is in each trial's checkpoint and metrics (tune/trainable.py)
        "synch": True,
    }
    if pbt.explore == "bandit":
        return RoundsPB2(rounds, hyperparam_bounds=bounds(search), **common)
    return RoundsPBT(
        rounds,
        hyperparam_mutations=mutations(search),
        resample_probability=pbt.resample_probability,
        perturbation_factors=pbt.perturbation_factors,
        **common,
    )
