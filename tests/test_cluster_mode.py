"""Cluster mode (issue #5): `scripts/tune.py` joins an existing Ray cluster instead of starting a private one.

The cluster is this module's own `ray start --head --block`: its own free ports, short temp dir, process session
and auth token, so it never touches another Ray on the machine. Teardown signals only that `ray start` process,
then checks that every process of its session is gone (it stops what it started; see `_stop_head`).
"""

from __future__ import annotations

import importlib.util
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from .conftest import REPO, tiny_space

HEAD_START_S = 60  # `ray start --head` up and answering
HEAD_STOP_S = 45  # SIGTERM: the node drains (up to 30 s by Ray's default), then stops its processes
CHILDREN_GONE_S = 15  # the head's processes gone after `ray start` itself exited
STUDY_S = 150  # one tiny study end to end (imports torch; ~20-40 s on 2 cores)
FAIL_FAST_S = 60  # a trial that cannot fit must be refused well within this

# ray._raylet.GcsClient is private API, but ray is pinned (==2.60.0); it answers in ~1 s without ray.init
_GCS_QUERY = """
import json, sys
from ray._raylet import GcsClient
client = GcsClient(address=sys.argv[1])
jobs = [{"pid": j.driver_pid, "dead": j.is_dead} for j in client.get_all_job_info().values()]
nodes = [dict(n.resources_total) for n in client.get_all_node_info().values()]
print(json.dumps({"jobs": jobs, "nodes": nodes}))
"""


