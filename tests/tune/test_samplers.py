"""Each variant's sampler: TPE or random (tune.sampler), seeded per variant from (tune.seed, variant name)."""

from __future__ import annotations

import optuna
import pytest
from pydantic import ValidationError

from raytune_fl.config import TuneSettings
from raytune_fl.tune.search import make_sampler, sampler_seed, tpe_startup_trials


def _first_proposals(sampler: optuna.samplers.BaseSampler, count: int = 3) -> list[float]:
    study = optuna.create_study(sampler=sampler, direction="maximize")
    values = []
    for _ in range(count):
        trial = study.ask({"mu": optuna.distributions.FloatDistribution(0.01, 5.0, log=True)})
        values.append(trial.params["mu"])
        study.tell(trial, 0.5)
    return values


def test_variants_get_their_own_seeds_and_the_same_variant_the_same_one():
    assert sampler_seed(0, "full") == sampler_seed(0, "full")
    assert sampler_seed(0, "full") != sampler_seed(0, "only_variance")
    assert sampler_seed(0, "full") != sampler_seed(1, "full")
    settings = TuneSettings()
    full = _first_proposals(make_sampler(settings, "full", 16))
    assert full == _first_proposals(make_sampler(settings, "full", 16))  # reproducible
    assert full != _first_proposals(make_sampler(settings, "only_variance", 16))  # not the same draws


def test_tpe_is_the_default_and_random_is_an_option():
    tpe = make_sampler(TuneSettings(), "v", 16)
    assert isinstance(tpe, optuna.samplers.TPESampler) and tpe._n_startup_trials == tpe_startup_trials(16) == 5
    assert isinstance(make_sampler(TuneSettings(sampler="random"), "v", 16), optuna.samplers.RandomSampler)
    with pytest.raises(ValidationError, match="sampler"):
        TuneSettings(sampler="grid")


def test_asha_grace_period_defaults_to_80_percent_of_the_rounds():
    from raytune_fl.config import AshaConfig

    default = AshaConfig()
    assert [default.grace(rounds) for rounds in (1, 2, 5, 10, 35, 100)] == [1, 2, 4, 8, 28, 80]
    assert AshaConfig(grace_period=3).grace(10) == 3 and AshaConfig(grace_period=30).grace(10) == 10
