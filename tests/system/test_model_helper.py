"""export/model_helper.py ahead of the study's end: the best trial so far is logged as trials end, and a model
superseded by a better trial is deleted. (The helper itself: tests/export/test_model_helper.py.)"""

from __future__ import annotations

import time

from mlflow.tracking import MlflowClient

from raytune_fl.export.model_helper import ModelExporter
from raytune_fl.tracking import StudyTracker
from raytune_fl.tracking.schema import TAG_MODEL_ID, TAG_PARENT_RUN, TAG_TRIAL_ID
from tests.support.exports import EXPORT_TRIAL, TuneResult, log_model


def _fresh_study(uri: str, trials: tuple[str, ...]) -> tuple[str, dict[str, str]]:
    """A parent run and its trials' runs, none of them with a model yet."""
    tracker = StudyTracker(uri, "helper")
    parent = tracker.client.create_run(tracker.experiment_id).info.run_id
    tags = {TAG_PARENT_RUN: parent, "mlflow.parentRunId": parent}
    runs = {t: tracker.client.create_run(tracker.experiment_id, tags={**tags, TAG_TRIAL_ID: t}) for t in trials}
    return parent, {t: run.info.run_id for t, run in runs.items()}


def _model_tag(client: MlflowClient, run_id: str, timeout_s: float = 120.0) -> str:
    """The model id a run is tagged with, once the helper (in the background) has logged one."""
    deadline = time.monotonic() + timeout_s
    while TAG_MODEL_ID not in (tags := client.get_run(run_id).data.tags):
        assert time.monotonic() < deadline, f"no model logged on {run_id} within {timeout_s:.0f}s"
        time.sleep(0.2)
    return tags[TAG_MODEL_ID]


# four models logged at nice 19: ~10 s
def test_the_best_trial_so_far_is_logged_ahead_and_superseded_models_are_deleted(trained_federation):
    uri, _, checkpoint, data, _ = trained_federation
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("helper").experiment_id
    parent, runs = _fresh_study(uri, ("a1", "a2", "a3"))
    exporter = ModelExporter(uri, "helper")
    try:
        exporter.log_ahead(parent, "a1", checkpoint, EXPORT_TRIAL, data)
        first = _model_tag(client, runs["a1"])
        assert client.get_run(parent).data.tags.get(TAG_MODEL_ID) is None  # not the selection yet
        exporter.log_ahead(parent, "a2", checkpoint, EXPORT_TRIAL, data)  # a better trial: a1's model goes
        second = _model_tag(client, runs["a2"])
        live = {m.model_id for m in client.search_logged_models([experiment])}
        assert second in live and first not in live and TAG_MODEL_ID not in client.get_run(runs["a1"]).data.tags
        # the study selects a2: its model logged ahead is the one listed on the parent, no second export
        result = TuneResult({"trial_id": "a2"}, checkpoint)
        selected = exporter.log(parent, result, EXPORT_TRIAL, data, link_parent=True)
        assert selected == (second, runs["a2"])
        assert client.get_run(parent).data.tags[TAG_MODEL_ID] == second
        assert [m.model_id for m in client.get_run(parent).outputs.model_outputs] == [second]
        # a3 logged ahead, but the study selects another trial: a3's model goes, the selected one is logged now
        exporter.log_ahead(parent, "a3", checkpoint, EXPORT_TRIAL, data)
        third = _model_tag(client, runs["a3"])
        model_id, run_id = log_model(exporter, trained_federation, "t2")
        live = {m.model_id for m in client.search_logged_models([experiment])}
        assert client.get_run(run_id).data.tags[TAG_TRIAL_ID] == "t2" and model_id in live and third not in live
        assert TAG_MODEL_ID not in client.get_run(runs["a3"]).data.tags
    finally:
        exporter.close()
