"""Issue 50: a study submitted as a Ray job (`ray job submit --working-dir`) to a head that runs Ray's job server
finishes with its MLflow runs and model where the user said. The job's entrypoint is the real `raytune-fl tune`:
it joins the cluster Ray names in RAY_ADDRESS (no private one), the plugin beside the space in the working dir
reaches the trial's worker, the tracking URI comes from MLFLOW_TRACKING_URI in the job's runtime_env (as a RayJob
manifest sets it), and a relative --storage, which would land in Ray's temporary copy of the working dir, is
refused with nothing written."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml
from mlflow.entities import LoggedModelStatus
from mlflow.tracking import MlflowClient

from tests.support.ray_nodes import Node, ray_executable, start_node, stop_node

JOB_S = 300  # one job: the CLI's imports, a 2-round trial and the model's export (~40 s on 2 idle cores)
SERVER_UP_S = 60  # the dashboard's job module answering after `ray start` returned

PLUGIN = '''
"""Registers the model `job_mlp`: the space names it, so a worker that lacks this module fails the trial."""
from torch import nn

from raytune_fl import register_model


class JobMLP(nn.Module):
    def __init__(self, in_channels, num_classes, image_size):
        super().__init__()
        inputs = in_channels * image_size[0] * image_size[1]
        self.body = nn.Sequential(nn.Flatten(), nn.Linear(inputs, 32), nn.ReLU())
        self.classifier = nn.Linear(32, num_classes)

    def forward(self, x):
        z = self.body(x)
        return self.classifier(z), z


def job_mlp(in_channels, num_classes, image_size):
    return JobMLP(in_channels, num_classes, image_size)


register_model("job_mlp", job_mlp)
'''

SPACE = {
    "name": "ray-job",
    "plugins": ["job_model"],
    "base": {
        "dataset": "digits",
        "model": "job_mlp",
        "partition": {"kind": "dirichlet", "alpha": 0.5, "clients": 3, "min_size": 20, "seed": 0},
        "rounds": 2,
        "batch_size": 32,
        "resources": {"actors": 0, "driver_cpus": 1},
    },
    "variants": {"fedprox": {"method": "fedprox", "search": {"mu": {"loguniform": [0.001, 1.0]}}}},
    "tune": {"num_samples": 1, "max_concurrent": 1, "scheduler": {"asha": None}, "seed": 0},
}


@pytest.fixture(scope="module")
def head():
    node = start_node(num_cpus=2, job_server=True)
    try:
        wait_for_job_server(node)
        yield node
    finally:
        stop_node(node)  # by its own `ray start` PID, never `ray stop`


def wait_for_job_server(node: Node) -> None:
    """The job module answers (with the cluster's token: the dashboard refuses requests without it)."""
    request = urllib.request.Request(
        f"{node.job_server}/api/version", headers={"Authorization": f"Bearer {node.env['RAY_AUTH_TOKEN']}"}
    )
    deadline = time.time() + SERVER_UP_S
    while True:
        try:
            with urllib.request.urlopen(request, timeout=5) as reply:
                if reply.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        if time.time() > deadline:
            pytest.fail(f"no job server at {node.job_server} within {SERVER_UP_S} s:\n{node.log_tail()}")
        time.sleep(0.5)


@pytest.fixture
def working_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "job"  # outside the repository: the head's processes know nothing of it
    folder.mkdir()
    (folder / "space.yaml").write_text(yaml.safe_dump(SPACE))
    (folder / "job_model.py").write_text(PLUGIN)
    return folder


def submit(head: Node, working_dir: Path, job_id: str, command: list[str], env_vars: dict[str, str]) -> tuple[int, str]:
    """`ray job submit` as a user types it, waiting for the job's end: its exit code (1 where the job FAILED) and
    its output (the job's own included, then Ray's `Job '<id>' succeeded` or `failed`)."""
    raytune_fl = str(Path(sys.executable).with_name("raytune-fl"))  # the tests' install, not PATH's first
    argv = [ray_executable(), "job", "submit", "--address", head.job_server, "--submission-id", job_id]
    argv += ["--working-dir", str(working_dir), "--runtime-env-json", json.dumps({"env_vars": env_vars})]
    argv += ["--", raytune_fl, *command]
    done = subprocess.run(argv, env=head.env, capture_output=True, text=True, timeout=JOB_S)
    return done.returncode, done.stdout + done.stderr


def test_a_study_submitted_as_a_ray_job_finishes_with_its_runs_and_model(head, working_dir, tmp_path):
    outputs = tmp_path / "shared"  # stands for the cluster's shared filesystem
    outputs.mkdir()
    uri = f"sqlite:///{outputs / 'mlflow.db'}"
    env_vars = {"MLFLOW_TRACKING_URI": uri}  # as a RayJob's container sets it: no --mlflow-uri

    # the default --storage is relative: it would land in Ray's temporary copy of the working dir
    rc, refused = submit(head, working_dir, "refused", ["tune", "--space", "space.yaml"], env_vars)
    assert rc == 1 and "Job 'refused' failed" in refused, refused[-3000:]
    assert "error: --storage: ./ray_results is in this Ray job's working dir" in refused, refused[-3000:]
    assert not (outputs / "mlflow.db").exists()  # nothing written anywhere
    copy = Path(refused.split("is in this Ray job's working dir ", 1)[1].split(",", 1)[0])
    assert copy != working_dir and {p.name for p in copy.iterdir()} <= {"space.yaml", "job_model.py", "__pycache__"}

    tune = ["tune", "--space", "space.yaml", "--storage", str(outputs / "ray")]  # an absolute --storage
    rc, out = submit(head, working_dir, "study", tune, env_vars)
    assert rc == 0 and "Job 'study' succeeded" in out, out[-5000:]
    # it joined the head Ray named in RAY_ADDRESS (a private cluster would have its own port)
    cluster_line = next(line for line in out.splitlines() if line.startswith("Ray cluster: "))
    assert cluster_line.split()[2].endswith(f":{head.port}"), cluster_line
    assert f"MLflow tracking URI: {uri}" in out, out[-5000:]

    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("ray-job")
    runs = client.search_runs([experiment.experiment_id])
    parents = [r for r in runs if "trial_id" not in r.data.tags]
    trials = [r for r in runs if "trial_id" in r.data.tags]
    assert len(parents) == 1 and len(trials) == 1, [r.data.tags for r in runs]
    parent, trial = parents[0], trials[0]
    assert trial.data.tags["mlflow.parentRunId"] == parent.info.run_id
    assert trial.data.tags["rounds_completed"] == "2" and trial.info.status == "FINISHED"
    assert trial.data.params["model"] == "job_mlp"  # the plugin's model, built in the trial's Ray worker
    model = client.get_logged_model(parent.data.tags["model_id"])  # exported by the helper, which imports it too
    assert model.status == LoggedModelStatus.READY and model.source_run_id == trial.info.run_id
    assert (outputs / "ray" / "ray-job.study.json").is_file()  # --resume's record, in the shared storage
    written = {p.name for p in outputs.iterdir()}  # the Optuna study and the artifacts beside the MLflow database
    assert written == {"mlflow.db", "optuna.db", "mlartifacts", "ray"}, written
    assert {p.name for p in copy.iterdir()} <= {"space.yaml", "job_model.py", "__pycache__"}  # nothing in the copy
