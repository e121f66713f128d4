"""PBT over rounds without a Ray cluster: the mutation space Ray perturbs (kept inside the searched ranges), and the
trainable's schedule: a trial restarted as PBT restarts it (a checkpoint, new values) keeps its donor's schedule and
appends its own, and an ablation's replay of that schedule reproduces the trial's rounds."""

from __future__ import annotations

import contextlib
import random
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
from ray.tune.schedulers import PopulationBasedTraining
from ray.tune.schedulers.pb2 import PB2
from ray.tune.schedulers.pbt import _explore
from ray.tune.search import BasicVariantGenerator

from raytune_fl.config import Distribution, ParamSchedule, Segment, VariantTrials, parse_space
from raytune_fl.metrics import ROUND, TEST_ACC, TRAIN_LOSS, VAL_ACC, VAL_LOSS
from raytune_fl.tune import trainable as trainable_module
from raytune_fl.tune.pbt import bounds, mutations, within_ranges
from raytune_fl.tune.search import make_search
from tests.support import tiny_space

SEARCH = {
    "mu": Distribution(loguniform=(0.01, 1.0)),
    "lambda": Distribution(uniform=(0.5, 3.0)),
    "k": Distribution(int=(1, 4)),
    "kind": Distribution(choice=["a", "b", "c"]),
}


def _pbt_space(**pbt):
    data = tiny_space("pbt_unit", rounds=4, resources={"actors": 0})
    data["tune"] = {"num_samples": 3, "scheduler": {"pbt": pbt}, "seed": 0}
    return parse_space(data)


def test_a_pbt_space_gets_rays_random_population_and_synchronous_pbt_on_rounds():
    search = make_search(_pbt_space(interval=2, quantile=0.5), "full", "stamp")
    assert isinstance(search.algorithm, BasicVariantGenerator) and search.optuna_study is None
    assert isinstance(search.scheduler, PopulationBasedTraining) and search.pbt and not search.may_stop_early
    assert search.scheduler._time_attr == ROUND and search.scheduler._perturbation_interval == 2
    assert search.scheduler._synch and search.scheduler._quantile_fraction == 0.5
    assert set(search.param_space or {}) == {"mu", "lambda"} == set(search.scheduler._hyperparam_mutations)
    assert search.num_samples == 3 and search.checkpoints_kept == 4  # the donor may run an interval ahead
    # no perturbation at the last round: a copied state would have no round left to run
    assert search.scheduler.on_trial_result(None, object(), {ROUND: 4, "val_acc": 0.5}) == "CONTINUE"
    # a variant that searches nothing still runs once, without PBT
    once = make_search(_pbt_space(), "fedavg", "stamp")
    assert once.algorithm is None and once.num_samples == 1 and not once.pbt


def test_pb2_gets_the_ranges_as_bounds_and_the_same_synchronous_rounds():
    search = make_search(_pbt_space(interval=2, quantile=0.5, explore="bandit"), "full", "stamp")
    scheduler = search.scheduler
    assert isinstance(scheduler, PB2) and search.pbt and isinstance(search.algorithm, BasicVariantGenerator)
    assert scheduler._hyperparam_bounds == {"mu": [0.01, 1.0], "lambda": [0.5, 3.0]}
    assert scheduler._time_attr == ROUND and scheduler._synch and scheduler._quantile_fraction == 0.5
    assert scheduler.on_trial_result(None, object(), {ROUND: 4, "val_acc": 0.5}) == "CONTINUE"
    assert bounds({"k": Distribution(int=(1, 4))}) == {"k": [1, 4]}


def test_perturbed_values_stay_in_their_ranges_and_keep_their_types():
    random.seed(0)
    clip = within_ranges(SEARCH)
    space = mutations(SEARCH)
    assert space["kind"] == ["a", "b", "c"]
    import numpy as np

    config = {"mu": 1.0, "lambda": 0.5, "k": np.int64(4), "kind": "c"}  # at the ends, as Ray's draws come (numpy)
    seen = {name: set() for name in SEARCH}
    for _ in range(200):
        new, _ops = _explore(config, space, 0.25, (1.2, 0.8), clip)
        assert 0.01 <= new["mu"] <= 1.0 and 0.5 <= new["lambda"] <= 3.0
        assert type(new["k"]) is int and 1 <= new["k"] <= 4 and new["kind"] in ("a", "b", "c")
        for name in SEARCH:
            seen[name].add(new[name])
    # it does perturb: below the top of mu, above the bottom of lambda, other ints and choices
    assert min(seen["mu"]) < 1.0 and max(seen["lambda"]) > 0.5 and len(seen["k"]) > 1 and len(seen["kind"]) > 1


class _Checkpoint:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    @classmethod
    def from_directory(cls, path: str) -> _Checkpoint:
        return cls(path)

    @contextlib.contextmanager
    def as_directory(self):
        yield str(self.path)


class _Paused(Exception):
    """Tune pausing the trial (PBT's synchronous wait) after a round."""


