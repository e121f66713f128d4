"""The MLflow UI's links and the runs table's nesting, by hand (tracking/urls.py, tools/mlflow_ui.py), and the
experiment tag a study sets. The real UI in headless Chromium on a real `mlflow server`: tests/system/test_mlflow_ui.py.
"""

from __future__ import annotations

from mlflow.tracking import MlflowClient

from raytune_fl.tracking.schema import EXPERIMENT_KIND_TRAINING, TAG_EXPERIMENT_KIND
from raytune_fl.tracking.urls import runs_url
from tools.mlflow_ui import RunRow, compare_url, nested

# ---------------------------------------------------------------- fast: the tag, the URLs, the table's nesting


def test_a_study_experiment_is_marked_model_training_and_a_kind_set_by_hand_is_kept(tmp_path):
    from raytune_fl.tracking.tracker import StudyTracker

    uri = f"sqlite:///{tmp_path / 'm.db'}"
    created = StudyTracker(uri, "made_here")
    client = MlflowClient(uri)
    assert client.get_experiment(created.experiment_id).tags[TAG_EXPERIMENT_KIND] == EXPERIMENT_KIND_TRAINING
    older = client.create_experiment("made_before")  # e.g. by an older version of this package: gets the tag
    mine = client.create_experiment("mine", tags={TAG_EXPERIMENT_KIND: "genai_development"})
    assert StudyTracker(uri, "made_before").experiment_id == older
    assert client.get_experiment(older).tags[TAG_EXPERIMENT_KIND] == EXPERIMENT_KIND_TRAINING
    StudyTracker(uri, "mine")
    assert client.get_experiment(mine).tags[TAG_EXPERIMENT_KIND] == "genai_development"


def test_ui_urls_name_the_runs_tab_on_the_model_training_side():
    assert runs_url("http://h:5000/", "7") == "http://h:5000/#/experiments/7/runs?workflowType=machine_learning"
    assert runs_url("http://h:5000", "7", charts=True) == (
        "http://h:5000/#/experiments/7/runs?compareRunsMode=CHART&workflowType=machine_learning"
    )
    assert compare_url("http://h:5000", "7", ["a", "b"]) == (
        "http://h:5000/#/compare-runs?runs=%5B%22a%22%2C+%22b%22%5D&experiments=%5B%227%22%5D"
        "&workflowType=machine_learning"
    )


def test_nested_groups_each_row_under_the_top_level_row_above_it():
    rows = [
        RunRow(0, "p2", "full", 0, True),
        RunRow(1, "c3", "full-001", 1, False),
        RunRow(2, "c2", "full-000", 1, False),
        RunRow(3, "p1", "fedavg", 0, True),  # collapsed: nothing under it
        RunRow(4, "p0", "full", 0, True),  # an older study of the same variant
        RunRow(5, "c0", "full-000", 1, False),
    ]
    tree = [(parent.run_id, [child.run_id for child in children]) for parent, children in nested(rows)]
    assert tree == [("p2", ["c3", "c2"]), ("p1", []), ("p0", ["c0"])]
