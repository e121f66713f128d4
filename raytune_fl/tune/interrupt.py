"""Ctrl-C (SIGINT) and SIGTERM during a study: a stop that every record calls a stop.

A command runs inside `guarded()`. The first signal asks for a stop:

- while Tune runs trials (inside `tune_run()`), it is handed to Tune's own graceful stop (the running trials end
  and the experiment state is saved with them still unfinished, which is what `Tuner.restore` continues), and
  `StudyInterrupted` is raised once Tune has returned: nothing after `fit()` selects, exports or summarises;
- anywhere else (start-up, between variants, the best model's export) `StudyInterrupted` is raised at once.

A SIGTERM to a whole Slurm job (`scancel`, its time limit) also reaches the cluster's own processes: a graceful
stop would then wait on the dead cluster (Ray's GCS reconnect timeout, a minute) and die with the runs still
RUNNING. A watcher started with the first stop makes it a forced one as soon as the cluster stops answering.

Every stop also bounds the driver's requests to an MLflow tracking server (one try, a few seconds each): a `scancel`
ends the job's server with the rest, and MLflow's own retries would wait minutes on it, past Slurm's KillWait.

A second signal raises `StudyInterrupted(forced=True)` wherever the driver is (Tune's last save is skipped; its
periodic one and the trials' checkpoints are what a resume reads, as after a kill); a third ends the process.
`StudyInterrupted` is a KeyboardInterrupt, so MLflow's parent run closes KILLED (tracking/tracker.py) and no
`except Exception` swallows it. The study record (tune/manifest.py) is written whole or not at all, so a stop at any
point leaves it readable.

Without `guarded()` (the package used as a library, the test process) nothing here changes how signals behave.
Standard library only: the commands import it before they check their input.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

# Tune otherwise takes SIGINT itself during fit(), and the stop would not be ours to see
_TUNE_SIGINT_ENV = "TUNE_DISABLE_SIGINT_HANDLER"
# Tune's own words on a stop name Tuner.restore and "Trials did not complete"; ours name the --resume command
_TUNE_STOP_WORDS = ("Stop signal received", "Experiment has been interrupted", "Trials did not complete")
_TUNE_LOGGER = logging.getLogger("ray.tune.tune")
_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class StudyInterrupted(KeyboardInterrupt):
    """The command was stopped by SIGINT or SIGTERM; its exit code is the shell's 128 + signal number."""

    def __init__(self, signum: int, forced: bool = False) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum, self.forced = signum, forced

    @property
    def exit_code(self) -> int:
        return 128 + self.signum  # 130 for SIGINT, 143 for SIGTERM

    @property
    def name(self) -> str:
        return "Ctrl-C" if self.signum == signal.SIGINT else signal.Signals(self.signum).name


@dataclass
class _State:
    installed: bool = False
    signum: int | None = None  # the first signal received
    count: int = 0
    in_tune: bool = False  # a Tune fit() is running: the first stop goes to it
    forwarded: bool = False  # Tune's stop was asked for in this fit
    resume_command: str = ""  # the outermost command's line with --resume (cli/stopping.py)
    cluster_gone: bool = False  # the stop's second signal came from the watcher: the Ray cluster stopped too
    previous: dict[int, Any] = field(default_factory=dict)


_STATE = _State()


def requested() -> int | None:
    """The signal that asked for a stop, or None."""
    return _STATE.signum


def _say(text: str) -> None:
    # os.write, not print: a handler may run while the main thread is inside print(), which is not reentrant
    try:
        os.write(2, f"\n{text}\n".encode())
    except OSError:
        pass


def _usr1_ignored(signum: int, frame: Any) -> None:
    """SIGUSR1 outside fit(): Tune's stop signal, sent to a run that is not there (the default would kill us)."""


# MLflow's HTTP client: retries with a doubling backoff (minutes in all) and a 120 s timeout by default
_TRACKING_LIMITS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": "3"}


