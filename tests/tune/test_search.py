"""tune/search.py: what proposes and stops a variant's trials, from the space alone (no Ray cluster)."""

from __future__ import annotations

import optuna
import pytest
from ray.tune.schedulers import ASHAScheduler, FIFOScheduler, HyperBandScheduler, MedianStoppingRule

from raytune_fl.config import parse_space
from raytune_fl.runtime import optuna_storage as optuna_db
from raytune_fl.tune.search import OptunaSearchOnce, Resumed, grid_notice, make_search, single_run_notice
from tests.support import changed_space, tiny_space


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


def test_hyperband_and_median_stopping_run_on_rounds_and_may_stop_early():
    hyperband = parse_space(changed_space(("tune.scheduler", {"hyperband": {"reduction_factor": 2}})))
    search = make_search(hyperband, "full", "stamp")
    assert isinstance(search.scheduler, HyperBandScheduler) and search.may_stop_early
    assert search.scheduler._time_attr == "round" and search.scheduler._max_t_attr == hyperband.base.rounds
    assert search.scheduler._eta == 2
    median = parse_space(changed_space(("tune.scheduler", {"median": {"min_samples_required": 2}})))
    search = make_search(median, "full", "stamp")
    assert isinstance(search.scheduler, MedianStoppingRule) and search.may_stop_early
    assert search.scheduler._time_attr == "round" and search.scheduler._min_samples_required == 2
    assert search.scheduler._grace_period == 3  # 80 % of tiny_space's 3 rounds, rounded up


@pytest.mark.parametrize("num_samples", [3, 6])
def test_a_grid_study_runs_its_grid_once_whatever_num_samples_says(num_samples):
    space = parse_space(
        changed_space(
            ("tune.sampler", "grid"),
            ("tune.num_samples", num_samples),
            (
                "variants.full.search",
                {"mu": {"loguniform": [0.01, 1.0], "grid": [0.01, 0.1, 1.0]}, "lambda": {"choice": [1.0, 2.0]}},
            ),
        )
    )
    search = make_search(space, "full", "stamp")
    assert search.num_samples == 6 and make_search(space, "fedavg", "stamp").num_samples == 1
    notice = grid_notice(space.tune, search, "full")
    if num_samples == 6:
        assert notice is None
    else:
        assert notice == "[full] grid sampler: 6 grid points, each run once (tune.num_samples 3 does not apply)"
    assert grid_notice(space.tune, make_search(space, "fedavg", "stamp"), "fedavg") is None


def test_a_persisted_study_records_its_sampler_and_scheduler(tmp_path):
    url = f"sqlite:///{tmp_path / 'optuna.db'}"
    space = parse_space(changed_space(("tune.sampler", "qmc"), ("tune.scheduler", {"median": {}})))
    search = make_search(space, "full", "s1", url)
    study = optuna.load_study(study_name=search.optuna_study, storage=url)
    assert study.user_attrs == {"sampler": "qmc", "scheduler": "median"}


def test_the_summary_names_a_sampler_or_scheduler_other_than_tpe_and_asha():
    from raytune_fl.cli.tune import search_line
    from raytune_fl.config import TuneSettings

    assert search_line(TuneSettings()) is None and search_line(TuneSettings(scheduler={"asha": None})) is None
    assert search_line(TuneSettings(sampler="gp")) == (
        "search: sampler gp, scheduler asha (tune.sampler, tune.scheduler)"
    )
    assert search_line(TuneSettings(scheduler={"median": {}})).startswith("search: sampler tpe, scheduler median")


def test_a_restored_hyperband_puts_no_ended_trial_in_a_bracket():
    """Tune's restore adds back the ended trials; one in a bracket would hold its bracket's trials paused for ever."""
    from ray.tune.experiment import Trial

    from raytune_fl.tune.search import ResumableHyperBand

    scheduler = ResumableHyperBand(time_attr="round", metric="val_acc", mode="max", max_t=4)
    ended, running = Trial("f", stub=True), Trial("f", stub=True)
    ended.status = Trial.TERMINATED
    scheduler.on_trial_add(None, ended)
    scheduler.on_trial_add(None, running)
    assert ended not in scheduler._trial_info and running in scheduler._trial_info
    scheduler.on_trial_complete(None, ended, {})  # an ended trial's late news is no error
    [bracket] = [b for band in scheduler._hyperbands for b in band if b is not None]
    assert list(bracket._live_trials) == [running]


def test_a_search_of_one_configuration_runs_one_trial_and_says_so():
    one = {"mu": {"choice": [0.1]}, "lambda": {"choice": [2.0]}}
    space = parse_space(changed_space(("tune.num_samples", 2), ("variants.full.search", one)))
    search = make_search(space, "full", "stamp")
    assert search.num_samples == 1 and search.algorithm is not None  # Optuna still hands the trial its values
    assert single_run_notice(space, "full") == (
        "[full] nothing to search: its search holds one configuration (mu: 0.1, lambda: 2.0); one trial, as every "
        "other would repeat it (tune.num_samples 2 does not apply)"
    )
    assert single_run_notice(_space(), "full") is None  # a real search
    assert single_run_notice(_space(), "fedavg") is None  # a baseline beside a searched variant: as documented
    nothing = parse_space(changed_space(("tune.num_samples", 2), ("variants", {"fedavg": {"method": "fedavg"}})))
    assert make_search(nothing, "fedavg", "stamp").num_samples == 1
    assert single_run_notice(nothing, "fedavg") == (
        "[fedavg] nothing to search: no variant of the space has a search section; one trial, as every other would "
        "repeat it (tune.num_samples 2 does not apply)"
    )


def test_a_round_run_again_after_a_restore_is_reported_to_optuna_once_without_a_warning(recwarn):
    search = OptunaSearchOnce(
        space={"mu": optuna.distributions.FloatDistribution(0.0, 1.0)}, metric="val_acc", mode="max"
    )
    assert search.suggest("t1") is not None
    for step, value in ((1, 0.25), (2, 0.5), (2, 0.75), (3, 0.875)):  # round 2 again: resumed from round 1's checkpoint
        search.on_trial_result("t1", {"val_acc": value, "training_iteration": step})
    assert search._ot_trials["t1"]._cached_frozen_trial.intermediate_values == {1: 0.25, 2: 0.5, 3: 0.875}
    assert not [w for w in recwarn if "already reported" in str(w.message)]
