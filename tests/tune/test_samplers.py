"""Each variant's sampler (tune.sampler: tpe, random, grid, gp, cmaes, qmc), seeded per variant from (tune.seed,
variant name), and resumable: Tune's restore of the OptunaSearch state (its pickled sampler and study) continues the
proposals an uninterrupted search would have made."""

from __future__ import annotations

import optuna
import pytest
from pydantic import ValidationError
from ray.tune.search.optuna import OptunaSearch

from raytune_fl.config import Distribution, TuneSettings
from raytune_fl.tune.search import TellOnlyGridSampler, make_sampler, sampler_seed, tpe_startup_trials
from raytune_fl.tune.space import optuna_space


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
        TuneSettings(sampler="bohb")


def test_asha_grace_period_defaults_to_80_percent_of_the_rounds():
    from raytune_fl.config import AshaConfig

    default = AshaConfig()
    assert [default.grace(rounds) for rounds in (1, 2, 5, 10, 35, 100)] == [1, 2, 4, 8, 28, 80]
    assert AshaConfig(grace_period=3).grace(10) == 3 and AshaConfig(grace_period=30).grace(10) == 10


# two numbers and a choice: every sampler has something to move (CMA-ES and GP the numbers); a grid of 3 x 2 x 2
SEARCH = {
    "mu": Distribution(loguniform=(0.01, 1.0), grid=[0.01, 0.1, 1.0]),
    "lambda": Distribution(uniform=(0.5, 3.0), grid=[0.5, 3.0]),
    "eps": Distribution(choice=[0.01, 0.02]),
}
SAMPLERS = ("tpe", "random", "grid", "gp", "cmaes", "qmc")


def _score(config: dict) -> float:
    return -((config["mu"] - 0.1) ** 2) - (config["lambda"] - 2.0) ** 2 + config["eps"]


def _searcher(sampler: str, num_samples: int = 6) -> OptunaSearch:
    settings = TuneSettings(sampler=sampler, num_samples=num_samples)
    return OptunaSearch(
        space=optuna_space(SEARCH),
        metric="val_acc",
        mode="max",
        sampler=make_sampler(settings, "full", num_samples, SEARCH),
    )


def _propose(searcher: OptunaSearch, first: int, count: int) -> list[dict]:
    """`count` configurations, each told its score before the next is asked (as one trial at a time runs)."""
    configs = []
    for index in range(first, first + count):
        config = searcher.suggest(f"t{index}")
        searcher.on_trial_complete(f"t{index}", {"val_acc": _score(config)})
        configs.append(config)
    return configs


@pytest.mark.parametrize("sampler", SAMPLERS)
def test_a_restored_search_proposes_what_an_uninterrupted_one_would(sampler, tmp_path):
    before, after = 3, 3
    uninterrupted = _propose(_searcher(sampler), 0, before + after)
    interrupted = _searcher(sampler)
    assert _propose(interrupted, 0, before) == uninterrupted[:before]
    interrupted.save(str(tmp_path / "searcher.pkl"))
    restored = _searcher(sampler)  # a fresh searcher, as Tune's restore makes it, then given the saved state
    restored.restore(str(tmp_path / "searcher.pkl"))
    assert _propose(restored, before, after) == uninterrupted[before:]
    if sampler == "grid":  # every point once: the grid's 3 x 2 x 2 points in 12 trials, none repeated
        whole = _propose(restored, before + after, 6)
        points = {(c["mu"], c["lambda"], c["eps"]) for c in uninterrupted + whole}
        assert len(points) == 12 and points == {
            (mu, lam, eps) for mu in (0.01, 0.1, 1.0) for lam in (0.5, 3.0) for eps in (0.01, 0.02)
        }


@pytest.mark.parametrize("sampler", SAMPLERS)
def test_each_sampler_is_the_one_named_and_seeded_per_variant(sampler):
    settings = TuneSettings(sampler=sampler)
    kinds = {
        "tpe": optuna.samplers.TPESampler,
        "random": optuna.samplers.RandomSampler,
        "grid": TellOnlyGridSampler,
        "gp": optuna.samplers.GPSampler,
        "cmaes": optuna.samplers.CmaEsSampler,
        "qmc": optuna.samplers.QMCSampler,
    }
    assert isinstance(make_sampler(settings, "full", 8, SEARCH), kinds[sampler])
    first = _propose(_searcher(sampler), 0, 4)
    assert first == _propose(_searcher(sampler), 0, 4)  # reproducible
    other = OptunaSearch(
        space=optuna_space(SEARCH), metric="val_acc", mode="max", sampler=make_sampler(settings, "other", 6, SEARCH)
    )
    assert _propose(other, 0, 4) != first  # another variant, other draws (the grid: another order)


def test_the_grid_takes_choices_grid_values_and_every_integer_of_a_small_int_range():
    search = {
        "mu": Distribution(loguniform=(0.01, 1.0), grid=[0.01, 1]),
        "local_epochs": Distribution(int=(1, 3)),
        "eps": Distribution(choice=["a", 0.5]),
    }
    sampler = make_sampler(TuneSettings(sampler="grid"), "v", 1, search)
    assert sampler._search_space == {"eps": ["a", 0.5], "local_epochs": [1, 2, 3], "mu": [0.01, 1.0]}
    assert all(isinstance(v, float) for v in sampler._search_space["mu"])  # a float range's points as floats
    study = optuna.create_study(sampler=sampler)
    for _ in range(12):  # the grid's size: each point once, and no study.stop() raised from the last tell
        trial = study.ask(optuna_space(search))
        study.tell(trial, 0.0)
    assert len({tuple(sorted(t.params.items(), key=str)) for t in study.trials}) == 12