def _bound_tracking_requests() -> None:
    """From the stop on, a request to a tracking server that is gone (scancel ends it with the job) fails in
    seconds: the stop then ends with the resume line instead of waiting on it until Slurm kills the driver.
    MLflow reads these at every request; `guarded()` puts the user's values back."""
    os.environ.update(_TRACKING_LIMITS)


def _without_rays_excepthook() -> None:
    """From the stop on, an error that ends the command is printed by Python's own hook: Ray's first reports it to
    the GCS, without a timeout, and the GCS may be gone with the job (scancel): the driver then hung there until
    Slurm killed it. `guarded()` puts Ray's back."""
    if getattr(sys.excepthook, "__module__", "") == "ray._private.worker":
        sys.excepthook = sys.__excepthook__


def _handle(signum: int, frame: Any) -> None:
    state = _STATE
    state.count += 1
    if state.count == 1:
        state.signum = signum
        _bound_tracking_requests()
        _without_rays_excepthook()
    if state.count >= 3:
        _say("third interrupt: exiting now")
        os._exit(128 + (state.signum or signum))
    if state.count == 2:
        first = "the Ray cluster stopped too" if state.cluster_gone else "second interrupt"
        _say(f"{first}: stopping at once; the study stays resumable from its last checkpoints")
        raise StudyInterrupted(state.signum or signum, forced=True)
    if state.in_tune:
        _watch_cluster(_gcs_address())
        _quiet_worker_exits()
        _say(
            f"{StudyInterrupted(signum).name}: stopping the running trials and saving where they are "
            "(again to stop at once)"
        )
        _forward_to_tune(frame)
        return
    raise StudyInterrupted(signum)


def forward_if_missed() -> None:
    """On Tune's loop (tune/callbacks.py ForwardInterrupt): a stop asked for before Tune listened (the moment
    between `tune_run()` and Tune's own set-up inside fit()) is handed to it now."""
    if _STATE.in_tune and _STATE.signum is not None and not _STATE.forwarded:
        _forward_to_tune()


def _forward_to_tune(frame: Any = None) -> None:
    """Ask Tune's loop to stop as its Ctrl-C does: Tune listens to SIGUSR1 during fit() whatever the settings."""
    handler = signal.getsignal(signal.SIGUSR1)
    if callable(handler) and handler is not _usr1_ignored:  # Tune's, installed for this fit
        _STATE.forwarded = True
        handler(signal.SIGUSR1, frame)
        _own_signals()  # Tune's handler puts back the SIGINT handler it found: ours, but say so


def _quiet_worker_exits() -> None:
    """Tune ends the stopped trials' processes mid-round; Ray's own SIGTERM handler in such a process may print a
    traceback of its planned exit ("Exception ignored ... sigterm_handler ... SystemExit"), which the driver echoes.
    It says nothing about the study: those lines are left out of what Ray forwards from here on."""
    try:
        from ray._private.ray_logging import global_worker_stdstream_dispatcher as dispatcher

        with dispatcher._lock:
            dispatcher.handlers = [(name, _without_exit_traceback(handle)) for name, handle in dispatcher.handlers]
    except (ImportError, AttributeError):  # another Ray: its lines pass as they are
        pass


def _without_exit_traceback(handle: Any) -> Any:
    def filtered(data: dict[str, Any]) -> None:
        lines = list(data.get("lines") or [])
        if any("sigterm_handler" in line for line in lines):
            start = next((i for i, line in enumerate(lines) if line.startswith(("Exception ignored", "Traceback"))), 0)
            end = next((i for i, line in enumerate(lines) if line.startswith("SystemExit")), len(lines) - 1)
            lines = lines[:start] + lines[end + 1 :]
            if not lines:
                return
            data = {**data, "lines": lines}
        handle(data)

    return filtered


WATCH_INTERVAL_S = 0.25
WATCH_FOR_S = 120.0  # a graceful stop that takes longer is not waiting on a dead cluster


