"""A study driver killed mid-run (SIGKILL of its process group) and what it leaves behind: the resume tests' parts."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from mlflow.tracking import MlflowClient

from tests.support import REPO, command_lines, tiny_space


def resumable_space(tmp_path: Path) -> Path:
    data = tiny_space("resumable")
    data["base"].update(rounds=4, resources={"actors": 0, "cpus_per_actor": 1})
    data["variants"] = {"fedavg": {"method": "fedavg"}, "full": data["variants"]["full"]}
    data["tune"].update(num_samples=3, scheduler={"asha": None})
    path = tmp_path / "resumable.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def finished_trials(uri: str) -> dict[tuple, dict]:
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


def start_script(script: str, args: list[str], ray_tmp: str, cwd: Path | None = None) -> subprocess.Popen:
    """`scripts/<script>` in its own process group (as a terminal's foreground job: a kill or Ctrl-C of the group
    reaches the Ray cluster it starts too), on a private cluster under `ray_tmp`, its output merged into stdout."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_ADDRESS")} | {"RAY_TMPDIR": ray_tmp}
    return subprocess.Popen(
        [sys.executable, str(REPO / "scripts" / script), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        cwd=cwd,
        start_new_session=True,
    )


def kill_when(process: subprocess.Popen, marker: str, timeout_s: float) -> str:
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


def survivors(marker: str, wait_s: float) -> list[str]:
    deadline = time.time() + wait_s
    while True:
        found = [line[:120] for line in command_lines() if marker in line]
        if not found or time.time() > deadline:
            return found
        time.sleep(1)
