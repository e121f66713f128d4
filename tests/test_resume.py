"""Checkpoint and resume: a federation restored from its checkpoint continues exactly as if never stopped;
a study whose driver is killed (SIGKILL of its whole process group) resumes with `tune.py --resume`."""

from __future__ import annotations

import os
import pickle
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import torch
import yaml
from mlflow.tracking import MlflowClient

from raytune_fl.cli import main
from raytune_fl.config import ExperimentConfig
from raytune_fl.engine.checkpoint import STATE_FILE, load_state, save_state
from raytune_fl.engine.federation import Federation

from .conftest import REPO, command_lines, tiny_space


class _Crash(Exception):
    pass


def _experiment(**overrides) -> ExperimentConfig:
    settings = {
        "dataset": "digits",
        "partition": {"kind": "dirichlet", "alpha": 0.5, "clients": 4, "min_size": 20},
        "rounds": 4,
        "batch_size": 32,
        "resources": {"actors": 0},
        "diagnostics": {"every": 2},
        **overrides,
    }
    return ExperimentConfig(**settings)


def _untimed(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in row.items() if not k.endswith("_s")} for row in rows]


@pytest.mark.parametrize(
    ("method", "params", "system"),
    [
        ("scaffold", {}, {}),  # per-client and server state
        ("fedavgm", {}, {"dropout": 0.3}),  # server momentum; dropouts
        ("moon", {}, {"local_steps": [1, 3]}),  # a previous model per client; step budgets
        ("fedbuff", {"buffer_size": 2}, {"speed_sigma": 1.0}),  # clients in flight and a buffer
    ],
)
def test_a_restored_federation_continues_exactly(tmp_path, method, params, system):
    experiment = _experiment(system=system, participation=0.75)
    straight: list[dict] = []
    Federation(experiment, method, params).run(straight.append)

    def crash_after_round_2(metrics: dict) -> None:
        if metrics["round"] == 2:
            save_state(federation.state_dict(), tmp_path)  # what the trainable checkpoints with the report
            raise _Crash

    federation = Federation(experiment, method, params)
    with pytest.raises(_Crash):
        federation.run(crash_after_round_2)
    resumed = Federation(experiment, method, params)
    resumed.load_state_dict(load_state(tmp_path))
    rest: list[dict] = []
    resumed.run(rest.append)
    assert [r["round"] for r in rest] == [3, 4]
    assert _untimed(rest) == _untimed(straight[2:])


def test_checkpoints_load_with_weights_only(tmp_path):
    class Payload:
        def __reduce__(self):
            return (os.system, ("echo pwned",))

    save_state({"round": 1, "weights": {}}, tmp_path)
    assert load_state(tmp_path)["round"] == 1
    torch.save({"round": Payload()}, tmp_path / STATE_FILE)
    with pytest.raises(pickle.UnpicklingError):
        load_state(tmp_path)


def _space(tmp_path: Path) -> Path:
    data = tiny_space("resumable")
    data["base"].update(rounds=4, resources={"actors": 0, "cpus_per_actor": 1})
    data["variants"] = {"fedavg": {"method": "fedavg"}, "full": data["variants"]["full"]}
    data["tune"].update(num_samples=3, scheduler={"asha": None})
    path = tmp_path / "resumable.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _trials(uri: str) -> dict[tuple, dict]:
    """Finished child runs keyed by (variant, searched params): their per-round metric histories."""
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("resumable")
    found = {}
    for run in client.search_runs([experiment.experiment_id]):
        if "mlflow.parentRunId" not in run.data.tags or run.info.status != "FINISHED":
            continue
        key = (run.data.tags["variant"], run.data.params.get("mu"), run.data.params.get("lambda"))
        found[key] = {
            name: [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, name)]
            for name in ("val_acc", "val_loss", "train_loss")
        }
    return found


def _kill_when(process: subprocess.Popen, marker: str, timeout_s: float) -> str:
    seen, deadline = [], time.time() + timeout_s
    while time.time() < deadline:
        line = process.stdout.readline()
        if not line and process.poll() is not None:
            break
        seen.append(line)
        if marker in line:
            os.killpg(process.pid, signal.SIGKILL)  # the driver and the Ray cluster it started, all at once
            process.wait(timeout=30)
            return "".join(seen)
    os.killpg(process.pid, signal.SIGKILL)
    pytest.fail(f"never saw {marker!r}; output:\n{''.join(seen)[-3000:]}")


def _survivors(marker: str, wait_s: float) -> list[str]:
    deadline = time.time() + wait_s
    while True:
        found = [line[:120] for line in command_lines() if marker in line]
        if not found or time.time() > deadline:
            return found
        time.sleep(1)


@pytest.mark.slow
def test_a_killed_study_resumes_to_the_uninterrupted_result(ray_cluster, tmp_path, capsys, request):
    space = _space(tmp_path)
    reference_uri = f"sqlite:///{tmp_path / 'reference.db'}"
    assert main(["--space", str(space), "--storage", str(tmp_path / "ref"), "--mlflow-uri", reference_uri]) == 0

    uri, storage = f"sqlite:///{tmp_path / 'killed.db'}", tmp_path / "killed"
    args = ["--space", str(space), "--storage", str(storage), "--mlflow-uri", uri, "--verbose"]  # a line per round
    ray_tmp = tempfile.mkdtemp(prefix="rk", dir="/tmp")  # short: Ray's socket paths have a length limit
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_ADDRESS")} | {"RAY_TMPDIR": ray_tmp}
    process = subprocess.Popen(
        [sys.executable, str(REPO / "scripts" / "tune.py"), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        start_new_session=True,  # its own process group: the kill takes its Ray processes too
    )
    request.addfinalizer(lambda: shutil.rmtree(ray_tmp, ignore_errors=True))
    before = _kill_when(process, "[full] trial 2/3 round 3/4", timeout_s=400)
    assert "=== variant full" in before  # fedavg had finished, full was mid-study
    assert _survivors(ray_tmp, wait_s=30) == []  # the killed driver's Ray processes went with it

    capsys.readouterr()
    assert main([*args, "--resume"]) == 0
    printed = capsys.readouterr().out
    assert "variant fedavg: finished before the interruption, kept" in printed
    # trial 2 continued from its checkpoint (no round 1 again); trial 3 started afresh
    assert printed.count("round 1/4") == 1
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("resumable")
    runs = client.search_runs([experiment.experiment_id])
    assert not [r for r in runs if r.info.status == "RUNNING"]  # no orphans
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    assert sorted(r.data.tags["variant"] for r in parents) == ["fedavg", "full"]  # one parent each, reused
    reference, resumed = _trials(reference_uri), _trials(uri)
    assert len(reference) == 4  # fedavg + 3 searched trials
    assert resumed == reference  # same trials, same configs, every round once, the same numbers
    assert any(r.data.tags.get("resumed") == "true" for r in runs)  # the interrupted trial kept its run


def test_a_new_study_keeps_the_previous_study_record(tmp_path):
    from raytune_fl.config import parse_space
    from raytune_fl.tune.manifest import StudyManifest

    space = parse_space(tiny_space("kept"))
    first = StudyManifest.start(tmp_path, space, "sqlite:///x.db")
    first.variants["fedavg"] = {"experiment_path": "p", "parent_run_id": "r", "outcome": None}
    first.save()
    StudyManifest.start(tmp_path, space, "sqlite:///x.db")
    kept = sorted(tmp_path.glob("kept.study.*.json"))
    assert len(kept) == 1 and '"parent_run_id": "r"' in kept[0].read_text()
    assert StudyManifest.load(tmp_path, space, "sqlite:///x.db").variants == {}
