"""tune/model_helper.py: a selected trial's model logged from the helper process is the model the trial trained
(loaded back with plain MLflow, it scores what the federation scores); a helper still importing is waited for; a
dead helper falls back to logging in this process; the helper's errors reach the caller; the helper's module
imports only the standard library (the helper lowers its priority before it imports the rest)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from multiprocessing import Pipe
from pathlib import Path

import mlflow.pytorch
import pytest
import torch
from mlflow.tracking import MlflowClient
from mlflow.tracking._tracking_service.utils import _use_tracking_uri
from ray import tune

from raytune_fl.config import ExperimentConfig
from raytune_fl.engine.checkpoint import save_state
from raytune_fl.engine.data import prepare_data
from raytune_fl.engine.federation import Federation
from raytune_fl.export.model_helper import ModelExporter, _get_ready
from raytune_fl.tracking import StudyTracker, models
from raytune_fl.tracking.schema import TAG_MODEL_ID, TAG_PARENT_RUN, TAG_TRIAL_ID

EXPERIMENT = ExperimentConfig.model_validate(
    {
        "dataset": "digits",
        "partition": {"kind": "dirichlet", "alpha": 0.5, "clients": 3, "min_size": 20, "seed": 0},
        "rounds": 2,
        "batch_size": 32,
        "resources": {"actors": 0},
    }
)


@dataclass
class Result:  # what ModelExporter.log reads of a tune.Result
    metrics: dict
    checkpoint: tune.Checkpoint | None


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A federation trained 2 rounds in process, its checkpoint, and a study's parent and trial runs."""
    tmp = tmp_path_factory.mktemp("helper")
    data = prepare_data(EXPERIMENT)
    federation = Federation(EXPERIMENT, "fedavg", {}, data=data)
    federation.run(on_round=lambda metrics: None)
    (tmp / "checkpoint").mkdir()
    save_state(federation.state_dict(), tmp / "checkpoint")
    uri = f"sqlite:///{tmp / 'm.db'}"
    tracker = StudyTracker(uri, "helper")
    parent = tracker.client.create_run(tracker.experiment_id).info.run_id
    tags = {TAG_PARENT_RUN: parent, "mlflow.parentRunId": parent}
    for trial in ("t1", "t2"):
        tracker.client.create_run(tracker.experiment_id, tags={**tags, TAG_TRIAL_ID: trial})
    checkpoint = tune.Checkpoint.from_directory(str(tmp / "checkpoint"))
    return uri, parent, checkpoint, data, federation.evaluate()


def _accuracy(model: torch.nn.Module, data) -> float:
    with torch.no_grad():
        predicted = model(torch.from_numpy(data.dataset.x_test)).argmax(1).numpy()
    return float((predicted == data.dataset.y_test).mean())


def _log(exporter: ModelExporter, trained, trial: str) -> tuple[str, str] | None:
    _, parent, checkpoint, data, _ = trained
    result = Result({"trial_id": trial}, checkpoint)
    return exporter.log(parent, result, EXPERIMENT, "fedavg", {}, data, link_parent=True)


def test_the_helper_logs_the_trained_model_and_links_it_to_the_parent(trained):
    uri, parent, _, data, metrics = trained
    exporter = ModelExporter(uri, "helper")
    try:
        model_id, run_id = _log(exporter, trained, "t1")
        assert exporter._process is not None and exporter._process.poll() is None  # the helper logged it
    finally:
        exporter.close()
    client = MlflowClient(uri)
    assert client.get_run(run_id).data.tags[TAG_TRIAL_ID] == "t1"
    assert client.get_run(run_id).data.tags[TAG_MODEL_ID] == model_id
    assert client.get_run(parent).data.tags[TAG_MODEL_ID] == model_id  # link_parent
    with _use_tracking_uri(uri):
        model = mlflow.pytorch.load_model(f"models:/{model_id}")
    assert _accuracy(model, data) == pytest.approx(metrics["test_acc"], abs=1e-12)


@pytest.mark.skipif(not Path("/proc/self/autogroup").exists(), reason="Linux with scheduler autogroups")
def test_the_helper_runs_at_the_lowest_priority_in_a_group_of_its_own(tmp_path):
    exporter = ModelExporter(f"sqlite:///{tmp_path / 'm.db'}", "helper")
    try:
        pid = exporter._process.pid
        for _ in range(100):  # it lowers its priority as it starts
            if os.getpriority(os.PRIO_PROCESS, pid) == 19:
                break
            time.sleep(0.05)
        assert os.getpriority(os.PRIO_PROCESS, pid) == 19 and os.getsid(pid) == pid
        assert Path(f"/proc/{pid}/autogroup").read_text().split()[-1] == "19"
        assert Path(f"/proc/{pid}/autogroup").read_text() != Path("/proc/self/autogroup").read_text()
    finally:
        exporter.close()


def test_a_helper_still_importing_is_waited_for_and_logs_the_model(trained):
    # a short study: its trials kept both cores, the helper (nice 19) is still importing MLflow and torch
    uri, parent, _, data, metrics = trained
    exporter = ModelExporter(uri, "helper")
    helper = exporter._process
    try:
        model_id, run_id = _log(exporter, trained, "t1")
        assert exporter._process is helper and helper.poll() is None  # the helper logged it, and serves on
    finally:
        exporter.close()
    client = MlflowClient(uri)
    assert client.get_run(run_id).data.tags[TAG_MODEL_ID] == model_id == client.get_run(parent).data.tags[TAG_MODEL_ID]
    with _use_tracking_uri(uri):
        model = mlflow.pytorch.load_model(f"models:/{model_id}")
    assert _accuracy(model, data) == pytest.approx(metrics["test_acc"], abs=1e-12)


