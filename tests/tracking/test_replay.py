"""A resumed trial replays the rounds after its last checkpoint: identical values are not logged twice; values that
differ (a GPU without deterministic kernels) are logged again and the run says which rounds."""

from __future__ import annotations

from mlflow.tracking import MlflowClient

from raytune_fl.engine.report import RoundReport
from raytune_fl.tracking.records import CellTrials, RunRecord
from raytune_fl.tracking.schema import TAG_CELL, TAG_REPLAY_DIFFERED, TAG_SUPERSEDED_BY
from raytune_fl.tracking.store import ablation_results
from raytune_fl.tracking.trials import TrialTracker, replay_differs
from tests.support.run_writer import RunWriter


def _round(step: int, acc: float) -> RoundReport:
    return RoundReport(step, {"val_acc": acc, "val_loss": 1.0 - acc, "round_time_s": 0.1 * step})


def test_replay_differs_compares_learning_metrics_only():
    logged = {"round": 2, "val_acc": 0.5, "round_time_s": 1.0}
    assert not replay_differs(logged, {"val_acc": 0.5, "round_time_s": 2.0})  # a timing always differs
    assert replay_differs(logged, {"val_acc": 0.5000001})
    assert not replay_differs(logged, {"val_acc": 0.5, "new_metric": 3.0})  # nothing logged to compare with


def test_a_replayed_round_is_logged_again_only_when_its_values_differ(tmp_path):
    client = MlflowClient(f"sqlite:///{tmp_path / 'm.db'}")
    tracker = TrialTracker(RunWriter(client, "replay"), "parent", 4, CellTrials({"t": RunRecord("t", {}, {})}))
    for step, acc in ((1, 0.1), (2, 0.2), (3, 0.3)):
        tracker.log_round("trial", {"cell": "t"}, _round(step, acc))
    run_id = tracker.run_ids["trial"]
    tracker.log_round("trial", {"cell": "t"}, _round(2, 0.2))  # a CPU replay: the same values
    assert [m.value for m in client.get_metric_history(run_id, "val_acc")] == [0.1, 0.2, 0.3]
    assert TAG_REPLAY_DIFFERED not in client.get_run(run_id).data.tags
    tracker.log_round("trial", {"cell": "t"}, _round(3, 0.35))  # a GPU replay: other values
    history = client.get_metric_history(run_id, "val_acc")
    assert [(m.step, m.value) for m in history] == [(1, 0.1), (2, 0.2), (3, 0.3), (3, 0.35)]
    assert client.get_run(run_id).data.tags[TAG_REPLAY_DIFFERED] == "3"
    assert [row["val_acc"] for row in tracker.history["trial"]] == [0.1, 0.2, 0.35]  # the round table: the replay's
    tracker.log_round("trial", {"cell": "t"}, _round(4, 0.4))
    assert tracker.history["trial"][-1]["round"] == 4


def test_a_cut_cell_run_again_by_resume_supersedes_its_cut_run(tmp_path):
    client = MlflowClient(f"sqlite:///{tmp_path / 'm.db'}")
    cells = CellTrials({k: RunRecord(f"full seed={k}", {TAG_CELL: k}, {}) for k in ("s0", "s1")})
    first = TrialTracker(RunWriter(client, "cut"), "parent", 2, cells)
    for step in (1, 2):
        first.log_round("a", {"cell": "s0"}, _round(step, 0.5))
    done = first.run_ids["a"]
    first.complete("a")  # s0 ran every round
    first.log_round("b", {"cell": "s1"}, _round(1, 0.5))
    cut = first.run_ids["b"]
    first.close_open_runs()  # Ctrl-C: s1 cut after round 1, KILLED
    resumed = TrialTracker(first.tracker, "parent", 2, cells, resuming=True)
    for step in (1, 2):  # --resume runs s1 in a new Tune run: a new trial id, so a new run
        resumed.log_round("c", {"cell": "s1"}, _round(step, 0.5))
    new = resumed.run_ids["c"]
    resumed.complete("c")
    old = client.get_run(cut)
    assert old.data.tags[TAG_SUPERSEDED_BY] == new and old.info.run_name == "full seed=s1 (superseded)"
    assert old.info.status == "KILLED" and client.get_run(new).info.run_name == "full seed=s1"
    assert TAG_SUPERSEDED_BY not in client.get_run(done).data.tags
    rows = ablation_results(client, first.tracker.experiment_id, "parent")
    assert sorted(zip(rows["cell"], rows["run_id"])) == [("s0", done), ("s1", new)]  # one run per cell
