"""tune.scheduler.pbt's settings, refused before Ray with the field named first, and the schedule a PBT trial runs
(config/schedule.py): its segments, inherited and appended, and their JSON."""

from __future__ import annotations

import pytest

from raytune_fl.config import ConfigError, ParamSchedule, Segment, parse_space
from tests.support import tiny_space


def _space(pbt=None, rounds: int = 4, **tune):
    data = tiny_space("pbt_settings", rounds=rounds, resources={"actors": 0})
    data["tune"] = {"num_samples": 4, "scheduler": {"pbt": {} if pbt is None else pbt}, **tune}
    return parse_space(data)


def test_pbt_takes_the_schedulers_place_with_its_defaults():
    space = _space()
    pbt = space.tune.scheduler.pbt
    assert pbt is not None and (pbt.interval, pbt.quantile, pbt.resample_probability) == (2, 0.25, 0.25)
    assert space.tune.scheduler.asha is None and space.tune.early_stopping is None  # ASHA gives way
    assert parse_space(tiny_space()).tune.scheduler.pbt is None  # off unless asked for


@pytest.mark.parametrize(
    ("pbt", "tune", "rounds", "first_line"),
    [
        ({}, {"metric": ["val_acc", "client_acc_worst"]}, 4, "tune.scheduler.pbt: PBT ranks trials by one number"),
        ({}, {"num_samples": 1}, 4, "tune.scheduler.pbt: a population of num_samples 1"),
        ({}, {"sampler": "tpe"}, 4, "tune.scheduler.pbt: Ray's PBT draws its first population at random"),
        ({"interval": 4}, {}, 4, "tune.scheduler.pbt.interval: 4 rounds between perturbations"),
        ({"quantile": 0.75}, {}, 4, "tune.scheduler.pbt.quantile"),
        ({"perturbation_factors": [1.2, -0.8]}, {}, 4, "tune.scheduler.pbt.perturbation_factors"),
        ({"explore": "bandit", "resample_probability": 0.5}, {}, 4, "tune.scheduler.pbt.resample_probability: "),
        ({"explore": "bandit", "perturbation_factors": [1.1, 0.9]}, {}, 4, "tune.scheduler.pbt.perturbation_factors: "),
        ({"explore": "thompson"}, {}, 4, "tune.scheduler.pbt.explore"),
    ],
)
def test_a_pbt_that_cannot_serve_is_refused_naming_the_field(pbt, tune, rounds, first_line):
    if "metric" in tune:
        tune = {**tune, "scheduler": {"pbt": pbt}}
    with pytest.raises(ConfigError) as refused:
        _space(pbt, rounds, **tune)
    assert str(refused.value).startswith(first_line), str(refused.value)


def test_asha_beside_pbt_is_refused_and_random_sampling_is_accepted():
    with pytest.raises(ConfigError, match=r"^tune\.scheduler(\.pbt)?: .*one scheduler at a time"):
        _space(scheduler={"pbt": {}, "asha": {}})
    assert _space(sampler="random").tune.scheduler.pbt is not None


def test_an_interval_the_checkpoints_miss_is_refused():
    data = tiny_space("pbt_settings", rounds=6, resources={"actors": 0}, checkpoint_every=2)
    data["tune"] = {"num_samples": 4, "scheduler": {"pbt": {"interval": 3}}}
    with pytest.raises(ConfigError, match=r"^tune\.scheduler\.pbt\.interval: .*base\.checkpoint_every 2"):
        parse_space(data)
    data["tune"]["scheduler"]["pbt"]["interval"] = 4
    assert parse_space(data).tune.scheduler.pbt.interval == 4


def test_a_clone_inherits_its_donors_segments_and_appends_its_own():
    donor = ParamSchedule().then(1, {"lr": 0.1}).then(3, {"lr": 0.1})  # resumed unchanged: still one segment
    assert donor.segments == (Segment(1, {"lr": 0.1}),) and donor.constant
    clone = donor.then(5, {"lr": 0.05})
    assert clone.segments == (Segment(1, {"lr": 0.1}), Segment(5, {"lr": 0.05})) and not clone.constant
    assert clone.in_force(4) == {"lr": 0.1} and clone.in_force(5) == {"lr": 0.05}
    # a restart from an earlier checkpoint drops the segments it runs again
    assert clone.then(3, {"lr": 0.2}).segments == (Segment(1, {"lr": 0.1}), Segment(3, {"lr": 0.2}))
    assert clone.spans(8) == [(Segment(1, {"lr": 0.1}), 4), (Segment(5, {"lr": 0.05}), 8)]
    assert ParamSchedule.from_json(clone.to_json()) == clone
    import dataclasses

    assert ParamSchedule.of(dataclasses.asdict(clone)) == clone  # as a study manifest stores it
    assert clone.describe() == "rounds 1-: lr=0.1; rounds 5-: lr=0.05"


def test_numpy_draws_are_kept_as_plain_numbers():
    import numpy as np

    schedule = ParamSchedule().then(1, {"k": np.int64(3), "lr": np.float64(0.5), "kind": "a"})
    values = schedule.segments[0].params
    assert type(values["k"]) is int and type(values["lr"]) is float and values["kind"] == "a"
    assert schedule.to_json() == '[[1, {"k": 3, "kind": "a", "lr": 0.5}]]'


def test_pb2_fits_numeric_ranges_only_and_says_which_choice_it_cannot():
    assert _space({"explore": "bandit"}).tune.scheduler.pbt.shown == "PB2"
    data = tiny_space("pbt_settings", rounds=4, resources={"actors": 0})
    data["variants"]["full"]["search"]["include_diagonal"] = {"choice": [True, False]}
    data["tune"] = {"num_samples": 4, "scheduler": {"pbt": {"explore": "bandit"}}}
    with pytest.raises(
        ConfigError, match=r"^tune\.scheduler\.pbt\.explore: bandit .*variant 'full' searches include_diagonal"
    ):
        parse_space(data)
    data["tune"]["scheduler"]["pbt"]["explore"] = "perturb"  # PBT steps a choice to a neighbour
    assert parse_space(data).tune.scheduler.pbt.shown == "PBT"
