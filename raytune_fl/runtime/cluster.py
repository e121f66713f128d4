"""The command lines' use of Ray core: start or join a cluster, and ask what it has (no tasks, no actors).

Run as a Ray job's entrypoint (`ray job submit --working-dir`, KubeRay's RayJob), a command joins the job's cluster
(Ray sets RAY_ADDRESS) and runs in Ray's temporary copy of the working dir: the checks below refuse any output
there (docs/how-to/jobs.md)."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import socket
import sys
import threading
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from raytune_fl.config import ConfigError


def _probe(address: str, timeout_s: float = 10.0) -> None:
    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except (OSError, ValueError) as error:
        raise ConnectionError(f"nothing answers at {address} ({error})") from None


PROBE_TIMEOUT_S = 3.0  # the address check's own limit: Ray itself retries an unreachable head for minutes
# HTTP/2's client preface and an empty SETTINGS frame: a gRPC server (the GCS, a Ray Client server) answers with
# a SETTINGS frame of its own (type 4, the fourth byte of a frame's 9-byte header); an HTTP/1 server, a database
# or ssh answer something else, or close. Ray keeps retrying those for minutes, logging every try
_H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"


def check_address(address: str | None, timeout_s: float = PROBE_TIMEOUT_S) -> None:
    """Before Ray starts: that `address` (None: RAY_ADDRESS, else a private local cluster) names a cluster that can
    be joined. host:port and ray://host:port: a gRPC server answers there within `timeout_s` (a TCP connect and
    HTTP/2's opening, nothing logged; with RAY_USE_TLS the connect only); 'auto': Ray finds a running cluster on
    this machine. Raises ConnectionError (nothing there) or ValueError (not usable), saying why in one line."""
    address = address or os.environ.get("RAY_ADDRESS") or "local"
    if address == "local":
        return
    if address == "auto":
        address = _running_cluster()
        if address == "auto":
            return
    elif address.startswith("ray://"):
        _check_ray_client()
    host, _, port = address.removeprefix("ray://").rpartition(":")
    host = host.strip("[]")  # an IPv6 literal
    try:
        connection = socket.create_connection((host, int(port)), timeout=timeout_s)
    except (OSError, ValueError) as error:
        strerror = error.strerror if isinstance(error, OSError) else None  # int("x"): a ValueError has none
        reason = "timed out" if isinstance(error, TimeoutError) else (strerror or str(error))
        raise ConnectionError(f"nothing answers at {address} within {timeout_s:g} s ({reason})") from None
    with connection:
        if os.environ.get("RAY_USE_TLS", "0").lower() in ("1", "true"):
            return  # the server speaks TLS first: the connect is all a quiet probe can see
        try:
            connection.sendall(_H2_PREFACE)
            reply = b""
            while len(reply) < 9:
                chunk = connection.recv(9 - len(reply))
                if not chunk:
                    break
                reply += chunk
        except TimeoutError:  # silent: cannot tell; Ray may still get through
            return
        except ConnectionError:  # reset or closed on the preface: not an HTTP/2 server
            reply = b""
        except OSError:  # cannot tell
            return
    if len(reply) < 4 or reply[3] != 0x04:
        shown = reply[:16].decode("ascii", "replace").strip() or "it closed the connection"
        raise ValueError(
            f"{address} answers, but not as a Ray cluster (no gRPC; it said {shown!r}): give the head's GCS "
            "address, port 6379 unless `ray start --head --port` chose another"
        )


def _running_cluster() -> str:
    """The cluster 'auto' joins: RAY_ADDRESS, else the one `ray start` last started on this machine, else a running
    one found there (as ray.init finds it)."""
    try:
        from ray._private.services import canonicalize_bootstrap_address_or_die
    except ImportError:  # pragma: no cover - another Ray: ray.init finds it, or says why
        return "auto"
    try:
        return canonicalize_bootstrap_address_or_die("auto")
    except ConnectionError as error:
        raise ConnectionError(
            f"no running Ray cluster found on this machine ({str(error).split('.')[0]}); start one with "
            "`ray start --head`, give its host:port, or leave the address out for a private local cluster"
        ) from None


def _check_ray_client() -> None:
    try:
        from ray._private.utils import get_ray_client_dependency_error
    except ImportError:  # pragma: no cover - another Ray: ray.init says why
        return
    if get_ray_client_dependency_error() is not None:
        raise ValueError(
            "a ray:// address needs Ray Client, which is not installed (pip install 'ray[client]'); or give the "
            "head's GCS address host:port"
        )


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
    env: dict[str, Any] = {"runtime_env": runtime_env} if runtime_env else {}
    if address == "local":
        start_local(
            log_to_driver=True, _system_config={"idle_worker_killing_time_threshold_ms": IDLE_WORKER_KEPT_MS}, **env
        )
        return
    try:
        ray.init(address=address, log_to_driver=True, **env)
    except ValueError as error:  # a Ray job's runtime_env already sets what the plugins need (ray.init merges them)
        if "merge the Job's runtime env" not in str(error):
            raise
        _refuse_job_env(runtime_env or {})


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


def _refuse_job_env(runtime_env: dict[str, Any]) -> None:
    from raytune_fl.plugins import PluginError

    job = json.loads(os.environ.get(JOB_CONFIG_VAR) or "{}").get("runtime_env") or {}
    clash = sorted(set(job) & set(runtime_env) - {"env_vars"})
    clash += sorted(set(job.get("env_vars") or {}) & set(runtime_env.get("env_vars") or {}))
    raise PluginError(
        f"plugins: this Ray job's runtime_env already sets {', '.join(clash) or 'what they need'}, which the "
        "plugins' runtime_env sets too; leave it out of `ray job submit --runtime-env-json` (a plugin beside the "
        "space in --working-dir needs nothing more), or install the plugin's package on every node"
    )


# Ray's job supervisor hands the entrypoint its job's config (runtime_env, metadata) in this variable
JOB_CONFIG_VAR = "RAY_JOB_CONFIG_JSON_ENV_VAR"


def job_working_dir() -> Path | None:
    """Ray's temporary copy of the working dir, when this process is a Ray job's entrypoint given one (`ray job
    submit --working-dir`, a RayJob's runtimeEnvYAML) and runs in it (a command that changed directory first does
    not); else None."""
    try:
        job = json.loads(os.environ.get(JOB_CONFIG_VAR) or "{}")
        has_working_dir = bool((job.get("runtime_env") or {}).get("working_dir"))
    except (ValueError, AttributeError):  # not the config Ray writes: not a job we know
        return None
    if not has_working_dir:
        return None
    here = Path.cwd().resolve()
    # Ray unpacks it as <session>/runtime_resources/working_dir_files/<package>/ and starts the entrypoint there
    return next((folder for folder in (here, *here.parents) if folder.parent.name == "working_dir_files"), None)


def job_dir_problem(path: str | Path, option: str) -> str | None:
    """Why `option`'s local `path` must not be written: it lies in the job's temporary working dir (gone with the
    job's cluster or from Ray's cache, and only this node has it); None where it does not."""
    folder = job_working_dir()
    if folder is None:
        return None
    where = Path(path).expanduser().resolve()
    if where != folder and folder not in where.parents:
        return None
    return (
        f"{option}: ./{where.relative_to(folder)} is in this Ray job's working dir {folder}, Ray's temporary copy of "
        "--working-dir: lost with the job's cluster, and no other node sees it; give an absolute path on storage "
        "that every node shares and that outlives the job\n  in a Ray job every output needs one: --storage (a "
        "shared folder or s3://...), --mlflow-uri or MLFLOW_TRACKING_URI (a tracking server), --optuna-storage "
        "(tune), --out (ablate); docs/how-to/jobs.md"
    )


def check_outside_job_dir(path: str | Path, option: str) -> None:
    """A ConfigError naming `option` where `path` (a folder or file the command writes) is in the job's temporary
    working dir: nothing is written there (see `job_dir_problem`)."""
    problem = job_dir_problem(path, option)
    if problem is not None:
        raise ConfigError(problem)


def check_store_outside_job_dir(url: str, option: str) -> None:
    """`check_outside_job_dir` for a store's URL: a SQLite file (sqlite:///path), a file: URI or a plain path;
    a server's URL (http, postgresql, ...) or MLflow's Databricks names never are."""
    if url in ("databricks", "databricks-uc", "uc"):
        return
    if "://" not in url and not url.startswith("file:"):
        check_outside_job_dir(url, option)
    elif url.split(":", 1)[0].split("+", 1)[0].lower() == "sqlite":
        database = url.split(":///", 1)[1].split("?", 1)[0] if ":///" in url else ""
        if database and database != ":memory:":
            check_outside_job_dir(database, option)
    elif url.startswith("file:"):
        check_outside_job_dir(urllib.parse.unquote(urllib.parse.urlparse(url).path), option)


def starts_private_cluster(address: str | None) -> bool:
    """Whether `start_ray(address)` would start a private local cluster (not join one, nor reuse this process's)."""
    import ray

    return (address or os.environ.get("RAY_ADDRESS") or "local") == "local" and not ray.is_initialized()


def private_cluster_resources() -> dict[str, float] | None:
    """The CPUs and GPUs a private local cluster started by this process would have, counted as `ray.init` counts
    them (its own resource spec: cgroup CPU limits, visible GPUs, RAY_OVERRIDE_RESOURCES), without starting it;
    None where Ray's internals moved (the check after the start still applies)."""
    try:
        from ray._private.resource_and_label_spec import ResourceAndLabelSpec

        spec = ResourceAndLabelSpec().resolve(is_head=True, node_ip_address="127.0.0.1")
        return {"CPU": float(spec.num_cpus or 0), "GPU": float(spec.num_gpus or 0)}
    except Exception:  # pragma: no cover - another Ray
        return None


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

    with (
        _lean_node_parameters(include_log_monitor=log_to_driver),
        _own_session(),
        _without_record(_AUTH_LOGGER, _AUTH_BANNER),
    ):
        ray.init(address="local", include_dashboard=False, log_to_driver=log_to_driver, **init_kwargs)


# Ray 2.60 turns token authentication on for every new local cluster (RAY_AUTH_MODE unset: a token made once in
# ~/.ray/auth_token) and says so at each start with a WARNING. The cluster stays token-protected; only that line
# goes: it is news the first time and noise at every study after. (Setting RAY_AUTH_MODE=token instead would also
# silence it, but a process that already read Ray's config before the variable was set then speaks without its
# token to its own cluster.) RAY_AUTH_MODE=disabled still opts out, as Ray's line said.
_AUTH_LOGGER = logging.getLogger("ray._private.authentication.authentication_token_setup")
_AUTH_BANNER = "Token authentication is enabled for this Ray cluster"


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

    # patches of Ray's own classes for the node's start, undone after it (mypy: a type and a method reassigned)
    parameter.RayParams = LeanParams  # type: ignore[misc]
    if api_server is not None:
        Node.start_api_server = lambda self, **_: None  # type: ignore[method-assign]  # failed: no dashboard URL
    try:
        yield
    finally:
        parameter.RayParams = original  # type: ignore[misc]
        if api_server is not None:
            Node.start_api_server = api_server  # type: ignore[method-assign]


@contextlib.contextmanager
def _own_session() -> Iterator[None]:
    """The private cluster's processes (the GCS, the raylet and, through it, the workers) started in a session of
    their own: a SIGTERM to the command's process group (`timeout`, `kill -- -PGID`, a batch system's stop) then
    reaches the command alone, which stops the study gracefully on a cluster still alive, as a SIGTERM to it alone
    does. They still end with it (Ray binds them to their parent's death), and Ray blocks SIGINT in them already.
    If Ray's internals moved, they start in the command's group as before."""
    try:
        from ray._private import services
    except ImportError:  # pragma: no cover - another Ray
        yield
        return
    original = getattr(services, "ConsolePopen", None)
    if original is None:  # pragma: no cover - another Ray
        yield
        return

    class OwnSessionPopen(original):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs.setdefault("start_new_session", True)
            super().__init__(*args, **kwargs)

    # a patch of Ray's own module for the node's start, undone after it
    services.ConsolePopen = OwnSessionPopen  # type: ignore[misc]
    try:
        yield
    finally:
        services.ConsolePopen = original  # type: ignore[misc]


def cluster_view() -> tuple[str, dict[str, float], list[dict[str, float]]]:
    """The joined cluster: its GCS address, its total resources, and each live node's resources."""
    import ray

    nodes = [n["Resources"] for n in ray.nodes() if n.get("Alive")]
    return ray.get_runtime_context().gcs_address, ray.cluster_resources(), nodes
