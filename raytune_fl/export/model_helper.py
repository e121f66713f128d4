"""The study's model logging in a helper process, made ready while the study starts and its trials train.

Why: logging a model exports it (torch.export). A process's first export imports torch._dynamo and has MLflow
map the installed packages, ~3 s on 2 cores; in the driver that came after the last trial, on the study's
critical path. The helper imports and warms up from its start, at the lowest CPU priority in a scheduling group
of its own: it runs on the CPU time the study leaves idle (while Ray, Tune and the first trial start, processes
wait on each other), and the trials get the CPU first, then it waits.
A short study's helper may still be importing when the last trial ends (its trials kept both cores): it is waited
for, since with the trials done it has a core and it is ahead of the driver, which has no torch (the driver never
trains); it then skips the warm-up (the model it is asked for warms it up as well). Should the helper die, the
model is logged in the driver.

Ahead of the end: as each trial ends, the best trial so far (tune/callbacks.py's BestSoFar, by the rule the study
selects with) is logged on its own run, at the same low priority, and the one it supersedes deleted. When the
study's selected trial is that one, the end only lists it on the parent run (~2 s less on the critical path); a
study killed midway keeps its best model so far. The final selection is always the study's own: the model logged
ahead is a cache of it, never a substitute.

This module imports only the standard library: the helper is a fresh interpreter that imports only it, and starts
in milliseconds, and lowers its priority before it imports what it needs. (Not multiprocessing's spawn: that runs
the study's main script again in the child, at the study's priority: ~1.6 s of CPU taken from Ray's start-up.)
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import socket
import subprocess
import sys
from collections.abc import Sequence
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

from raytune_fl.plugins import ENV_VAR as PLUGINS_ENV_VAR
from raytune_fl.plugins import setup_worker

if TYPE_CHECKING:
    from ray import tune

    from raytune_fl.config import TrialSpec
    from raytune_fl.engine.data import FederatedData


@dataclasses.dataclass(frozen=True)
class _Export:
    """A trial's model to log: `final`, the study's selection (answered; listed on the parent run with `link_parent`),
    else the best trial so far (logged ahead, not answered). `data` None: the data of the last message with data."""

    parent_run_id: str
    trial_id: str
    checkpoint: tune.Checkpoint
    trial: TrialSpec
    data: FederatedData | None
    final: bool
    link_parent: bool = False

    @property
    def key(self) -> tuple[str, str]:
        return self.trial_id, self.checkpoint.path


@dataclasses.dataclass(frozen=True)
class _Logged:
    key: tuple[str, str]
    model_id: str
    run_id: str
    step: int  # the round the model was trained to


class ModelExporter:
    """A helper process that logs selected trials' models to one MLflow experiment, one at a time."""

    def __init__(self, tracking_uri: str, experiment_name: str, plugins: Sequence[str] = ()) -> None:
        """`plugins`: the study's plugin modules, imported in the helper as in a Ray worker (a plugin's model is
        rebuilt there by name)."""
        self.uri, self.experiment_name = tracking_uri, experiment_name
        ours, theirs = socket.socketpair()
        # a new interpreter (not a fork of a process that runs Ray's threads) with this one's import path
        code = f"import sys; sys.path[:] = {json.dumps(sys.path)}; from {__name__} import main; main()"
        arguments = [str(theirs.fileno()), tracking_uri, experiment_name]
        self._process: subprocess.Popen | None = subprocess.Popen(
            [sys.executable, "-c", code, *arguments],
            pass_fds=[theirs.fileno()],
            stdin=subprocess.DEVNULL,
            env={**os.environ, PLUGINS_ENV_VAR: ",".join(plugins)},
            # out of the terminal's process group: a Ctrl-C is the study's to handle (tune/interrupt.py), and the
            # study ends this process itself (close(), or the socket's end when the study's process is gone)
            start_new_session=True,
        )
        theirs.close()
        self._pipe = Connection(ours.detach())
        self._data_sent: FederatedData | None = None
        from raytune_fl.tracking.background import SerialWriter  # standard library only

        # the best trials so far are sent from a thread: a helper busy warming up reads late, and Tune's loop
        # (whose callback hands them over) must not wait for it
        self._ahead: SerialWriter | None = SerialWriter("model-helper-ahead")

    def log_ahead(
        self,
        parent_run_id: str,
        trial_id: str,
        checkpoint: tune.Checkpoint,
        trial: TrialSpec,
        data: FederatedData,
    ) -> None:
        """Have the helper log the best trial so far on its run, in the background (no answer, errors dropped: the
        final `log` repeats what failed and raises)."""
        if self._ahead is not None:
            message = _Export(parent_run_id, trial_id, checkpoint, trial, data, final=False)
            self._ahead.submit(self._send_ahead, message)

    def log(
        self,
        parent_run_id: str,
        result: tune.Result,
        trial: TrialSpec,
        data: FederatedData,
        *,
        link_parent: bool,
    ) -> tuple[str, str] | None:
        """As trial_model.py's log_trial_model, in the helper: (model id, run id), or None (no checkpoint, no run)."""
        from raytune_fl.export.trial_model import log_checkpoint_model, trial_checkpoint
        from raytune_fl.tracking import StudyTracker

        found = trial_checkpoint(result)
        if found is None:
            return None
        # a helper still importing (a short study) is waited for too: see the module's docstring
        if self._ahead is not None:  # the helper reads in order: the selection comes after them
            self._ahead.flush(raise_error=False)
        if self._process is not None:
            try:
                message = _Export(parent_run_id, *found, trial, data, True, link_parent)
                self._send(message)
                ok, answer = self._pipe.recv()
            except (EOFError, OSError):  # the helper died (killed, out of memory): log it here instead
                self.close()
            else:
                if not ok:
                    raise answer
                return answer
        args = (parent_run_id, *found, trial, data, link_parent)
        logged = log_checkpoint_model(StudyTracker(self.uri, self.experiment_name), *args)
        return None if logged is None else logged[:2]

    def _send_ahead(self, message: _Export) -> None:
        with contextlib.suppress(OSError):  # the helper died: the final log happens here
            self._send(message)

    def _send(self, message: _Export) -> None:
        """The dataset travels once (it is the same for every trial of a study): later messages refer to it."""
        if self._process is None:
            return
        if message.data is self._data_sent:
            message = dataclasses.replace(message, data=None)
        else:
            self._data_sent = message.data
        self._pipe.send(message)

    def close(self) -> None:
        """Ends the helper (it exits at once: no interpreter teardown, nothing of its own left to write)."""
        if self._ahead is not None:
            self._ahead.close()
            self._ahead = None
        if self._process is None:
            return
        with contextlib.suppress(OSError):
            self._pipe.send(None)
        self._pipe.close()
        if self._data_sent is not None:  # it may be logging a model ahead: let it finish (given nothing, it may
            with contextlib.suppress(subprocess.TimeoutExpired):  # be importing still, and has nothing to finish)
                self._process.wait(timeout=5)
        if self._process.poll() is None:
            self._process.kill()
            self._process.wait()
        self._process = None


