"""Real Ray nodes for cluster tests: `ray start --block` processes with their own ports, temp dir, process session
and auth token, so they never touch another Ray on the machine. A node is stopped by signalling only its own
`ray start` process; then every process of its session must be gone (we stop what we started, by PID)."""

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
from dataclasses import dataclass, field
from pathlib import Path

import pytest

NODE_START_S = 60  # `ray start` up and answering
NODE_STOP_S = 45  # SIGTERM: the node drains (up to 30 s by Ray's default), then stops its processes
CHILDREN_GONE_S = 15  # the node's processes gone after `ray start` itself exited

# ray._raylet.GcsClient is private API, but ray is pinned (==2.60.0); it answers in ~1 s without ray.init
_GCS_QUERY = """
import json, sys
from ray._raylet import GcsClient
client = GcsClient(address=sys.argv[1])
jobs = [{"pid": j.driver_pid, "dead": j.is_dead} for j in client.get_all_job_info().values()]
nodes = [{"id": n.node_id.hex(), "alive": n.state == 0, **dict(n.resources_total)}
         for n in client.get_all_node_info().values()]
print(json.dumps({"jobs": jobs, "nodes": nodes}))
"""


@dataclass
class Node:
    process: subprocess.Popen
    address: str  # the head's 127.0.0.1:<port> (a worker node's is its head's)
    port: int
    temp_dir: str
    log: Path
    env: dict[str, str]  # what a driver needs to join: the cluster's auth token, no RAY_ADDRESS
    workers: list[Node] = field(default_factory=list)  # nodes joined to this head
    job_server: str | None = None  # a head started with job_server: its dashboard's http://127.0.0.1:<port>

    def log_tail(self, chars: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else "(no log)"

    def ray_logs(self, chars: int = 1500) -> str:
        """The tails of the node's GCS and raylet logs: why a driver lost the cluster, when one did."""
        logs = Path(self.temp_dir) / "session_latest" / "logs"
        parts = []
        for name in ("gcs_server.out", "gcs_server.err", "raylet.err"):
            path = logs / name
            if path.exists() and (text := path.read_text(errors="replace").strip()):
                parts.append(f"--- {name}:\n{text[-chars:]}")
        return "\n".join(parts) or f"(no GCS or raylet log under {logs})"


def free_ports(count: int) -> list[int]:
    """Distinct ephemeral ports (outside Ray's default worker port range 10002-19999)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def ray_executable() -> str:
    """The `ray` script of the interpreter running the tests (not whichever `ray` comes first on PATH)."""
    beside = Path(sys.executable).with_name("ray")
    found = str(beside) if beside.exists() else shutil.which("ray")
    if not found:
        pytest.fail("no `ray` executable beside the Python interpreter or on PATH")
    return found


def processes(session: int, marker: str | None = None) -> dict[int, str]:
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


def kill_session(session: int) -> None:
    """SIGKILL a process started with start_new_session=True and everything in its session."""
    for pid in processes(session):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def gcs(node: Node) -> dict:
    """The cluster's jobs and nodes as its GCS sees them."""
    reply = subprocess.run(
        [sys.executable, "-c", _GCS_QUERY, node.address], env=node.env, capture_output=True, text=True, timeout=60
    )
    assert reply.returncode == 0, f"GCS query failed:\n{reply.stderr[-3000:]}"
    return json.loads(reply.stdout.strip().splitlines()[-1])


def start_node(
    num_cpus: float,
    num_gpus: float = 0,
    resources: dict[str, float] | None = None,
    head: Node | None = None,
    object_store_mb: int = 300,
    job_server: bool = False,
) -> Node:
    """A head (`head` None) or a worker node joined to `head`, up and registered when this returns. `job_server`: the
    head serves Ray's dashboard and job submission (`ray job submit`) on 127.0.0.1 (Node.job_server)."""
    temp_dir = tempfile.mkdtemp(prefix="rc", dir="/tmp")  # short: Ray's socket paths must fit in 107 bytes
    port, dashboard, client, agent, manager, runtime_env, metrics = free_ports(7)
    if head is None:
        env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_AUTH_TOKEN_PATH")}
        # the cluster's own token, not ~/.ray/auth_token; a driver given an explicit address must opt in
        env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=secrets.token_hex(32))
        where = ["--head", "--port", str(port), f"--include-dashboard={str(job_server).lower()}"]
        where += ["--dashboard-host", "127.0.0.1", "--dashboard-port", str(dashboard)]
        if importlib.util.find_spec("grpc"):  # with ray[client], a head serves Ray Client, by default on 10001
            where += ["--ray-client-server-port", str(client)]
    else:
        env = dict(head.env)
        where = ["--address", head.address]
    command = [
        *(ray_executable(), "start", *where, "--block", "--disable-usage-stats"),
        *("--num-cpus", f"{num_cpus:g}", "--num-gpus", f"{num_gpus:g}"),
        *("--dashboard-agent-listen-port", str(agent), "--node-manager-port", str(manager)),
        *("--runtime-env-agent-port", str(runtime_env), "--metrics-export-port", str(metrics)),
        *("--object-store-memory", str(object_store_mb * 2**20), "--temp-dir", temp_dir),
    ]
    if resources:
        command += ["--resources", json.dumps(resources)]
    log = Path(temp_dir) / "node.log"
    with open(log, "w") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    address = head.address if head is not None else f"127.0.0.1:{port}"
    node = Node(process, address, port if head is None else head.port, temp_dir, log, env)
    node.job_server = f"http://127.0.0.1:{dashboard}" if job_server and head is None else None
    try:
        deadline = time.time() + NODE_START_S
        while "Ray runtime started" not in log.read_text(errors="replace"):
            if process.poll() is not None:
                pytest.fail(f"`ray start` exited with {process.returncode}:\n{node.log_tail()}")
            if time.time() > deadline:
                pytest.fail(f"`ray start` not up within {NODE_START_S} s:\n{node.log_tail()}")
            time.sleep(0.25)
        # the session holds the node's processes, so the teardown check is not vacuous
        assert any("raylet" in cmd for cmd in processes(process.pid).values()), processes(process.pid)
    except BaseException:
        stop_node(node)
        raise
    if head is not None:
        head.workers.append(node)
    return node


