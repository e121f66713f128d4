"""tracking/tracker.py's parent run on a real SQLite store: what the records say is what the run gets (the resume
command when stopped, the Pareto front's tags), and a caller adds its own results after the run has ended; the
tracker never calls back into a stage."""

from __future__ import annotations

import socket
import time

import pytest
from mlflow.tracking import MlflowClient

from raytune_fl.tracking import StudyTracker
from raytune_fl.tracking.records import RunEnd, RunRecord
from raytune_fl.tracking.schema import LEFT_RUNNING, TAG_PARENT_RUN, TAG_TRIAL_ID
from raytune_fl.tracking.tracker import ParentRun


@pytest.fixture
def tracker(tmp_path) -> StudyTracker:
    return StudyTracker(f"sqlite:///{tmp_path / 'mlflow.db'}", "parents")


def test_a_stopped_parent_is_tagged_with_its_records_resume_command(tracker):
    record = RunRecord("study", {"stage": "tune"}, {}, resume_command="python scripts/tune.py --resume")
    with pytest.raises(KeyboardInterrupt) as stopped, tracker.parent_run(record) as parent:
        raise KeyboardInterrupt
    run = tracker.client.get_run(parent.run_id)
    assert run.info.status == "KILLED" and not hasattr(stopped.value, LEFT_RUNNING)
    assert run.data.tags["interrupted"] == "true"
    assert run.data.tags["resume_command"] == "python scripts/tune.py --resume"


def test_a_stop_whose_tracking_server_is_gone_stays_a_stop_said_in_one_line(tracker, monkeypatch, caplog):
    # scancel ends the job's MLflow server with the driver: the stop's last writes cannot be made, and the stop
    # must still end as a stop (the resume line, exit 143), not as MLflow's error after minutes of retries
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")  # as tune/interrupt.py sets them at a stop
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "3")
    closed = socket.create_server(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()  # nothing listens there now: the server is gone
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt) as stopped, tracker.parent_run(RunRecord("study", {}, {})) as parent:
        kept = tracker.client
        tracker.client = MlflowClient(f"http://127.0.0.1:{port}")  # the server's address, after it ended
        raise KeyboardInterrupt
    assert time.monotonic() - started < 5
    [said] = [r.getMessage() for r in caplog.records if r.name == "raytune_fl.tracking.tracker"]
    assert said.startswith("MLflow did not answer while the study stopped (")
    assert said.endswith(f"run {parent.run_id} and its open trial runs stay RUNNING until --resume reopens it")
    assert kept.get_run(parent.run_id).info.status == "RUNNING"
    assert getattr(stopped.value, LEFT_RUNNING) == parent.run_id  # the command's last line says so, not KILLED


def test_a_parent_without_a_resume_command_is_tagged_interrupted_only(tracker):
    with pytest.raises(KeyboardInterrupt), tracker.parent_run(RunRecord("study", {}, {})) as parent:
        raise KeyboardInterrupt
    assert "resume_command" not in tracker.client.get_run(parent.run_id).data.tags


def test_a_parent_an_error_ends_is_failed_with_the_errors_first_line_as_its_reason(tracker):
    error = ValueError("model: 'net' needs 32x32 images\n  (found by a trial of variant full)")
    with pytest.raises(ValueError), tracker.parent_run(RunRecord("study", {}, {})) as parent:
        raise error
    run = tracker.client.get_run(parent.run_id)
    assert run.info.status == "FAILED" and run.data.tags["failure"] == "model: 'net' needs 32x32 images"
    assert "interrupted" not in run.data.tags


def test_the_ends_front_is_tagged_on_its_trial_runs_and_results_come_after_the_end(tracker):
    with tracker.parent_run(RunRecord("study", {}, {})) as parent:
        tags = {TAG_PARENT_RUN: parent.run_id}
        on = tracker.client.create_run(tracker.experiment_id, tags={**tags, TAG_TRIAL_ID: "t1"}).info.run_id
        off = tracker.client.create_run(tracker.experiment_id, tags={**tags, TAG_TRIAL_ID: "t2"}).info.run_id
        parent.end_with(RunEnd("FINISHED", {"best_val_acc": 0.5}, {"best.mu": 0.1}, front=("t1",)))
    assert tracker.client.get_run(on).data.tags["pareto_front"] == "true"
    assert "pareto_front" not in tracker.client.get_run(off).data.tags
    tracker.log_results(parent.run_id, {"runs_finished": 2.0}, {"seeds": "1,2"})  # as the ablation settles
    run = tracker.client.get_run(parent.run_id)
    assert run.info.status == "FINISHED" and run.data.tags["best.mu"] == "0.1" and run.data.tags["seeds"] == "1,2"
    assert run.data.metrics == {"best_val_acc": 0.5, "runs_finished": 2.0}


def test_a_parent_run_holds_values_only_no_callback_into_a_stage():
    fields = ParentRun.__dataclass_fields__
    assert "on_close" not in fields and not any("Callable" in str(f.type) for f in fields.values())