def _gcs_address() -> str | None:
    """The joined cluster's GCS host:port, where this process runs Ray (never imported here)."""
    ray = sys.modules.get("ray")
    try:
        return ray.get_runtime_context().gcs_address if ray is not None and ray.is_initialized() else None
    except Exception:  # another Ray, or one shutting down: nothing to watch
        return None


def _answers(address: str) -> bool:
    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=1.0).close()
    except (OSError, ValueError):
        return False
    return True


def _watch_cluster(address: str | None) -> None:
    """While the graceful stop runs, probe the GCS; once it refuses twice running, the stop's second signal."""
    if address is None:
        return

    def watch() -> None:
        failures, deadline = 0, time.monotonic() + WATCH_FOR_S
        # only inside fit(): after it the command itself ends the cluster (stop_ray)
        while _STATE.in_tune and _STATE.count == 1 and time.monotonic() < deadline:
            failures = 0 if _answers(address) else failures + 1
            if failures >= 2 and _STATE.in_tune and _STATE.count == 1:
                _STATE.cluster_gone = True
                os.kill(os.getpid(), _STATE.signum or signal.SIGTERM)  # handled on the main thread, as a second
                return
            time.sleep(WATCH_INTERVAL_S)

    threading.Thread(target=watch, name="stop-watch-cluster", daemon=True).start()


def _own_signals() -> None:
    for signum in _SIGNALS:
        signal.signal(signum, _handle)


def resume_command() -> str:
    """The command that continues the stopped study: the outermost guarded command's, with --resume."""
    return _STATE.resume_command


@contextmanager
def guarded(resume_command: str = "") -> Iterator[None]:
    """Interrupts handled as above for the length of a command; nested commands (reproduce runs tune and ablate)
    share the outermost's, and its `resume_command`. Only on the main thread, where Python runs signal handlers."""
    if _STATE.installed or threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.getsignal(s) for s in (*_SIGNALS, signal.SIGUSR1)}
    env_before = {name: os.environ.get(name) for name in (_TUNE_SIGINT_ENV, *_TRACKING_LIMITS)}
    excepthook = sys.excepthook
    _STATE.__init__(installed=True, previous=previous, resume_command=resume_command)  # type: ignore[misc]
    os.environ[_TUNE_SIGINT_ENV] = "1"
    _own_signals()
    signal.signal(signal.SIGUSR1, _usr1_ignored)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
        sys.excepthook = excepthook
        for name, value in env_before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        _STATE.__init__()  # type: ignore[misc]


def reassert() -> None:
    """Our handlers again, after `ray.init` on the main thread set its own SIGTERM one (a joined cluster)."""
    if _STATE.installed:
        _own_signals()


def raise_if_requested() -> None:
    if _STATE.installed and _STATE.signum is not None:
        raise StudyInterrupted(_STATE.signum)


def _keep_record(record: logging.LogRecord) -> bool:
    return not str(record.msg).startswith(_TUNE_STOP_WORDS)


@contextmanager
def tune_run() -> Iterator[None]:
    """Around a Tuner's fit(): a stop asked for before it starts is raised without starting it; one asked for
    during it is Tune's graceful stop, raised as StudyInterrupted once fit() returned."""
    if not _STATE.installed:
        yield
        return
    raise_if_requested()
    reassert()
    _STATE.in_tune, _STATE.forwarded = True, False
    _TUNE_LOGGER.addFilter(_keep_record)
    try:
        yield
    except KeyboardInterrupt as error:
        # our StudyInterrupted raised inside Ray's C++ (a ray.wait in Tune's clean-up) comes out as Ray's own plain
        # KeyboardInterrupt: it is still our stop, which every caller catches by its type
        if isinstance(error, StudyInterrupted) or _STATE.signum is None:
            raise
        raise StudyInterrupted(_STATE.signum, forced=_STATE.count >= 2) from None
    finally:
        _STATE.in_tune = False
        _TUNE_LOGGER.removeFilter(_keep_record)
        signal.signal(signal.SIGUSR1, _usr1_ignored)  # Tune leaves its handler, bound to a finished run
    raise_if_requested()