def stop_node(node: Node, check: bool = True) -> None:
    """SIGTERM to `ray start --block` only; it drains the node and stops the processes it started. A head stops
    its worker nodes first. With `check`, processes left behind fail the test (after being killed)."""
    for worker in node.workers:
        stop_node(worker, check)
    if node.process.poll() is None:
        node.process.send_signal(signal.SIGTERM)
        try:
            node.process.wait(timeout=NODE_STOP_S)
        except subprocess.TimeoutExpired:
            node.process.kill()
            node.process.wait(timeout=10)
    # everything it started runs in its session (workers change process group, not session); the temp dir catches
    # anything that left the session
    marker = node.temp_dir + "/"
    deadline = time.time() + CHILDREN_GONE_S
    while (left := processes(node.process.pid, marker)) and time.time() < deadline:
        time.sleep(0.25)
    for pid in left:  # only this node's own processes, one by one
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    if left and check:
        pytest.fail(
            f"`ray start --block` exited (rc {node.process.returncode}) but left {len(left)} of its processes "
            f"running {CHILDREN_GONE_S} s later (now killed):\n"
            + "\n".join(f"  {pid}: {cmd}" for pid, cmd in left.items())
            + f"\nnode log:\n{node.log_tail()}"
        )
    shutil.rmtree(node.temp_dir, ignore_errors=True)


def kill_node(node: Node) -> None:
    """A lost machine: SIGKILL the node's `ray start` and every process of its session at once, no draining."""
    kill_session(node.process.pid)
    node.process.wait(timeout=30)


@dataclass
class CliRun:
    """One `scripts/*.py` subprocess; its output goes to files, so nothing blocks on a full pipe."""

    process: subprocess.Popen
    stdout: Path
    stderr: Path
    started: float

    def output(self) -> tuple[str, str]:
        return self.stdout.read_text(errors="replace"), self.stderr.read_text(errors="replace")

    def context(self) -> str:
        out, err = self.output()
        return f"\nstdout:\n{out[-3000:]}\nstderr:\n{err[-3000:]}"

    def finish(self, timeout: float) -> tuple[int, str, str, float]:
        """(rc, stdout, stderr, seconds since it started); a run past `timeout` is killed and fails the test."""
        try:
            self.process.wait(timeout=max(1.0, self.started + timeout - time.time()))
        except subprocess.TimeoutExpired:
            kill_session(self.process.pid)
            self.process.wait(timeout=30)
            pytest.fail(f"{self.process.args[1]} still running after {timeout:.0f} s{self.context()}")
        return self.process.returncode, *self.output(), time.time() - self.started


def start_cli(script: Path, args: list[str], out_dir: Path, name: str, env: dict[str, str], cwd: Path) -> CliRun:
    stdout, stderr = out_dir / f"{name}.out", out_dir / f"{name}.err"
    with open(stdout, "w") as out, open(stderr, "w") as err:
        process = subprocess.Popen(
            [sys.executable, str(script), *args], cwd=cwd, env=env, stdout=out, stderr=err, start_new_session=True
        )
    return CliRun(process, stdout, stderr, time.time())
