"""The study's model logging in a helper process, made ready while the trials train.

Why: logging a model exports it (torch.export). A process's first export imports torch._dynamo and has MLflow
map the installed packages, ~3 s on 2 cores; in the driver that came after the last trial, on the study's
critical path. The helper does it once the first trial is training (before, the start-up of Ray, Tune and the
actors needs both cores), at the lowest CPU priority (the trials get the CPU first), then waits.
Should the helper die, the model is logged in the driver as before.

This module imports only the standard library: the helper is a fresh interpreter that imports only it, and starts
in milliseconds; what it needs it imports when told to get ready. (Not multiprocessing's spawn: that runs the
study's main script again in the child, whose imports took ~1.6 s of CPU from Ray's start-up.)
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ray import tune

    from raytune_fl.config import ExperimentConfig
    from raytune_fl.engine.data import FederatedData

_READY = "ready"  # the message that makes the helper import and warm up


class ModelExporter:
    """A helper process that logs selected trials' models to one MLflow experiment, one at a time."""

    def __init__(self, tracking_uri: str, experiment_name: str) -> None:
        self.uri, self.experiment_name = tracking_uri, experiment_name
        ours, theirs = socket.socketpair()
        # a new interpreter (not a fork of a process that runs Ray's threads) with this one's import path
        code = f"import sys; sys.path[:] = {json.dumps(sys.path)}; from {__name__} import main; main()"
        arguments = [str(theirs.fileno()), tracking_uri, experiment_name]
        self._process: subprocess.Popen | None = subprocess.Popen(
            [sys.executable, "-c", code, *arguments], pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL
        )
        theirs.close()
        self._pipe = Connection(ours.detach())
        self._readying = False

    def get_ready(self) -> None:
        """Have the helper import and warm up now (once; the trials are training)."""
        if self._process is not None and not self._readying:
            self._readying = True
            with contextlib.suppress(OSError):
                self._pipe.send(_READY)

    def log(
        self,
        parent_run_id: str,
        result: tune.Result,
        experiment: ExperimentConfig,
        method: str,
        params: dict[str, Any],
        data: FederatedData,
        *,
        link_parent: bool,
    ) -> tuple[str, str] | None:
        """As tune/export.py's log_trial_model, in the helper: (model id, run id), or None (no checkpoint, no run)."""
        from raytune_fl.tracking import StudyTracker
        from raytune_fl.tune.export import log_checkpoint_model, trial_checkpoint

        found = trial_checkpoint(result)
        if found is None:
            return None
        args = (parent_run_id, *found, experiment, method, params, data, link_parent)
        if self._process is not None:
            try:
                self._pipe.send(args)
                ok, answer = self._pipe.recv()
            except (EOFError, OSError):  # the helper died (killed, out of memory): log it here instead
                self.close()
            else:
                if not ok:
                    raise answer
                return answer
        logged = log_checkpoint_model(StudyTracker(self.uri, self.experiment_name), *args)
        return None if logged is None else logged[:2]

    def close(self) -> None:
        """Ends the helper (it exits at once: no interpreter teardown, nothing of its own left to write)."""
        if self._process is None:
            return
        with contextlib.suppress(OSError):
            self._pipe.send(None)
        self._pipe.close()
        try:
            self._process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        self._process = None


def main() -> None:
    """The helper process: `python -c ... main() <socket fd> <tracking URI> <experiment>`."""
    handle, tracking_uri, experiment_name = sys.argv[1:4]
    _serve(Connection(int(handle)), tracking_uri, experiment_name)


def _serve(pipe: Connection, tracking_uri: str, experiment_name: str) -> None:
    _lowest_priority()
    tracker = None
    while True:
        try:
            message = pipe.recv()
        except EOFError:  # the study's process is gone
            message = None
        if message is None:
            os._exit(0)  # nothing of this process's own is left to write
        if tracker is None:  # told to get ready, or the first model comes before that
            tracker = _get_ready(tracking_uri, experiment_name)
        if message == _READY:
            continue
        try:
            from raytune_fl.tune.export import log_checkpoint_model

            logged = log_checkpoint_model(tracker, *message)
            pipe.send((True, None if logged is None else logged[:2]))
        except Exception as error:  # the study's process raises it (as itself, if it pickles)
            try:
                pipe.send((False, error))
            except Exception:
                pipe.send((False, RuntimeError(f"logging the model failed: {type(error).__name__}: {error}")))


def _lowest_priority() -> None:
    """Nice 19, in a scheduling group of its own. Linux's autogroups share the CPU between sessions first and apply
    nice only within one: in the study's session, nice 19 still took ~2 s from the first trials' training, since
    Ray's processes run in sessions of their own. A session of its own (which also keeps Ctrl-C, meant for the
    study, from reaching it: it ends when the study's process does) and that group's nice fix both."""
    with contextlib.suppress(OSError):
        os.setsid()
    with contextlib.suppress(OSError), open("/proc/self/autogroup", "w") as group:
        group.write("19")
    os.nice(19)


def _get_ready(tracking_uri: str, experiment_name: str) -> Any:
    import warnings

    from raytune_fl.tracking import StudyTracker
    from raytune_fl.tracking.models import warm_up

    # the exported weights are on the CPU by construction; torch.export's archive writer warns as if they might not be
    warnings.filterwarnings("ignore", message="No complete tensor found")
    warm_up()
    return StudyTracker(tracking_uri, experiment_name)
