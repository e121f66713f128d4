"""Issue 50: inside a Ray job submitted with --working-dir, the commands refuse every output that would land in Ray's
temporary copy of that folder (relative --storage, the default MLflow and Optuna SQLite files, ablate's --out),
before Ray starts and with nothing written; and MLFLOW_TRACKING_URI, which a RayJob's container sets, is the
tracking URI wherever --mlflow-uri is not given. The job is simulated by the variable Ray's job supervisor sets
for its entrypoint (its runtime_env with a working_dir); the real job: tests/system/test_ray_job.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from raytune_fl.cli import ablate, main
from raytune_fl.runtime import cluster
from tests.support import tiny_space

JOB_CONFIG = json.dumps({"runtime_env": {"working_dir": "gcs://_ray_pkg_0123456789abcdef.zip"}, "metadata": {}})


@pytest.fixture
def job_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A job's working dir holding the space, as the job's entrypoint sees it: its current directory."""
    folder = tmp_path / "runtime_resources" / "working_dir_files" / "_ray_pkg_0123456789abcdef"  # as Ray unpacks it
    folder.mkdir(parents=True)
    (folder / "space.yaml").write_text(yaml.safe_dump(tiny_space()))
    monkeypatch.chdir(folder)
    monkeypatch.setenv(cluster.JOB_CONFIG_VAR, JOB_CONFIG)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    return folder


def refused(command, argv: list[str], job_dir: Path, capsys: pytest.CaptureFixture) -> str:
    """The command's first error line, after checking that it refused with nothing written."""
    root = job_dir.parents[2]  # the test's folder: the job's and the "shared" outputs
    before = sorted(p.name for p in root.rglob("*"))
    assert command(argv) == 2
    assert sorted(p.name for p in root.rglob("*")) == before  # nothing made, here or outside
    return capsys.readouterr().err.splitlines()[0]


def test_the_default_storage_in_a_jobs_working_dir_is_refused(job_dir, capsys):
    line = refused(main, ["--space", "space.yaml"], job_dir, capsys)
    assert line.startswith(f"error: --storage: ./ray_results is in this Ray job's working dir {job_dir}, "), line


def test_the_default_mlflow_store_and_a_relative_one_from_the_environment_are_refused(
    job_dir, capsys, monkeypatch, tmp_path
):
    storage = ["--space", "space.yaml", "--storage", str(tmp_path / "shared" / "ray")]
    line = refused(main, storage, job_dir, capsys)
    assert line.startswith("error: --mlflow-uri (the default): ./mlflow.db is in this Ray job's working dir"), line
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "sqlite:///runs/m.db")
    (job_dir / "runs").mkdir()
    line = refused(main, storage, job_dir, capsys)
    assert line.startswith("error: MLFLOW_TRACKING_URI: ./runs/m.db is in this Ray job's working dir"), line


def test_a_relative_optuna_storage_and_ablates_default_out_are_refused(job_dir, capsys, tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    outside = ["--space", "space.yaml", "--storage", str(shared / "ray"), "--mlflow-uri", f"sqlite:///{shared}/m.db"]
    line = refused(main, [*outside, "--optuna-storage", "sqlite:///o.db"], job_dir, capsys)
    assert line.startswith("error: --optuna-storage: ./o.db is in this Ray job's working dir"), line
    line = refused(ablate.main, outside, job_dir, capsys)
    assert line.startswith("error: --out: ./reports/tiny is in this Ray job's working dir"), line


def test_only_paths_in_the_jobs_copy_of_its_working_dir_are_refused(job_dir, monkeypatch):
    monkeypatch.setenv(cluster.JOB_CONFIG_VAR, json.dumps({"runtime_env": {}, "metadata": {}}))  # its image's code
    assert cluster.job_dir_problem("ray_results", "--storage") is None
    monkeypatch.setenv(cluster.JOB_CONFIG_VAR, JOB_CONFIG)
    assert cluster.job_dir_problem("ray_results", "--storage") is not None
    assert cluster.job_dir_problem(job_dir.parent / "elsewhere", "--storage") is None  # beside it is not in it
    cluster.check_store_outside_job_dir("http://mlflow.lab:5000", "--mlflow-uri")  # a server is never in it
    cluster.check_store_outside_job_dir("postgresql://db.lab/optuna", "--optuna-storage")
    cluster.check_store_outside_job_dir("databricks", "--mlflow-uri")  # MLflow's name, not a folder
    with pytest.raises(ValueError, match=r"^--mlflow-uri: ./mlruns is in this Ray job's working dir"):
        cluster.check_store_outside_job_dir("file:mlruns", "--mlflow-uri")
    (job_dir / "sub").mkdir()
    monkeypatch.chdir(job_dir / "sub")  # `cd sub && raytune-fl ...`: still in the copy
    assert cluster.job_dir_problem("ray_results", "--storage") is not None
    monkeypatch.chdir(job_dir.parents[2])  # `cd /elsewhere && raytune-fl ...`: relative paths are not in it
    assert cluster.job_dir_problem("ray_results", "--storage") is None


def test_mlflow_tracking_uri_is_the_tracking_uri_where_no_option_gives_one(monkeypatch, tmp_path, capsys):
    space = tmp_path / "space.yaml"
    space.write_text(yaml.safe_dump(tiny_space()))
    missing = tmp_path / "no-such-folder" / "m.db"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{missing}")
    assert main(["--space", str(space), "--storage", str(tmp_path / "ray")]) == 2
    line = capsys.readouterr().err.splitlines()[0]
    assert line.startswith(f"error: MLFLOW_TRACKING_URI 'sqlite:///{missing}': the folder of the database"), line
    assert not (tmp_path / "ray").exists()


CLASH = """
import json, os, sys
from raytune_fl.plugins import PluginError, runtime_env
from raytune_fl.runtime import cluster

os.environ[cluster.JOB_CONFIG_VAR] = json.dumps({"runtime_env": {"py_modules": ["/elsewhere"]}, "metadata": {}})
try:  # the job's runtime_env is merged before Ray looks for the cluster: nothing needs to run
    cluster.start_ray("auto", {**runtime_env(["json"]), "py_modules": [sys.argv[1]]})
except PluginError as error:
    print("REFUSED", error)
"""


def test_a_jobs_runtime_env_that_clashes_with_the_plugins_is_refused_by_name(tmp_path):
    # a process of its own: this one may have started Ray already (the session's cluster)
    done = subprocess.run([sys.executable, "-c", CLASH, str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert "REFUSED plugins: this Ray job's runtime_env already sets py_modules," in done.stdout, done.stderr[-2000:]
    assert "leave it out of `ray job submit --runtime-env-json`" in done.stdout
