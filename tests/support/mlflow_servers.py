"""A real `mlflow server` for tests: on 127.0.0.1, a free port, a SQLite store and proxied artifacts under `root`,
in a session of its own so that it is stopped with its uvicorn and job-runner children, by its process group."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_mlflow_server(root: Path, allowed_hosts: str | None = None) -> tuple[subprocess.Popen, str]:
    """(the server process, its URL) once it answers /health; the test fails with its log if it does not in 90 s.
    `allowed_hosts`: its --allowed-hosts ("{port}" replaced by its port); MLflow's default (localhost and private
    addresses) without it. /health answers whatever the Host, so a restrictive list still starts."""
    port = free_port()
    hosts = ["--allowed-hosts", allowed_hosts.format(port=port)] if allowed_hosts else []
    with open(root / "server.log", "w") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port)]
            + ["--backend-store-uri", f"sqlite:///{root / 'server.db'}"]
            + ["--artifacts-destination", str(root / "artifacts"), "--workers", "1", *hosts],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 90
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as reply:
                if reply.status == 200:
                    return process, url
        except OSError:
            time.sleep(0.5)
        if process.poll() is not None:
            break
    stop_mlflow_server(process)
    pytest.fail(f"mlflow server did not answer /health within 90 s: {(root / 'server.log').read_text()[-2000:]}")


def stop_mlflow_server(process: subprocess.Popen) -> None:
    """The server and its children: the process group the test started (its id is the server's PID)."""
    for sig, wait in ((signal.SIGTERM, 30), (signal.SIGKILL, 10)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue
