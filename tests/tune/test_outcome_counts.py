"""A variant study's trial counts (tune/outcome.py's summarise): every way a trial ends, collapsed included, in the
order every count is shown; a collapsed trial ran every round and stays a candidate."""

from __future__ import annotations

from types import SimpleNamespace

from raytune_fl.config import ExperimentConfig, TuneSettings, VariantTrials
from raytune_fl.metrics import COLLAPSED, DIVERGED, ROUND, TEST_ACC, VAL_ACC
from raytune_fl.tune.outcome import summarise

FEDAVG = VariantTrials(ExperimentConfig(rounds=3), "fedavg", {})  # a study of 3 rounds, selecting on val_acc


def _result(round_: int, val_acc: float, at_chance: bool = False, **more) -> SimpleNamespace:
    metrics = {ROUND: round_, VAL_ACC: val_acc, TEST_ACC: 0.5, COLLAPSED: float(at_chance), **more}
    return SimpleNamespace(error=None, metrics=metrics, config={})


def test_the_counts_gain_collapsed_in_their_order():
    results = [
        _result(3, 0.7),
        _result(3, 0.1, at_chance=True),  # ran every round, at chance
        _result(3, 0.11, at_chance=True),
        _result(1, 0.1, at_chance=True),  # stopped early by ASHA: its flag is not a verdict
        _result(2, 0.0, **{DIVERGED: 1.0}),
        SimpleNamespace(error=RuntimeError("boom"), metrics={}, config={}),
    ]
    outcome, best = summarise(results, "fedavg", FEDAVG, TuneSettings())
    assert outcome.trials == {"finished": 1, "collapsed": 2, "stopped_early": 1, "diverged": 1, "error": 1}
    assert list(outcome.trials) == ["finished", "collapsed", "stopped_early", "diverged", "error"]
    assert best is results[0]


def test_a_study_whose_every_trial_collapsed_still_selects_one():
    results = [_result(3, 0.10, at_chance=True), _result(3, 0.12, at_chance=True)]
    outcome, best = summarise(results, "fedavg", FEDAVG, TuneSettings())
    assert best is results[1] and outcome.trials["collapsed"] == 2 and outcome.trials["finished"] == 0
