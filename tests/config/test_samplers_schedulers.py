"""tune.sampler and tune.scheduler at config validation: the grid's points (Distribution.grid), and each sampler or
scheduler refused before Ray where it cannot serve, the field named on the error's first line."""

from __future__ import annotations

from importlib.metadata import version

import pytest

from raytune_fl.config import (
    AshaConfig,
    ConfigError,
    HyperbandConfig,
    MedianConfig,
    SchedulerConfig,
    TuneSettings,
    parse_space,
)
from raytune_fl.config.space import grid_size, single_objective_samplers
from tests.support import DELETE, changed_space


def _refused(*changes: tuple[str, object]) -> str:
    with pytest.raises(ConfigError) as caught:
        parse_space(changed_space(*changes))
    return str(caught.value).splitlines()[0]


def test_grid_values_beside_a_range_are_its_points_and_ints_and_choices_are_theirs():
    space = parse_space(
        changed_space(
            ("tune.sampler", "grid"),
            ("variants.full.search", {"mu": {"loguniform": [0.01, 1.0], "grid": ["1e-2", 0.1, 1]}}),
            ("variants.buffered", {"method": "fedbuff", "search": {"buffer_size": {"int": [2, 5]}}}),
            ("variants.picked", {"method": "fedprox", "search": {"mu": {"choice": [0.0, 0.5]}}}),
        )
    )
    mu = space.variants["full"].search["mu"]
    assert mu.grid == [0.01, 0.1, 1] and mu.grid_points == [0.01, 0.1, 1.0]  # text read as the float it is
    assert space.variants["buffered"].search["buffer_size"].grid_points == [2, 3, 4, 5]
    assert space.variants["picked"].search["mu"].grid_points == [0.0, 0.5]
    assert grid_size(space.variants["full"].search) == 3 and grid_size(space.variants["buffered"].search) == 4


@pytest.mark.parametrize(
    ("search", "expected"),
    [
        ({"loguniform": [0.01, 1.0], "grid": [0.001]}, "grid: 0.001 lies outside the loguniform range [0.01, 1.0]"),
        ({"uniform": [0.5, 3.0], "grid": ["big"]}, "grid: 'big' is not a number"),
        ({"uniform": [0.5, 3.0], "grid": []}, "grid: give at least one value"),
        ({"uniform": [0.5, 3.0], "grid": [1.0, 1.0]}, "grid: a value is listed twice"),
        ({"choice": [0.5, 1.0], "grid": [0.5]}, "grid: a choice list is already the grid sampler's points"),
    ],
)
def test_grid_values_are_checked_against_their_range(search, expected):
    first = _refused(("variants.full.search", {"lambda": search}))
    assert first.startswith("variants.full.search.lambda") and expected in first, first


def test_an_int_range_takes_integer_grid_values():
    buffered = {"method": "fedbuff", "search": {"buffer_size": {"int": [2, 5], "grid": [2.5]}}}
    first = _refused(("variants.full", buffered))
    assert first.startswith("variants.full.search.buffer_size") and "grid: 2.5 is not an integer" in first, first
    buffered["search"]["buffer_size"]["grid"] = ["2", 5]  # text that is an integer reads as one (YAML 1.1)
    space = parse_space(changed_space(("variants.full", buffered), ("tune.sampler", "grid")))
    assert space.variants["full"].search["buffer_size"].grid_points == [2, 5]


def test_other_samplers_ignore_grid_values():
    space = parse_space(changed_space(("variants.full.search.mu", {"loguniform": [0.01, 1.0], "grid": [0.1]})))
    assert space.tune.sampler == "tpe" and space.variants["full"].search["mu"].grid == [0.1]


def test_the_grid_sampler_refuses_a_range_without_points_naming_the_variant_and_hyperparameter():
    first = _refused(("tune.sampler", "grid"))  # tiny_space's full: mu and lambda over plain ranges
    assert first.startswith("tune.sampler: grid needs points for every searched hyperparameter; variant 'full' ")
    assert "searches mu over a continuous range without grid: values" in first
    wide = ("variants.full", {"method": "fedbuff", "search": {"buffer_size": {"int": [1, 40]}}})
    assert "searches buffer_size over more than 32 integers" in _refused(("tune.sampler", "grid"), wide)


def test_cmaes_refuses_a_variant_that_searches_only_choices_and_several_objectives():
    only_choices = ("variants.full.search", {"mu": {"choice": [0.1, 0.5]}})
    first = _refused(("tune.sampler", "cmaes"), only_choices)
    assert first.startswith("tune.sampler: cmaes moves numbers, and variant 'full' searches only choice lists (mu)")
    assert parse_space(changed_space(("tune.sampler", "cmaes"))).tune.sampler == "cmaes"  # numbers: fine
    several = [{"val_acc": "max"}, {"val_loss": "min"}]
    with pytest.raises(ValueError, match=r"sampler: cmaes optimises one objective, and tune.metric lists 2"):
        TuneSettings(sampler="cmaes", metric=several)
    for sampler in ("tpe", "random", "grid", "qmc"):
        assert TuneSettings(sampler=sampler, metric=several).multi_objective
    # Optuna's GPSampler takes several objectives from 4.4 (pyproject.toml admits 4.0: the lower-bounds run)
    new_enough = tuple(int(part) for part in version("optuna").split(".")[:2]) >= (4, 4)
    assert ("gp" in single_objective_samplers()) is not new_enough
    if new_enough:
        assert TuneSettings(sampler="gp", metric=several).multi_objective
    else:
        with pytest.raises(ValueError, match=r"sampler: gp optimises one objective"):
            TuneSettings(sampler="gp", metric=several)


def test_a_named_scheduler_replaces_the_default_asha_and_at_most_one_is_given():
    assert SchedulerConfig().chosen == AshaConfig() and TuneSettings().scheduler_name == "asha"
    hyperband = SchedulerConfig.model_validate({"hyperband": {}})
    assert hyperband.asha is None and hyperband.chosen == HyperbandConfig(reduction_factor=3.0)
    median = TuneSettings.model_validate({"scheduler": {"median": {"grace_period": 2}}})
    assert median.early_stopping == MedianConfig(grace_period=2) and median.scheduler_name == "median"
    assert TuneSettings.model_validate({"scheduler": {"asha": None}}).scheduler_name == "none"
    first = _refused(("tune.scheduler", {"asha": {}, "hyperband": {}}))
    assert first.startswith("tune.scheduler.hyperband: give at most one scheduler (got asha, hyperband)"), first
    assert "got hyperband, median" in _refused(("tune.scheduler", {"hyperband": {}, "median": {}}))


@pytest.mark.parametrize("name", ["asha", "hyperband", "median"])
def test_a_named_scheduler_is_refused_with_several_objectives_and_the_default_gives_way(name):
    several = [{"val_acc": "max"}, {"val_loss": "min"}]
    first = _refused(("tune.metric", several), ("tune.scheduler", {name: {}}))
    assert first.startswith(f"tune.scheduler.{name}: ") and "tune.metric lists 2" in first, first
    settings = parse_space(changed_space(("tune.metric", several), ("tune.scheduler", DELETE))).tune
    assert settings.early_stopping is None and settings.scheduler_name == "none"


def test_median_grace_defaults_to_80_percent_of_the_rounds():
    assert [MedianConfig().grace(rounds) for rounds in (1, 5, 10)] == [1, 4, 8]
    assert MedianConfig(grace_period=30).grace(10) == 10
