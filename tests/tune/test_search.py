"""tune/search.py: what proposes and stops a variant's trials, from the space alone (no Ray cluster)."""

from __future__ import annotations

import optuna
from ray.tune.schedulers import ASHAScheduler, FIFOScheduler

from raytune_fl.config import parse_space
from raytune_fl.runtime import optuna_storage as optuna_db
from raytune_fl.tune.search import Resumed, make_search
from tests.support import tiny_space


def _space(asha: bool = True):
    data = tiny_space()
    data["tune"] = {**data.get("tune", {}), "num_samples": 5}
    if not asha:
        data["tune"]["scheduler"] = {"asha": None}
    return parse_space(data)


def test_a_variant_with_nothing_searched_runs_once_to_the_end():
    search = make_search(_space(), "fedavg", "stamp")
    assert search.algorithm is None and isinstance(search.scheduler, FIFOScheduler) and search.num_samples == 1
    assert not search.may_stop_early and search.optuna_study is None


def test_a_searched_variant_is_stopped_by_asha_on_rounds_when_the_space_asks():
    space = _space()
    search = make_search(space, "full", "stamp")
    assert search.num_samples == 5 and search.algorithm is not None and search.may_stop_early
    assert isinstance(search.scheduler, ASHAScheduler) and search.scheduler._time_attr == "round"
    assert search.scheduler._max_t == space.base.rounds
    without = make_search(_space(asha=False), "full", "stamp")
    assert isinstance(without.scheduler, FIFOScheduler) and not without.may_stop_early


def test_a_fresh_run_never_joins_an_earlier_study_and_a_resume_reopens_its_own(tmp_path):
    url = f"sqlite:///{tmp_path / 'optuna.db'}"
    space = _space()
    first = make_search(space, "full", "s1", url)
    assert first.optuna_study == f"{space.name}-full" and first.optuna_storage == optuna_db.masked(url)
    assert optuna.study.get_all_study_names(url) == [first.optuna_study]  # the searcher made it
    second = make_search(space, "full", "s2", url)
    assert second.optuna_study == f"{space.name}-full-s2"
    resumed = make_search(space, "full", "s3", url, resumed=Resumed(first.optuna_study))
    assert resumed.optuna_study == first.optuna_study
    in_memory = make_search(space, "full", "s4")
    assert in_memory.optuna_study is None and in_memory.optuna_storage is None
