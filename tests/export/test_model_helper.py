"""export/model_helper.py: a selected trial's model logged from the helper process is the model the trial trained
(loaded back with plain MLflow, it scores what the federation scores); a helper still importing is waited for; a
dead helper falls back to logging in this process; the helper's errors reach the caller; the helper's module
imports only the standard library (the helper lowers its priority before it imports the rest)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from multiprocessing import Pipe
from pathlib import Path

import mlflow.pytorch
import pytest
import torch
from mlflow.tracking import MlflowClient
from mlflow.tracking._tracking_service.utils import _use_tracking_uri

from raytune_fl.config import TrialSpec
from raytune_fl.export.model_helper import ModelExporter, _get_ready
from raytune_fl.tracking import StudyTracker, models
from raytune_fl.tracking.schema import TAG_MODEL_ID, TAG_TRIAL_ID
from tests.support.exports import EXPORT_EXPERIMENT, TuneResult, log_model


def _accuracy(model: torch.nn.Module, data) -> float:
    with torch.no_grad():
        predicted = model(torch.from_numpy(data.dataset.x_test)).argmax(1).numpy()
    return float((predicted == data.dataset.y_test).mean())


def test_the_helper_logs_the_trained_model_and_links_it_to_the_parent(trained_federation):
    uri, parent, _, data, metrics = trained_federation
    exporter = ModelExporter(uri, "helper")
    try:
        model_id, run_id = log_model(exporter, trained_federation, "t1")
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


def test_a_helper_still_importing_is_waited_for_and_logs_the_model(trained_federation):
    # a short study: its trials kept both cores, the helper (nice 19) is still importing MLflow and torch
    uri, parent, _, data, metrics = trained_federation
    exporter = ModelExporter(uri, "helper")
    helper = exporter._process
    try:
        model_id, run_id = log_model(exporter, trained_federation, "t1")
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


def test_a_dead_helper_is_replaced_by_logging_here(trained_federation):
    uri = trained_federation[0]
    exporter = ModelExporter(uri, "helper")
    exporter._process.kill()  # killed from outside (out of memory, say) before the study's end
    exporter._process.wait()
    model_id, run_id = log_model(exporter, trained_federation, "t2")
    assert MlflowClient(uri).get_run(run_id).data.tags[TAG_MODEL_ID] == model_id
    exporter.close()  # nothing left to end: no error


def test_no_trial_run_gives_none_and_a_failure_in_the_helper_is_raised_here(trained_federation):
    uri, parent, checkpoint, data, _ = trained_federation
    exporter = ModelExporter(uri, "helper")
    try:
        assert log_model(exporter, trained_federation, "no-such-trial") is None
        with pytest.raises(Exception, match="fedmagic"):
            unknown = TrialSpec(EXPORT_EXPERIMENT, "fedmagic", {})  # unresolved: the helper's build fails
            exporter.log(parent, TuneResult({"trial_id": "t1"}, checkpoint), unknown, data, link_parent=False)
        assert log_model(exporter, trained_federation, "no-such-trial") is None  # the helper serves on after a failure
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
