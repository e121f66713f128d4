"""The collapsed status: `ended_status` by hand, and a trial's run tagged by its last round on a real MLflow store
(a run at chance that ran every round is `collapsed`; stopped early, diverged and failed runs keep theirs)."""

from __future__ import annotations

import math

from mlflow.tracking import MlflowClient

from raytune_fl.engine.report import RoundReport
from raytune_fl.metrics import COLLAPSED, DIVERGED, DIVERGENCE_KEY, ROUND, VAL_ACC, VAL_LOSS
from raytune_fl.tracking.records import (
    ENDED_STATUSES,
    CellTrials,
    RunRecord,
    ablation_parent_metrics,
    ended_status,
    tune_parent_end,
)
from raytune_fl.tracking.schema import TAG_TRIAL_STATUS
from raytune_fl.tracking.trials import TrialTracker
from tests.support.run_writer import RunWriter


def test_ended_status_reads_the_last_reports_flag_only_for_a_run_that_ran_every_round():
    assert ended_status({COLLAPSED: 1.0}, 3, 3) == "collapsed"  # not-a-metric: the status
    assert ended_status({COLLAPSED: 0.0}, 3, 3) == "finished"
    assert ended_status({}, 3, 3) == "finished"  # a run logged before the flag existed
    assert ended_status({COLLAPSED: 1.0}, 2, 3) == "stopped_early"  # ASHA's cut: its score is not final
    assert ended_status({COLLAPSED: 1.0, DIVERGED: 1.0}, 3, 3) == "diverged"
    assert ended_status({COLLAPSED: math.nan}, 3, 3) == "finished"  # only the flag's 1 says so
    assert ENDED_STATUSES == ("finished", "collapsed", "stopped_early", "diverged")  # the order counts are shown in


def test_the_parents_count_collapsed_runs():
    counts = {"finished": 1, "collapsed": 2, "stopped_early": 0, "diverged": 0, "error": 0}
    end = tune_parent_end({"mu": 0.1}, {VAL_ACC: 0.5}, counts, seed=0)
    assert end.metrics["trials_collapsed"] == 2 and end.metrics["trials_finished"] == 1
    assert ablation_parent_metrics(3.0, {"finished": 1, "collapsed": 2})["runs_collapsed"] == 2.0


def _round(step: int, acc: float, at_chance: bool) -> RoundReport:
    return RoundReport(step, {VAL_ACC: acc, VAL_LOSS: 2.0, COLLAPSED: float(at_chance)})


def test_a_trial_run_is_tagged_collapsed_when_its_last_round_is_at_chance(tmp_path):
    client = MlflowClient(f"sqlite:///{tmp_path / 'm.db'}")
    cells = {key: RunRecord(key, {}, {}) for key in ("recovered", "stuck", "cut", "nan", "broken")}
    tracker = TrialTracker(RunWriter(client, "collapse"), "parent", 2, CellTrials(cells))
    # at chance after round 1, above it at the end: the last round decides
    tracker.log_round("recovered", {"cell": "recovered"}, _round(1, 0.1, True))
    tracker.log_round("recovered", {"cell": "recovered"}, _round(2, 0.6, False))
    for step in (1, 2):  # at chance through the last round
        tracker.log_round("stuck", {"cell": "stuck"}, _round(step, 0.1, True))
    tracker.log_round("cut", {"cell": "cut"}, _round(1, 0.1, True))  # ASHA stopped it after round 1
    tracker.log_round("nan", {"cell": "nan"}, _round(1, 0.1, True))
    diverged = {ROUND: 2, DIVERGED: 1.0, VAL_ACC: 0.0, VAL_LOSS: math.inf, DIVERGENCE_KEY: "non-finite local loss"}
    tracker.log_round("nan", {"cell": "nan"}, RoundReport.from_result(diverged))
    for step in (1, 2):
        tracker.log_round("broken", {"cell": "broken"}, _round(step, 0.1, True))
    run_ids = dict(tracker.run_ids)
    for trial in ("recovered", "stuck", "cut", "nan"):
        tracker.complete(trial)
    tracker.fail("broken")
    status = {trial: client.get_run(run_id).data.tags[TAG_TRIAL_STATUS] for trial, run_id in run_ids.items()}
    assert status == {
        "recovered": "finished",
        "stuck": "collapsed",
        "cut": "stopped_early",
        "nan": "diverged",
        "broken": "error",
    }
    assert client.get_run(run_ids["stuck"]).data.metrics[COLLAPSED] == 1.0  # the flag is a metric of the run too
