"""The command lines' use of Ray core: start or join a cluster, and ask what it has (no tasks, no actors)."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Iterator
from typing import Any


def _probe(address: str, timeout_s: float = 10.0) -> None:
    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except (OSError, ValueError) as error:
        raise ConnectionError(f"nothing answers at {address} ({error})") from None


def start_ray(address: str | None, runtime_env: dict[str, Any] | None = None) -> None:
    """Join `address` ('auto', host:port, ray://...; default RAY_ADDRESS), else start a private local cluster.
    `runtime_env`: the job's (raytune_fl.plugins.runtime_env: the plugins every worker imports), or None."""
    import ray

    # checkpointing every round makes Tune snapshot its state often (it must, to keep resumes consistent); cheap
    # for our small states, so its warning about it is noise
    os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "0")
    if ray.is_initialized():  # e.g. inside a test session that already started a private cluster
        _check_job_env(runtime_env)
        return
    address = address or os.environ.get("RAY_ADDRESS") or "local"
    if address not in ("auto", "local") and not address.startswith("ray://"):
        _probe(address)  # Ray itself retries an unreachable head for minutes
    env = {"runtime_env": runtime_env} if runtime_env else {}
    if address == "local":
        start_local(
            log_to_driver=True, _system_config={"idle_worker_killing_time_threshold_ms": IDLE_WORKER_KEPT_MS}, **env
        )
    else:
        ray.init(address=address, log_to_driver=True, **env)


def _check_job_env(runtime_env: dict[str, Any] | None) -> None:
    """Ray was started before this command (a notebook, a test): its job must already import the plugins."""
    if not runtime_env:
        return
    import ray

    from raytune_fl.plugins import ENV_VAR, PluginError

    wanted = runtime_env["env_vars"][ENV_VAR]
    have = (ray.get_runtime_context().runtime_env.get("env_vars") or {}).get(ENV_VAR)
    if have != wanted:
        raise PluginError(
            f"plugins: this process started Ray without them (its workers import {have or 'none'}); start it with "
            f"ray.init(runtime_env=raytune_fl.plugins.runtime_env([{wanted}])), or let the command start Ray"
        )


def starts_private_cluster(address: str | None) -> bool:
    """Whether `start_ray(address)` would start a private local cluster (not join one, nor reuse this process's)."""
    import ray

    return (address or os.environ.get("RAY_ADDRESS") or "local") == "local" and not ray.is_initialized()


class RayStart:
    """`start_ray(address)` on a thread, begun while the command's last checks run: they import MLflow and Optuna
    and open their stores (seconds of one core), and Ray's start mostly waits for its own processes. `wait()` waits
    for it (its error raised there); `cancel()`, for a command refused meanwhile, waits for it and ends the cluster.

    The thread outlives the start: Ray binds the processes it starts to their parent's death (Linux's parent-death
    signal, which follows the thread that started them), so it stays, parked, until the process ends."""

    def __init__(self, address: str | None, runtime_env: dict[str, Any] | None = None) -> None:
        self.address = address
        self.runtime_env = runtime_env
        self._error: BaseException | None = None
        self._started = threading.Event()
        # ray.init sets this handler (SIGTERM -> SystemExit, so its exit hook ends the cluster) only on the main
        # thread, and warns when it cannot
        if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
            signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(signum))
        threading.Thread(target=self._start_and_stay, name="ray-start", daemon=True).start()

    def _start_and_stay(self) -> None:
        try:
            with _without_record(logging.getLogger("ray._private.worker"), "SIGTERM handler is not set"):
                start_ray(self.address, self.runtime_env)  # looked up at call time: tests replace it
        except BaseException as error:  # raised in wait(), on the main thread
            self._error = error
            return
        finally:
            self._started.set()
        threading.Event().wait()  # parked for good: see the class's docstring

    def wait(self) -> None:
        self._started.wait()
        if self._error is not None:
            raise self._error

    def cancel(self) -> None:
        self._started.wait()
        if self._error is None:
            stop_ray()


@contextlib.contextmanager
def _without_record(logger: logging.Logger, prefix: str) -> Iterator[None]:
    def keep(record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(prefix)

    logger.addFilter(keep)
    try:
        yield
    finally:
        logger.removeFilter(keep)


def stop_ray() -> None:
    """End this process's Ray: a private cluster's processes; a joined cluster is only left. Ray's own exit hook
    first sleeps 0.5 s for the workers' last log lines; a command calls this once every trial has reported."""
    import ray

    if ray.is_initialized():
        ray.shutdown()


# Ray ends an idle worker beyond one per CPU after 1 s; the first trial asks for its client actors 1-2 s after it
# took one of the idle workers Ray prestarts with the cluster. Kept this long, the other runs a client actor
# instead of a new process that starts Python and Ray again (~0.5 s of CPU while three processes share the cores)
IDLE_WORKER_KEPT_MS = 10_000


def start_local(*, log_to_driver: bool = False, **init_kwargs: Any) -> None:
    """`ray.init()` of a private one-node cluster without the head processes such a cluster never uses.

    Left out, each a Python process of 50-65 MiB PSS (benchmarks/workload.py): the autoscaler's monitor (one
    node that never scales), the API server (it serves the dashboard and job submission, neither used here; Ray
    runs on without it when it fails to start) and, when no worker output is forwarded to this process, the log
    monitor. `ray.init` has no options for them (`ray start` has some: --no-monitor, --include-log-monitor), so
    the node it builds is amended while it starts; if Ray's internals moved, the cluster starts with them."""
    import ray

    with _lean_node_parameters(include_log_monitor=log_to_driver):
        ray.init(address="local", include_dashboard=False, log_to_driver=log_to_driver, **init_kwargs)


@contextlib.contextmanager
def _lean_node_parameters(include_log_monitor: bool) -> Iterator[None]:
    try:
        from ray._private import parameter
        from ray._private.node import Node
    except ImportError:  # pragma: no cover - another Ray: start it as it is
        yield
        return
    original, api_server = parameter.RayParams, getattr(Node, "start_api_server", None)

    class LeanParams(original):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.no_monitor = True
            self.include_log_monitor = include_log_monitor

    parameter.RayParams = LeanParams
    if api_server is not None:
        Node.start_api_server = lambda self, **_: None  # as if it had failed to start: no dashboard URL
    try:
        yield
    finally:
        parameter.RayParams = original
        if api_server is not None:
            Node.start_api_server = api_server


def cluster_view() -> tuple[str, dict[str, float], list[dict[str, float]]]:
    """The joined cluster: its GCS address, its total resources, and each live node's resources."""
    import ray

    nodes = [n["Resources"] for n in ray.nodes() if n.get("Alive")]
    return ray.get_runtime_context().gcs_address, ray.cluster_resources(), nodes