class _Tune:
    """What the trainable calls of Ray Tune, in this process: it keeps each checkpoint, and pauses after
    `pause_after` rounds as PBT does at a perturbation."""

    Checkpoint = _Checkpoint

    def __init__(self, keep: Path, start: _Checkpoint | None = None, pause_after: int | None = None) -> None:
        self.keep, self.start, self.pause_after = keep, start, pause_after
        self.results: list[dict] = []
        self.checkpoints: dict[int, _Checkpoint] = {}

    def get_checkpoint(self) -> _Checkpoint | None:
        return self.start

    def report(self, metrics: dict, checkpoint: _Checkpoint | None = None) -> None:
        self.results.append(dict(metrics))
        if checkpoint is not None:
            kept = self.keep / f"round{metrics[ROUND]}"
            shutil.copytree(checkpoint.path, kept)
            self.checkpoints[metrics[ROUND]] = _Checkpoint(kept)
        if metrics[ROUND] == self.pause_after:
            raise _Paused


def _run(monkeypatch, fake: _Tune, config: dict, trials: VariantTrials, **kwargs) -> _Tune:
    monkeypatch.setattr(trainable_module, "tune", fake)
    monkeypatch.setattr(trainable_module, "ray", SimpleNamespace(get_gpu_ids=lambda: []))
    with contextlib.suppress(_Paused):
        trainable_module.federated_trial(config, trials=trials, scheduled=True, **kwargs)
    return fake


COMPARED = (ROUND, VAL_ACC, VAL_LOSS, TEST_ACC, TRAIN_LOSS, "hp.mu", "hp.lambda")


def _rows(results: list[dict]) -> list[dict]:
    return [{k: r[k] for k in COMPARED} for r in results]


@pytest.fixture(scope="module")
def trials() -> VariantTrials:
    space = parse_space(tiny_space("pbt_replay", rounds=4, resources={"actors": 0}))
    return VariantTrials(space.experiment_for("full"), "univarfl", {})


def test_a_restarted_trial_inherits_its_donors_schedule_and_a_replay_reproduces_its_rounds(
    monkeypatch, tmp_path, trials
):
    first, second = {"mu": 0.5, "lambda": 2.0}, {"mu": 0.05, "lambda": 1.0}
    donor = _run(monkeypatch, _Tune(tmp_path / "donor", pause_after=2), first, trials)
    assert [r[ROUND] for r in donor.results] == [1, 2] and donor.results[-1]["hp.mu"] == 0.5
    # PBT copies the donor's round-2 checkpoint into the worse trial and restarts it with perturbed values
    clone = _run(monkeypatch, _Tune(tmp_path / "clone", start=donor.checkpoints[2]), second, trials)
    assert [r[ROUND] for r in clone.results] == [3, 4]
    assert [r["hp.mu"] for r in clone.results] == [0.05, 0.05]
    with clone.checkpoints[4].as_directory() as directory:
        schedule = trainable_module.read_schedule(directory)
    assert schedule == ParamSchedule((Segment(1, first), Segment(3, second)))
    # a donor paused and resumed with its own values keeps one segment
    resumed = _run(monkeypatch, _Tune(tmp_path / "resumed", start=donor.checkpoints[2]), first, trials)
    with resumed.checkpoints[4].as_directory() as directory:
        assert trainable_module.read_schedule(directory) == ParamSchedule((Segment(1, first),))
    # the ablation's replay at the tuning seed: the same rounds, value for value
    replay = _Tune(tmp_path / "replay")
    monkeypatch.setattr(trainable_module, "tune", replay)
    trainable_module.federated_trial({}, trials=trials, replay=ParamSchedule.from_json(schedule.to_json()))
    assert _rows(replay.results) == _rows(donor.results + clone.results)
    # ... and it differs from the constant run of its first values (the schedule mattered)
    assert _rows(replay.results)[3] != _rows(donor.results + resumed.results)[3]
    # a replay resumed from its round-3 checkpoint runs round 4 of the second segment only
    rest = _Tune(tmp_path / "rest", start=replay.checkpoints[3])
    monkeypatch.setattr(trainable_module, "tune", rest)
    trainable_module.federated_trial({}, trials=trials, replay=schedule)
    assert _rows(rest.results) == _rows(replay.results)[3:]


def test_an_unscheduled_trial_reports_no_hp_metrics_and_writes_no_schedule(monkeypatch, tmp_path, trials):
    fake = _Tune(tmp_path / "plain")
    monkeypatch.setattr(trainable_module, "tune", fake)
    monkeypatch.setattr(trainable_module, "ray", SimpleNamespace(get_gpu_ids=lambda: []))
    trainable_module.federated_trial({"mu": 0.5, "lambda": 2.0}, trials=trials)
    assert [r[ROUND] for r in fake.results] == [1, 2, 3, 4]
    assert not any(k.startswith("hp.") for r in fake.results for k in r)
    assert not (fake.checkpoints[4].path / trainable_module.SCHEDULE_FILE).exists()
