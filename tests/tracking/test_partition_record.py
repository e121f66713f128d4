"""tracking/tracker.py: a study's partition record (its table as Parquet, the heat map) is drawn once, on a thread
that may start before Ray does, and every parent run that logs it gets the same files; a variant's parent run logs
it on that thread, and has it when it ends."""

from __future__ import annotations

import pickle
import threading
from pathlib import Path
from urllib.parse import urlparse

import pandas as pd
import pytest
from mlflow import MlflowClient
from PIL import Image

from raytune_fl.config import ExperimentConfig
from raytune_fl.engine.data import prepare_data
from raytune_fl.tracking import StudyTracker
from raytune_fl.tracking import tracker as tracker_module
from raytune_fl.tracking.records import RunRecord

EXPERIMENT = ExperimentConfig(dataset="digits", partition={"clients": 3, "alpha": 0.5, "min_size": 20})


def test_the_record_is_drawn_once_ahead_and_each_parent_run_logs_it(tmp_path, monkeypatch):
    data = prepare_data(EXPERIMENT)
    drawn: list[str] = []
    draw = tracker_module.draw_partition

    def counted(data, title):
        drawn.append(threading.current_thread().name)
        return draw(data, title)

    monkeypatch.setattr(tracker_module, "draw_partition", counted)
    tracker = StudyTracker(f"sqlite:///{tmp_path / 'm.db'}", "study")
    tracker.render_partition(data, "digits: dirichlet, 3 clients")
    runs = [tracker.start_run(RunRecord(name, {}, {})) for name in ("full", "fedavg")]
    tables = [tracker.log_partition(run, data, "digits: dirichlet, 3 clients") for run in runs]

    assert len(drawn) == 1 and drawn[0].startswith("partition-record")  # not on this thread
    assert tables[0] is tables[1]
    assert tables[0]["num_samples"].tolist() == [len(part) for part in data.client_parts]
    for run in runs:
        logged = {f.path for f in tracker.client.list_artifacts(run, "partition")}
        assert logged == {"partition/partition.parquet", "partition/partition.png"}
        parquet = pd.read_parquet(tracker.client.download_artifacts(run, "partition/partition.parquet"))
        pd.testing.assert_frame_equal(parquet, tables[0])
        assert Image.open(tracker.client.download_artifacts(run, "partition/partition.png")).size[0] > 100

    tracker.log_partition(runs[0], data, "another title")  # another title is another drawing
    assert len(drawn) == 2


def test_a_tracker_with_a_drawing_pickles_and_its_copy_draws_anew(tmp_path):
    # Tune pickles its callbacks, which hold the tracker; a thread and its futures do not pickle
    data = prepare_data(EXPERIMENT)
    tracker = StudyTracker(f"sqlite:///{tmp_path / 'm.db'}", "study")
    tracker.render_partition(data, "title")
    copy = pickle.loads(pickle.dumps(tracker))
    run = copy.start_run(RunRecord("full", {}, {}))
    table = copy.log_partition(run, data, "title")
    assert len(table) == 3


def test_a_parent_run_logs_its_record_on_the_drawing_thread_and_has_it_when_it_ends(tmp_path, monkeypatch):
    # tune.py's variants start their trials without waiting for the drawing (~0.7 s)
    data = prepare_data(EXPERIMENT)
    threads: list[str] = []
    log_artifacts = MlflowClient.log_artifacts

    def seen(self, *args, **kwargs):  # the real call, its thread noted
        threads.append(threading.current_thread().name)
        return log_artifacts(self, *args, **kwargs)

    monkeypatch.setattr(MlflowClient, "log_artifacts", seen)
    tracker = StudyTracker(f"sqlite:///{tmp_path / 'm.db'}", "study")
    with tracker.parent_run(RunRecord("full", {}, {})) as parent:
        tracker.log_partition_when_drawn(parent.run_id, data, "title")
    run = parent.run_id
    assert len(threads) == 1 and threads[0].startswith("partition-record")
    logged = {f.path for f in tracker.client.list_artifacts(run, "partition")}
    assert logged == {"partition/partition.parquet", "partition/partition.png"}
    assert tracker.client.get_run(run).info.status == "FINISHED"


def test_a_record_that_cannot_be_logged_fails_its_parent_run_when_it_ends(tmp_path):
    tracker, data = StudyTracker(f"sqlite:///{tmp_path / 'm.db'}", "study"), prepare_data(EXPERIMENT)
    with pytest.raises(OSError):
        with tracker.parent_run(RunRecord("full", {}, {})) as parent:
            artifacts = Path(urlparse(tracker.client.get_run(parent.run_id).info.artifact_uri).path)
            (artifacts / "partition").write_text("a file where the record's folder goes")
            tracker.log_partition_when_drawn(parent.run_id, data, "title")
    assert tracker.client.get_run(parent.run_id).info.status == "FAILED"