def main() -> None:
    """The helper process: `python -c ... main() <socket fd> <tracking URI> <experiment>`."""
    handle, tracking_uri, experiment_name = sys.argv[1:4]
    setup_worker()  # the study's plugins, as every Ray worker imports them
    _serve(Connection(int(handle)), tracking_uri, experiment_name)


def _serve(pipe: Connection, tracking_uri: str, experiment_name: str) -> None:
    _lowest_priority()
    tracker = _get_ready(pipe, tracking_uri, experiment_name)
    data = None
    ahead: _Logged | None = None  # the best trial so far, logged ahead of the study's end
    while True:
        try:
            message = pipe.recv()
        except (EOFError, OSError):  # the study's process is gone (a forced stop may cut a message in two)
            message = None
        if message is None:
            os._exit(0)  # nothing of this process's own is left to write
        data = message.data if message.data is not None else data
        message = dataclasses.replace(message, data=data)
        if not message.final:
            if not pipe.poll():  # else a later best trial, or the study's selection, waits: that one is logged
                with contextlib.suppress(Exception):  # the final log repeats it, and raises
                    ahead = _log_ahead(tracker, message, ahead)
            continue
        try:
            answer, ahead = _log_final(tracker, message, ahead)
            pipe.send((True, answer))
        except Exception as error:  # the study's process raises it (as itself, if it pickles)
            try:
                pipe.send((False, error))
            except Exception:
                pipe.send((False, RuntimeError(f"logging the model failed: {type(error).__name__}: {error}")))


def _log(tracker: Any, message: _Export, link_parent: bool) -> _Logged | None:
    from raytune_fl.export.trial_model import log_checkpoint_model

    if message.data is None:  # _serve gives every message the data its study's first message carried
        raise RuntimeError("logging the model failed: the helper never received the study's data")
    args = (message.parent_run_id, message.trial_id, message.checkpoint, message.trial, message.data)
    logged = log_checkpoint_model(tracker, *args, link_parent)
    return None if logged is None else _Logged(message.key, logged[0], logged[1], logged[2].round)


def _log_ahead(tracker: Any, message: _Export, ahead: _Logged | None) -> _Logged | None:
    """The best trial so far logged on its run; the model it supersedes deleted."""
    if ahead is not None and ahead.key == message.key:
        return ahead
    logged = _log(tracker, message, link_parent=False)
    if logged is None:
        return ahead
    if ahead is not None:
        tracker.delete_model(ahead.run_id, ahead.model_id)
    return logged


def _log_final(tracker: Any, message: _Export, ahead: _Logged | None) -> tuple[tuple[str, str] | None, None]:
    """The study's selected trial: listed on the parent run if it was logged ahead, else logged now (and the model
    logged ahead, another trial's, deleted). Returns the answer and what is left logged ahead (nothing)."""
    if ahead is not None and ahead.key == message.key:
        if message.link_parent:
            tracker.link_model(message.parent_run_id, ahead.model_id, ahead.step)
        return (ahead.model_id, ahead.run_id), None
    if ahead is not None:  # first: the selected trial may be the same run, with a later checkpoint
        tracker.delete_model(ahead.run_id, ahead.model_id)
    logged = _log(tracker, message, message.link_parent)
    return (None if logged is None else (logged.model_id, logged.run_id)), None


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


def _get_ready(pipe: Connection, tracking_uri: str, experiment_name: str) -> Any:
    import warnings

    from raytune_fl.tracking import StudyTracker
    from raytune_fl.tracking.models import warm_up

    # the exported weights are on the CPU by construction; torch.export's archive writer warns as if they might not be
    warnings.filterwarnings("ignore", message="No complete tensor found")
    if not pipe.poll():  # else a model to log is waiting already (a short study's end): logging it warms up too
        warm_up()
    return StudyTracker(tracking_uri, experiment_name)