@pytest.mark.parametrize("waiting", [False, True])
def test_the_helper_warms_up_only_when_no_model_is_waiting_to_be_logged(tmp_path, monkeypatch, waiting):
    # at a short study's end the selected model is sent before the helper has imported: logging it warms up too
    warmed = []
    real = models.warm_up
    monkeypatch.setattr(models, "warm_up", lambda: (warmed.append(True), real()))
    ours, theirs = Pipe()
    if waiting:
        ours.send("a model to log")
    tracker = _get_ready(theirs, f"sqlite:///{tmp_path / 'm.db'}", "helper")
    assert isinstance(tracker, StudyTracker) and warmed == ([] if waiting else [True])
    assert theirs.poll() == waiting  # nothing read: the message is still there for the helper's loop


def test_a_dead_helper_is_replaced_by_logging_here(trained):
    uri = trained[0]
    exporter = ModelExporter(uri, "helper")
    exporter._process.kill()  # killed from outside (out of memory, say) before the study's end
    exporter._process.wait()
    model_id, run_id = _log(exporter, trained, "t2")
    assert MlflowClient(uri).get_run(run_id).data.tags[TAG_MODEL_ID] == model_id
    exporter.close()  # nothing left to end: no error


def test_no_trial_run_gives_none_and_a_failure_in_the_helper_is_raised_here(trained):
    uri, parent, checkpoint, data, _ = trained
    exporter = ModelExporter(uri, "helper")
    try:
        assert _log(exporter, trained, "no-such-trial") is None
        with pytest.raises(Exception, match="fedmagic"):
            exporter.log(
                parent, Result({"trial_id": "t1"}, checkpoint), EXPERIMENT, "fedmagic", {}, data, link_parent=False
            )
        assert _log(exporter, trained, "no-such-trial") is None  # the helper serves on after a failure
    finally:
        exporter.close()


def test_the_helper_module_imports_only_the_standard_library():
    heavy = "('torch', 'mlflow', 'ray')"
    code = f"import sys, raytune_fl.export.model_helper; print([m for m in {heavy} if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=Path.cwd())
    assert out.stdout.strip() == "[]"


MAIN_SCRIPT = """
import os
from pathlib import Path
with Path({log!r}).open("a") as log:  # each process that runs this script's top level
    log.write(f"{{os.getpid()}}\\n")
from raytune_fl.export.model_helper import ModelExporter
if __name__ == "__main__":
    exporter = ModelExporter({uri!r}, "helper")
    print(exporter._process.pid)
    exporter.close()
"""


def test_the_helper_does_not_run_the_studys_main_script_again(tmp_path):
    # multiprocessing's spawn would: its child re-imports __main__, i.e. all that tune.py imports (~1.6 s CPU)
    log, script = tmp_path / "imports.log", tmp_path / "study.py"
    script.write_text(MAIN_SCRIPT.format(log=str(log), uri=f"sqlite:///{tmp_path / 'm.db'}"))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, check=True, cwd=Path.cwd())
    helper = int(out.stdout.split()[-1])
    ran = [int(pid) for pid in log.read_text().split()]
    assert len(ran) == 1 and helper not in ran


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


@pytest.mark.slow  # four models logged at nice 19: ~10 s
def test_the_best_trial_so_far_is_logged_ahead_and_superseded_models_are_deleted(trained):
    uri, _, checkpoint, data, _ = trained
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("helper").experiment_id
    parent, runs = _fresh_study(uri, ("a1", "a2", "a3"))
    exporter = ModelExporter(uri, "helper")
    try:
        ahead = {"experiment": EXPERIMENT, "method": "fedavg", "data": data}
        exporter.log_ahead(parent, "a1", checkpoint, {}, **ahead)
        first = _model_tag(client, runs["a1"])
        assert client.get_run(parent).data.tags.get(TAG_MODEL_ID) is None  # not the selection yet
        exporter.log_ahead(parent, "a2", checkpoint, {}, **ahead)  # a better trial: a1's model goes
        second = _model_tag(client, runs["a2"])
        live = {m.model_id for m in client.search_logged_models([experiment])}
        assert second in live and first not in live and TAG_MODEL_ID not in client.get_run(runs["a1"]).data.tags
        # the study selects a2: its model logged ahead is the one listed on the parent, no second export
        selected = exporter.log(parent, Result({"trial_id": "a2"}, checkpoint), EXPERIMENT, "fedavg", {}, data,
                                link_parent=True)  # fmt: skip
        assert selected == (second, runs["a2"])
        assert client.get_run(parent).data.tags[TAG_MODEL_ID] == second
        assert [m.model_id for m in client.get_run(parent).outputs.model_outputs] == [second]
        # a3 logged ahead, but the study selects another trial: a3's model goes, the selected one is logged now
        exporter.log_ahead(parent, "a3", checkpoint, {}, **ahead)
        third = _model_tag(client, runs["a3"])
        model_id, run_id = _log(exporter, trained, "t2")
        live = {m.model_id for m in client.search_logged_models([experiment])}
        assert client.get_run(run_id).data.tags[TAG_TRIAL_ID] == "t2" and model_id in live and third not in live
        assert TAG_MODEL_ID not in client.get_run(runs["a3"]).data.tags
    finally:
        exporter.close()
