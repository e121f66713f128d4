"""The dashboard's reading of trial statuses (report/runs.py): a collapsed tuning trial is a completed one, scored by
its last value, and it ran every round, so it ranks with the finished ones ahead of those ASHA stopped."""

from __future__ import annotations

from types import SimpleNamespace

from raytune_fl.report.runs import COMPLETED, best_trial


def _run(status: str, val_acc: float) -> SimpleNamespace:
    return SimpleNamespace(data=SimpleNamespace(tags={"trial_status": status}, metrics={"val_acc": val_acc}))


def test_a_collapsed_trial_is_completed_and_ranks_as_one_that_ran_every_round():
    assert COMPLETED == ("finished", "collapsed", "stopped_early")
    stuck, cut = _run("collapsed", 0.12), _run("stopped_early", 0.5)
    # ASHA's cut trial scored higher on a truncated run: the one that ran every round comes first, as in the study
    assert best_trial([cut, stuck], "val_acc", maximize=True) is stuck
    learned = _run("finished", 0.8)
    assert best_trial([cut, stuck, learned], "val_acc", maximize=True) is learned
    assert best_trial([_run("error", 0.9), _run("diverged", 0.0)], "val_acc", maximize=True) is None
