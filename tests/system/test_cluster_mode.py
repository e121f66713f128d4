"""Cluster mode (issue #5): `scripts/tune.py` joins an existing Ray cluster instead of starting a private one.

The cluster is this module's own `ray start --head --block` (tests/support/ray_nodes.py): its own free ports, temp dir,
process session and auth token, so it never touches another Ray on the machine; teardown stops only what it started.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.support import REPO, tiny_space
from tests.support.ray_nodes import CliRun, Node, free_ports, gcs, kill_session, start_cli, start_node, stop_node

STUDY_S = 150  # one tiny study end to end (imports torch; ~20-40 s on 2 cores)
FAIL_FAST_S = 60  # a trial that cannot fit must be refused well within this


@pytest.fixture(scope="module")
def head():
    cluster = start_node(num_cpus=2, num_gpus=0, resources={"cluster_marker": 1})
    try:
        nodes = gcs(cluster)["nodes"]
        assert [(n.get("CPU"), n.get("GPU", 0), n.get("cluster_marker")) for n in nodes] == [(2, 0, 1)], nodes
        yield cluster
    finally:
        stop_node(cluster)  # fails, keeping head.log, when processes were left behind


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    path = tmp_path_factory.mktemp("cluster")
    data = tiny_space("cluster", rounds=2, resources={"actors": 2, "cpus_per_actor": 0.5})  # 1 CPU of the 2
    del data["variants"]["full"]
    data["tune"]["num_samples"] = 1
    (path / "space.yaml").write_text(yaml.safe_dump(data))
    return path


def _start_cli(
    head: Node, workdir: Path, name: str, *args: str, address_env: bool = False, script: str = "tune.py"
) -> CliRun:
    env = dict(head.env)
    if address_env:
        env["RAY_ADDRESS"] = head.address
    else:
        args = ("--address", head.address, *args)
    # its own results and MLflow store: runs at the same time would race on the storage write probe, the study
    # manifest and the creation of a new store's tables
    command = ["--space", str(workdir / "space.yaml"), "--storage", str(workdir / f"{name}-results")]
    command += ["--mlflow-uri", f"sqlite:///{workdir / name}.db", *args]
    return start_cli(REPO / "scripts" / script, command, workdir, name, env, REPO)


def _finish(run: CliRun, timeout: float) -> tuple[int, str, str, float]:
    return run.finish(timeout)


def _assert_joined(head: Node, run: CliRun) -> None:
    """The CLI drove this head, not a private cluster: it says so, and the head lists it as a finished driver."""
    assert f":{head.port} (2 CPU, 0 GPU)" in run.output()[0], "tune.py did not report the test cluster" + run.context()
    pid = run.process.pid
    deadline = time.time() + 15  # the head marks a driver's job dead once it notices the driver has gone
    while (drivers := {job["pid"]: job["dead"] for job in gcs(head)["jobs"]}).get(pid) is False:
        if time.time() > deadline:
            break
        time.sleep(0.5)
    assert drivers.get(pid) is True, f"driver {pid} is not a finished job of the head: {drivers}" + run.context()


REFUSED = {  # an over-asking override -> what stderr must say
    "base.resources.gpus_per_actor=0.5": ["needs 1.5 GPU", "the Ray cluster has 0", "resources.gpus_per_actor"],
    "base.resources.actors=8": ["needs 4 CPU", "the Ray cluster has 2", "resources.actors"],
}


@pytest.fixture(scope="module")
def refused(head, workdir) -> dict[str, CliRun]:
    """The over-asking runs, started early: they mostly import, so they overlap a study's waits (saves ~10 s)."""
    runs = {change: _start_cli(head, workdir, f"refused{i}", "--set", change) for i, change in enumerate(REFUSED)}
    yield runs
    for run in runs.values():  # never collected (the test deselected or failed early): stop what is still running
        if run.process.poll() is None:
            kill_session(run.process.pid)
            run.process.wait(timeout=30)


def test_study_joins_the_cluster_given_by_address(head, workdir):
    run = _start_cli(head, workdir, "by-address")
    rc, out, _, _ = _finish(run, STUDY_S)
    assert rc == 0, f"tune.py exited with {rc}" + run.context()
    assert "fedavg: val_acc " in out and "(round 2)" in out, run.context()
    _assert_joined(head, run)


@pytest.mark.usefixtures("refused")  # they run meanwhile; checked by the next test
def test_study_joins_the_cluster_given_by_ray_address(head, workdir):
    # actors=0 (clients train in the trial process) starts one Ray worker instead of three: ~10 s faster
    run = _start_cli(head, workdir, "by-env", "--set", "base.resources.actors=0", address_env=True)
    rc, out, _, _ = _finish(run, STUDY_S)
    assert rc == 0, f"tune.py exited with {rc}" + run.context()
    assert "fedavg: val_acc " in out and "(round 2)" in out, run.context()
    _assert_joined(head, run)


def test_a_trial_that_cannot_fit_the_cluster_fails_fast(head, refused):
    for change, run in refused.items():
        rc, _, err, seconds = _finish(run, FAIL_FAST_S)
        context = f"--set {change}" + run.context()
        assert rc == 2, f"exited with {rc}, expected 2\n{context}"
        assert "Traceback" not in err, context
        for phrase in REFUSED[change]:
            assert phrase in err, f"stderr lacks {phrase!r}\n{context}"
        assert seconds < FAIL_FAST_S, context
        _assert_joined(head, run)  # refused on this cluster's totals, not a private cluster's


# after the refused runs are checked: they time themselves from their start, early in the module
def test_an_ablation_runs_on_the_cluster_given_by_address(head, workdir):
    run = _start_cli(
        head, workdir, "ablation", "--seeds", "1", "--grid", "rho=1.0", "--set", "base.resources.actors=0",
        "--out", str(workdir / "ablation-report"), "--no-dashboard", script="ablate.py",
    )  # fmt: skip
    rc, out, _, _ = _finish(run, STUDY_S)
    assert rc == 0, f"ablate.py exited with {rc}" + run.context()
    assert "no tuned study in MLflow" in out and "| fedavg |" in out, run.context()
    assert (workdir / "ablation-report" / "ablation_table.md").is_file()
    _assert_joined(head, run)


def test_an_unreachable_cluster_fails_fast_with_a_clear_message(workdir):
    address = f"127.0.0.1:{free_ports(1)[0]}"  # nothing listens there
    command = [sys.executable, str(REPO / "scripts" / "tune.py"), "--space", str(workdir / "space.yaml")]
    command += [
        "--storage",
        str(workdir / "unreachable-results"),
        "--mlflow-uri",
        f"sqlite:///{workdir}/unreachable.db",
    ]
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    done = subprocess.run(
        [*command, "--address", address], cwd=REPO, env=env, capture_output=True, text=True, timeout=FAIL_FAST_S
    )
    assert done.returncode == 2, done.stderr[-2000:]
    assert f"--address: cannot join the Ray cluster: nothing answers at {address}" in done.stderr
    assert "Traceback" not in done.stderr