@dataclass
class Head:
    process: subprocess.Popen
    address: str  # 127.0.0.1:<port>
    port: int
    temp_dir: str
    log: Path
    env: dict[str, str]  # what a driver needs to join: the cluster's auth token, no RAY_ADDRESS

    def log_tail(self, chars: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else "(no log)"


def _free_ports(count: int) -> list[int]:
    """Distinct ephemeral ports (outside Ray's default worker port range 10002-19999)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def _ray_executable() -> str:
    """The `ray` script of the interpreter running the tests (not whichever `ray` comes first on PATH)."""
    beside = Path(sys.executable).with_name("ray")
    found = str(beside) if beside.exists() else shutil.which("ray")
    if not found:
        pytest.fail("no `ray` executable beside the Python interpreter or on PATH")
    return found


def _processes(session: int, marker: str | None = None) -> dict[int, str]:
    """Live processes (pid -> command line) in `session`, or whose command line names `marker`."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # exited meanwhile
            continue
        state, _ppid, _pgrp, sid = stat.rsplit(")", 1)[1].split()[:4]
        if state == "Z":  # exited, only waiting to be reaped
            continue
        if int(sid) == session or (marker and marker in cmdline):
            found[int(entry)] = cmdline.strip()[:200]
    return found


def _kill_session(session: int) -> None:
    """SIGKILL a CLI run and anything it started: its own session (started with start_new_session=True)."""
    for pid in _processes(session):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _gcs(head: Head) -> dict:
    reply = subprocess.run(
        [sys.executable, "-c", _GCS_QUERY, head.address],
        env=head.env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert reply.returncode == 0, f"GCS query failed:\n{reply.stderr[-3000:]}"
    return json.loads(reply.stdout.strip().splitlines()[-1])


def _stop_head(head: Head) -> None:
    """SIGTERM to `ray start --block` only; it drains the node and stops the processes it started."""
    if head.process.poll() is None:
        head.process.send_signal(signal.SIGTERM)
        try:
            head.process.wait(timeout=HEAD_STOP_S)
        except subprocess.TimeoutExpired:
            head.process.kill()
            head.process.wait(timeout=10)
    # everything it started runs in its session (workers change process group, not session); the temp dir catches
    # anything that left the session
    marker = head.temp_dir + "/"
    deadline = time.time() + CHILDREN_GONE_S
    while (left := _processes(head.process.pid, marker)) and time.time() < deadline:
        time.sleep(0.25)
    for pid in left:  # only this head's own processes, one by one
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    if left:
        pytest.fail(
            f"`ray start --block` exited (rc {head.process.returncode}) but left {len(left)} of its processes "
            f"running {CHILDREN_GONE_S} s later (now killed):\n"
            + "\n".join(f"  {pid}: {cmd}" for pid, cmd in left.items())
            + f"\nhead log:\n{head.log_tail()}"
        )


@pytest.fixture(scope="module")
def head():
    temp_dir = tempfile.mkdtemp(prefix="rc", dir="/tmp")  # short: Ray's socket paths must fit in 107 bytes
    port, dashboard, client, agent = _free_ports(4)
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_AUTH_TOKEN_PATH")}
    # the head's own token, not ~/.ray/auth_token; a driver given an explicit address must opt in to token auth
    env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=secrets.token_hex(32))
    log = Path(temp_dir) / "head.log"
    command = [
        *(_ray_executable(), "start", "--head", "--block", "--disable-usage-stats"),
        *("--port", str(port), "--num-cpus", "2", "--num-gpus", "0", "--resources", '{"cluster_marker": 1}'),
        *("--include-dashboard=false", "--dashboard-port", str(dashboard), "--dashboard-agent-listen-port", str(agent)),
        *("--object-store-memory", str(300 * 2**20), "--temp-dir", temp_dir),
    ]
    if importlib.util.find_spec("grpc"):  # with ray[client], `ray start --head` serves Ray Client, by default on 10001
        command += ["--ray-client-server-port", str(client)]
    with open(log, "w") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    cluster = Head(process, f"127.0.0.1:{port}", port, temp_dir, log, env)
    try:
        deadline = time.time() + HEAD_START_S
        while "Ray runtime started" not in log.read_text(errors="replace"):
            if process.poll() is not None:
                pytest.fail(f"`ray start --head` exited with {process.returncode}:\n{cluster.log_tail()}")
            if time.time() > deadline:
                pytest.fail(f"`ray start --head` not up within {HEAD_START_S} s:\n{cluster.log_tail()}")
            time.sleep(0.25)
        # the session holds the head's processes, so the teardown check below is not vacuous
        assert any("raylet" in cmd for cmd in _processes(process.pid).values()), _processes(process.pid)
        nodes = _gcs(cluster)["nodes"]
        assert [(n.get("CPU"), n.get("GPU", 0), n.get("cluster_marker")) for n in nodes] == [(2, 0, 1)], nodes
        yield cluster
    finally:
        _stop_head(cluster)  # fails, keeping the temp dir and head.log, when processes were left behind
        shutil.rmtree(temp_dir, ignore_errors=True)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    path = tmp_path_factory.mktemp("cluster")
    data = tiny_space("cluster", rounds=2, resources={"actors": 2, "cpus_per_actor": 0.5})  # 1 CPU of the 2
    del data["variants"]["full"]
    data["tune"]["num_samples"] = 1
    (path / "space.yaml").write_text(yaml.safe_dump(data))
    return path


@dataclass
class Run:
    """One `scripts/tune.py` subprocess; its output goes to files, so nothing blocks on a full pipe."""

    process: subprocess.Popen
    stdout: Path
    stderr: Path
    started: float

    def output(self) -> tuple[str, str]:
        return self.stdout.read_text(errors="replace"), self.stderr.read_text(errors="replace")

    def context(self) -> str:
        out, err = self.output()
        return f"\nstdout:\n{out[-3000:]}\nstderr:\n{err[-3000:]}"


def _start_cli(
    head: Head, workdir: Path, name: str, *args: str, address_env: bool = False, script: str = "tune.py"
) -> Run:
    env = dict(head.env)
    if address_env:
        env["RAY_ADDRESS"] = head.address
    else:
        args = ("--address", head.address, *args)
    command = [sys.executable, str(REPO / "scripts" / script), "--space", str(workdir / "space.yaml")]
    # its own results and MLflow store: runs at the same time would race on the storage write probe, the study
    # manifest and the creation of a new store's tables
    command += ["--storage", str(workdir / f"{name}-results"), "--mlflow-uri", f"sqlite:///{workdir / name}.db", *args]
    stdout, stderr = workdir / f"{name}.out", workdir / f"{name}.err"
    with open(stdout, "w") as out, open(stderr, "w") as err:
        process = subprocess.Popen(command, cwd=REPO, env=env, stdout=out, stderr=err, start_new_session=True)
    return Run(process, stdout, stderr, time.time())


def _finish(run: Run, timeout: float) -> tuple[int, str, str, float]:
    """(rc, stdout, stderr, seconds since it started) of a CLI run; a run past `timeout` fails the test."""
    try:
        run.process.wait(timeout=max(1.0, run.started + timeout - time.time()))
    except subprocess.TimeoutExpired:
        _kill_session(run.process.pid)
        run.process.wait(timeout=30)
        pytest.fail(f"tune.py still running after {timeout:.0f} s{run.context()}")
    return run.process.returncode, *run.output(), time.time() - run.started


def _assert_joined(head: Head, run: Run) -> None:
    """The CLI drove this head, not a private cluster: it says so, and the head lists it as a finished driver."""
    assert f":{head.port} (2 CPU, 0 GPU)" in run.output()[0], "tune.py did not report the test cluster" + run.context()
    pid = run.process.pid
    deadline = time.time() + 15  # the head marks a driver's job dead once it notices the driver has gone
    while (drivers := {job["pid"]: job["dead"] for job in _gcs(head)["jobs"]}).get(pid) is False:
        if time.time() > deadline:
            break
        time.sleep(0.5)
    assert drivers.get(pid) is True, f"driver {pid} is not a finished job of the head: {drivers}" + run.context()


REFUSED = {  # an over-asking override -> what stderr must say
    "base.resources.gpus_per_actor=0.5": ["needs 1 GPU", "the Ray cluster has 0", "resources.gpus_per_actor"],
    "base.resources.actors=8": ["needs 4 CPU", "the Ray cluster has 2", "resources.actors"],
}


@pytest.fixture(scope="module")
def refused(head, workdir) -> dict[str, Run]:
    """The over-asking runs, started early: they mostly import, so they overlap a study's waits (saves ~10 s)."""
    runs = {change: _start_cli(head, workdir, f"refused{i}", "--set", change) for i, change in enumerate(REFUSED)}
    yield runs
    for run in runs.values():  # never collected (the test deselected or failed early): stop what is still running
        if run.process.poll() is None:
            _kill_session(run.process.pid)
            run.process.wait(timeout=30)


@pytest.mark.slow
def test_study_joins_the_cluster_given_by_address(head, workdir):
    run = _start_cli(head, workdir, "by-address")
    rc, out, _, _ = _finish(run, STUDY_S)
    assert rc == 0, f"tune.py exited with {rc}" + run.context()
    assert "fedavg: val_acc=" in out and "(round 2)" in out, run.context()
    _assert_joined(head, run)


@pytest.mark.slow
@pytest.mark.usefixtures("refused")  # they run meanwhile; checked by the next test
def test_study_joins_the_cluster_given_by_ray_address(head, workdir):
    # actors=0 (clients train in the trial process) starts one Ray worker instead of three: ~10 s faster
    run = _start_cli(head, workdir, "by-env", "--set", "base.resources.actors=0", address_env=True)
    rc, out, _, _ = _finish(run, STUDY_S)
    assert rc == 0, f"tune.py exited with {rc}" + run.context()
    assert "fedavg: val_acc=" in out and "(round 2)" in out, run.context()
    _assert_joined(head, run)


@pytest.mark.slow
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
@pytest.mark.slow
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


@pytest.mark.slow
def test_an_unreachable_cluster_fails_fast_with_a_clear_message(workdir):
    address = f"127.0.0.1:{_free_ports(1)[0]}"  # nothing listens there
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
