"""System metrics (tracking/system_metrics.py): sampled in the trial's process with MLflow's monitors, carried by
the round's report, logged by the driver on the trial's run; opted in with MLflow's switch or `--system-metrics`.
A whole study with the switch on and off is tests/system/test_system_metrics.py."""

from __future__ import annotations

import time

import psutil
import pytest
from mlflow.tracking import MlflowClient

from raytune_fl.engine.report import RoundReport
from raytune_fl.tracking.records import CellTrials, RunRecord
from raytune_fl.tracking.system_metrics import SystemSampler, system_metrics_on
from raytune_fl.tracking.trials import TrialTracker
from tests.support.run_writer import RunWriter

SWITCH = "MLFLOW_ENABLE_SYSTEM_METRICS_LOGGING"
CPU = "system/cpu_utilization_percentage"
MEMORY = "system/system_memory_usage_megabytes"
MEMORY_SHARE = "system/system_memory_usage_percentage"
TOTAL_MB = psutil.virtual_memory().total / 1e6


@pytest.fixture
def switch(monkeypatch):
    """MLflow's switch off to begin with, and as it was afterwards (the flag sets it for the whole process)."""
    monkeypatch.setenv(SWITCH, "false")
    return monkeypatch


def _plausible(values: dict[str, float]) -> bool:
    return 0 <= values[CPU] <= 100 and 0 < values[MEMORY] <= TOTAL_MB and 0 < values[MEMORY_SHARE] <= 100


def test_a_sample_is_this_node_under_mlflows_names():
    sampler = SystemSampler()
    deadline = time.perf_counter() + 0.3
    while time.perf_counter() < deadline:  # busy: the window's CPU utilisation is above nothing
        pass
    sample = sampler.sample()
    assert {CPU, MEMORY, MEMORY_SHARE} <= set(sample) and _plausible(sample), sample
    assert sample[CPU] > 0
    # GPU readings exactly where MLflow's GPU monitor found a GPU (none on a machine without one)
    gpu = {key for key in sample if key.startswith("system/gpu_")}
    assert bool(gpu) == (len(sampler.monitors) == 2), sample
    assert all(isinstance(value, float) for value in sample.values())


def test_the_samples_travel_apart_from_the_learning_metrics():
    flat = {"round": 2, "val_acc": 0.5, CPU: 40.0, MEMORY: 1000.0}
    report = RoundReport.from_result(flat)
    assert report.scalars == {"val_acc": 0.5} and report.metrics() == {"val_acc": 0.5}
    assert report.system == {CPU: 40.0, MEMORY: 1000.0}
    assert report.to_result() == flat and RoundReport.from_result({"round": 1}).system is None


def test_the_tracker_logs_them_at_the_round_and_keeps_them_out_of_the_round_table(tmp_path):
    client = MlflowClient(f"sqlite:///{tmp_path / 'm.db'}")
    tracker = TrialTracker(RunWriter(client, "system"), "parent", 2, CellTrials({"t": RunRecord("t", {}, {})}))
    for step, cpu in ((1, 30.0), (2, 50.0)):
        tracker.log_round("trial", {"cell": "t"}, RoundReport(step, {"val_acc": 0.1 * step}, system={CPU: cpu}))
    run_id = tracker.run_ids["trial"]
    assert [(m.step, m.value) for m in client.get_metric_history(run_id, CPU)] == [(1, 30.0), (2, 50.0)]
    assert all(CPU not in row for row in tracker.history["trial"])  # round_metrics.parquet's rows
    # a replayed round (a resumed trial): the same learning values, other system readings: nothing logged again
    tracker.log_round("trial", {"cell": "t"}, RoundReport(2, {"val_acc": 0.2}, system={CPU: 99.0}))
    assert [m.value for m in client.get_metric_history(run_id, CPU)] == [30.0, 50.0]
    assert "trial" not in tracker.replay_differed
    # the driver killed and the study resumed: the reopened run's round table is rebuilt without them
    resumed = TrialTracker(tracker.tracker, "parent", 2, CellTrials({"t": RunRecord("t", {}, {})}), resuming=True)
    assert resumed.open("trial", {"cell": "t"}) == run_id
    assert resumed.history["trial"] == [{"round": 1, "val_acc": 0.1}, {"round": 2, "val_acc": 0.2}]


@pytest.mark.parametrize("command", ["tune", "ablate"])
def test_the_flag_turns_mlflows_switch_on(switch, command):
    from raytune_fl.cli import ablate, tune

    parser = {"tune": tune, "ablate": ablate}[command].build_parser()
    assert not parser.parse_args(["--space", "s.yaml"]).system_metrics and not system_metrics_on()
    assert parser.parse_args(["--space", "s.yaml", "--system-metrics"]).system_metrics and system_metrics_on()
