"""System metrics end to end: a real one-trial study through `raytune-fl tune` with `--system-metrics` logs the
trial process's node (MLflow's system/ names) on the trial's run every round, with plausible values; without the
switch it logs none. Two studies (~10 s each on 2 cores): the slow tier."""

from __future__ import annotations

import psutil
import pytest
import yaml
from mlflow.tracking import MlflowClient

from tests.support import tiny_space

SWITCH = "MLFLOW_ENABLE_SYSTEM_METRICS_LOGGING"
CPU = "system/cpu_utilization_percentage"
MEMORY = "system/system_memory_usage_megabytes"
MEMORY_SHARE = "system/system_memory_usage_percentage"
TOTAL_MB = psutil.virtual_memory().total / 1e6  # the trials run on this machine (the session's local cluster)


@pytest.fixture
def switch(monkeypatch):
    """MLflow's switch off to begin with, and as it was afterwards (the flag sets it for the whole process)."""
    monkeypatch.setenv(SWITCH, "false")
    return monkeypatch


def _plausible(values: dict[str, float]) -> bool:
    return 0 <= values[CPU] <= 100 and 0 < values[MEMORY] <= TOTAL_MB and 0 < values[MEMORY_SHARE] <= 100


def _study(tmp_path, *flags: str) -> dict[str, list]:
    """A one-trial study (fedavg, 2 rounds, clients in the trial's process) through the real tune command: the
    trial run's system metric histories, by name."""
    from raytune_fl.cli import main

    data = tiny_space("system", rounds=2, resources={"actors": 0})
    del data["variants"]["full"]
    tmp_path.mkdir()
    space = tmp_path / "system.yaml"
    space.write_text(yaml.safe_dump(data))
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    argv = ["--space", str(space), "--storage", str(tmp_path / "ray"), "--mlflow-uri", uri, "--no-models", *flags]
    assert main(argv) == 0
    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name("system").experiment_id])
    (trial,) = [run for run in runs if run.data.tags.get("trial_id")]
    return {key: client.get_metric_history(trial.info.run_id, key) for key in trial.data.metrics if "/" in key}


def test_a_study_with_the_switch_logs_the_trial_process_node_every_round(ray_cluster, switch, tmp_path):
    logged = _study(tmp_path / "on", "--system-metrics")
    assert {CPU, MEMORY, MEMORY_SHARE} <= set(logged), sorted(logged)
    assert all(key.startswith("system/") for key in logged)
    assert [m.step for m in logged[CPU]] == [1, 2]  # one sample per round, at the round's step
    for step in (1, 2):
        values = {key: next(m.value for m in history if m.step == step) for key, history in logged.items()}
        assert _plausible(values), (step, values)
    switch.setenv(SWITCH, "false")
    assert _study(tmp_path / "off") == {}  # the switch off: no system metric at all
