"""Issue 59: examples/slurm/study.sbatch, unchanged, under a real Slurm on this machine (Debian's slurm-wlm and
munge, installed where absent; munged, slurmctld and slurmd started by hand, no systemd). One node of 2 CPUs, a
tiny space, the script's settings given in the environment: the job runs the search and the ablation and must end
COMPLETED, its MLflow server's database holding the parent and trial runs, its log showing the progress lines while
it ran. Every process started here is ended by its id."""

from __future__ import annotations

import getpass
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from mlflow.tracking import MlflowClient

from tests.support import REPO, tiny_space
from tests.support.killed_study import survivors
from tests.support.ray_nodes import free_ports

SBATCH = REPO / "examples" / "slurm" / "study.sbatch"
PACKAGES = ["slurmctld", "slurmd", "slurm-client", "munge"]
DAEMONS = ("munged", "slurmctld", "slurmd")
BOUND_S = 20  # any one Slurm client command: a stalled munge would block it for good


def _install() -> None:
    """Debian's Slurm and munge where a daemon is missing; the test is skipped where apt cannot install them."""
    if all(shutil.which(name) for name in (*DAEMONS, "sbatch")):
        return
    sudo = [] if os.geteuid() == 0 else ["sudo", "-n"]
    try:
        done = subprocess.run(
            [*sudo, "apt-get", "install", "-y", "-q", *PACKAGES],
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        pytest.skip(f"cannot install {' '.join(PACKAGES)}: {error}")
    if done.returncode != 0:
        pytest.skip(f"apt-get cannot install {' '.join(PACKAGES)}: {done.stderr.strip()[-300:]}")


def _slurm_conf(root: Path, host: str, ports: list[int]) -> Path:
    user = getpass.getuser()
    lines = [
        "ClusterName=test",
        f"SlurmctldHost={host}(127.0.0.1)",
        f"SlurmctldPort={ports[0]}",
        f"SlurmdPort={ports[1]}",
        f"SlurmUser={user}",
        f"SlurmdUser={user}",
        f"AuthInfo=socket={root / 'munge' / 'munge.socket'}",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_CPU",
        "MpiDefault=none",
        "ReturnToService=2",
        "KillWait=30",
        f"StateSaveLocation={root / 'state'}",
        f"SlurmdSpoolDir={root / 'spool'}",
        f"SlurmctldPidFile={root / 'slurmctld.pid'}",
        f"SlurmdPidFile={root / 'slurmd.pid'}",
        f"SlurmctldLogFile={root / 'slurmctld.log'}",
        f"SlurmdLogFile={root / 'slurmd.log'}",
        f"NodeName={host} NodeAddr=127.0.0.1 CPUs=2 State=UNKNOWN",
        f"PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP",
    ]
    path = root / "slurm.conf"
    path.write_text("\n".join(lines) + "\n")
    return path


def _wait_for(check, what: str, timeout_s: float, logs: list[Path]) -> None:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if check():
            return
        time.sleep(0.3)
    said = "\n".join(f"--- {log}\n{log.read_text()[-2000:]}" for log in logs if log.exists())
    pytest.fail(f"{what} not within {timeout_s:g} s\n{said}")


def _run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(args, capture_output=True, text=True, env=env, timeout=BOUND_S)


@pytest.fixture(scope="module")
def slurm(tmp_path_factory) -> Iterator[dict[str, str]]:
    """A one-node Slurm of 2 CPUs on this machine: the environment its client commands need."""
    _install()
    root = Path(str(tmp_path_factory.mktemp("slurm")))
    for folder in ("munge", "state", "spool"):
        (root / folder).mkdir()
    (root / "munge").chmod(0o755)  # munged refuses a socket folder others cannot reach into (0700)
    key = root / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    host = socket.gethostname()
    env = {**os.environ, "SLURM_CONF": str(_slurm_conf(root, host, free_ports(2)))}
    started: list[subprocess.Popen] = []

    def start(argv: list[str], log: str) -> None:
        with open(root / log, "w") as out:
            started.append(subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env))

    try:
        socket_path = root / "munge" / "munge.socket"
        start(
            ["munged", "-F", "--force", f"--key-file={key}", f"--socket={socket_path}"]
            + [f"--pid-file={root / 'munged.pid'}", f"--log-file={root / 'munged.log'}"]
            + [f"--seed-file={root / 'munge.seed'}"],
            "munged.out",
        )
        _wait_for(socket_path.exists, "munged's socket", 10, [root / "munged.log", root / "munged.out"])
        start(["slurmctld", "-D", "-i"], "slurmctld.out")
        start(["slurmd", "-D", "-N", host], "slurmd.out")
        logs = [root / name for name in ("slurmctld.log", "slurmd.log", "slurmctld.out", "slurmd.out")]

        def idle() -> bool:
            try:
                return _run(["sinfo", "-h", "-o", "%T"], env).stdout.strip() == "idle"
            except subprocess.TimeoutExpired:
                return False

        _wait_for(idle, "the node idle", 30, logs)
        yield env
    finally:
        for process in reversed(started):  # slurmd, slurmctld, then munged: by the ids started here
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _space(tmp_path: Path, rounds: int) -> Path:
    """The tiny space: univarfl, one searched trial of `rounds`, clients in the trial (one variant: CI's time)."""
    data = tiny_space("slurm", rounds=rounds, resources={"actors": 0, "cpus_per_actor": 1})
    data["tune"]["num_samples"] = 1
    del data["variants"]["fedavg"]
    path = tmp_path / "slurm.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _submit(slurm: dict[str, str], tmp_path: Path, log: Path, rounds: int = 2, **settings: str) -> str:
    """study.sbatch as it is, sized to this machine by sbatch's options and the script's settings."""
    ray_port, mlflow_port = free_ports(2)
    env = {k: v for k, v in slurm.items() if not k.startswith(("RAY_", "MLFLOW_"))} | {
        "PATH": f"{Path(sys.executable).parent}:{slurm['PATH']}",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), slurm.get("PYTHONPATH")])),
        "VENV": "",  # this Python: the environment sbatch passes on
        "SPACE": str(_space(tmp_path, rounds)),
        "SHARED": str(tmp_path / "shared"),
        "HEAD_PORT": str(ray_port),
        "MLFLOW_PORT": str(mlflow_port),
        "GPUS_PER_ACTOR": "0",
        "ACTORS": "0",
        "SEEDS": "1",
        "GRID": "alpha=0.5",
        "RAY_TMPDIR": tempfile.mkdtemp(prefix="rs", dir="/tmp"),  # short: Ray's socket paths have a length limit
        **settings,
    }
    options = ["--nodes=1", "--cpus-per-task=2", "--gpus-per-task=0", f"--output={log}", f"--chdir={REPO}"]
    done = _run(["sbatch", "--parsable", *options, str(SBATCH)], env)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().split(";")[0]


def _state(slurm: dict[str, str], job: str) -> str:
    """The job's state while slurmctld knows it (MinJobAge, 300 s after its end): PENDING, RUNNING, COMPLETED..."""
    shown = _run(["scontrol", "-o", "show", "job", job], slurm).stdout
    return next((word.split("=", 1)[1] for word in shown.split() if word.startswith("JobState=")), "")


def _follow(slurm, job: str, log: Path, timeout_s: float, until: str | None = None) -> tuple[str, list[str]]:
    """Polls the job (bounded) until it ends or, with `until`, its log shows that text; the state, and the log's
    lines seen while it was RUNNING."""
    seen: list[str] = []
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        state = _state(slurm, job)
        text = log.read_text() if log.exists() else ""
        if state == "RUNNING":
            seen = text.splitlines()
        if state not in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING", ""):
            return state, seen
        if until is not None and until in text:
            return state, seen
        time.sleep(0.5)
    _run(["scancel", job], slurm)
    pytest.fail(f"job {job} still {state} after {timeout_s:g} s:\n{log.read_text()[-3000:] if log.exists() else ''}")


def _parents(shared: Path) -> dict[str, tuple[str, dict[str, str]]]:
    """The study's parent runs in the job's MLflow database: name -> (status, tags); and its trial runs' count."""
    client = MlflowClient(f"sqlite:///{shared / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("slurm").experiment_id])
    return {r.info.run_name: (r.info.status, r.data.tags) for r in runs if "mlflow.parentRunId" not in r.data.tags}


def _children(shared: Path) -> list:
    client = MlflowClient(f"sqlite:///{shared / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("slurm").experiment_id])
    return [r for r in runs if "mlflow.parentRunId" in r.data.tags]


def test_the_study_job_completes_with_its_runs_and_live_progress(slurm, tmp_path, request):
    ray_tmp = tempfile.mkdtemp(prefix="rs", dir="/tmp")  # short: Ray's socket paths have a length limit
    request.addfinalizer(lambda: shutil.rmtree(ray_tmp, ignore_errors=True))
    log = tmp_path / "job.log"
    job = _submit(slurm, tmp_path, log, RAY_TMPDIR=ray_tmp)
    state, seen = _follow(slurm, job, log, 540)
    printed = log.read_text()
    assert state == "COMPLETED", printed[-3000:]
    assert "Ray nodes up: 1 of 1" in printed
    # unbuffered: the progress lines were in the log while the job ran, not only at its end
    assert any(line.startswith("=== variant full") for line in seen), seen[-40:]
    assert any(line.startswith("[full] trial 1/1 finished") for line in seen), seen[-40:]
    parents = _parents(tmp_path / "shared")
    assert parents["full"][0] == "FINISHED", parents
    assert any(tags.get("role") == "parent" and status == "FINISHED" for status, tags in parents.values()), parents
    assert {r.data.tags["variant"] for r in _children(tmp_path / "shared")} == {"full"}
    assert (tmp_path / "shared" / "reports" / "ablation_table.md").is_file()
    # nothing of the job is left: the Ray node, the server, the drivers
    assert survivors(str(tmp_path / "shared"), 20) == [] and survivors(ray_tmp, 20) == []


def test_a_scancelled_study_stops_cleanly_with_its_resume_line(slurm, tmp_path, request):
    """scancel: Slurm sends SIGTERM to every process of the job at once (the script, the driver, the Ray node and the
    MLflow server); the driver must stop well inside KillWait (30 s), say how to resume, and leave nothing behind."""
    ray_tmp = tempfile.mkdtemp(prefix="rs", dir="/tmp")
    request.addfinalizer(lambda: shutil.rmtree(ray_tmp, ignore_errors=True))
    log = tmp_path / "job.log"
    job = _submit(slurm, tmp_path, log, rounds=40, RAY_TMPDIR=ray_tmp, VERBOSE="1")
    _follow(slurm, job, log, 300, until="[full] trial 1/1 round 1/")
    assert _run(["scancel", job], slurm).returncode == 0
    state, _ = _follow(slurm, job, log, 60)
    # Slurm shows CANCELLED at once, while the job's processes still stop: wait for them (past KillWait, where
    # Slurm would SIGKILL a driver still stopping, and its lines below would be missing) before reading the log
    left = survivors(str(tmp_path / "shared"), 45) + survivors(ray_tmp, 10)
    printed = log.read_text()
    assert state == "CANCELLED", printed[-3000:]
    # the driver stopped itself (before Slurm's SIGKILL at KillWait, which would leave no such lines)
    assert "interrupted by SIGTERM" in printed and "resume with: raytune-fl tune --space" in printed, printed[-3000:]
    assert "Traceback" not in printed, printed[-3000:]
    assert left == []
