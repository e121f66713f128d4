"""Live progress of a Tune run (a variant study, the ablation's cells), in the driver.

Three parts, so that what is shown can be tested without Ray:

- `ProgressState`: what happened so far, fed by events (a trial started, reported a round, completed, errored)
  and timed by an injected clock;
- the renderers (`status_line`, `ended_line`, `started_line`, `round_line`): pure functions of the state;
- `ProgressDisplay`: writes them to a stream. On a terminal one status line is redrawn in place (throttled) and
  a final one stays; anywhere else (CI, a log file, a pipe), and wherever NO_COLOR is set or TERM is dumb, it writes
  whole lines only, with no escape codes: one when a trial ends, a summary every `summary_every_s`, the final one.
  With `verbose`, the start and every round of every trial too.

`ConsoleProgress` takes a run's events (tune/events.py) to the state and the display; `console(verbose)` is the
watcher the commands hand to a study or an ablation. Tune's callback that feeds it is tune/callbacks.py's.

Between the trials' lines a command has phases of its own (Ray's start, a variant's first trial process importing
torch, the selected model's export): a line that ends in '...' says one began, and `SilenceWatch` (the command's
stdout, `watch_silences`) says every 10 s that it goes on while nothing else is printed, so no phase is silent for
longer (on a loaded machine the model's export alone took 112 s).
"""

from __future__ import annotations

import math
import os
import shutil
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TextIO

from raytune_fl.metrics import DIVERGED, DIVERGENCE_KEY, EPSILON, HP_PREFIX, ROUND, ROUND_TIME_S, TEST_ACC, TRAIN_LOSS
from raytune_fl.tracking.records import ENDED_STATUSES, ended_status
from raytune_fl.tracking.schema import (
    TRIAL_COLLAPSED,
    TRIAL_DIVERGED,
    TRIAL_ERROR,
    TRIAL_FINISHED,
    TRIAL_STOPPED_EARLY,
)
from raytune_fl.tune.events import Watch, Watcher

Clock = Callable[[], float]
ERASE = "\r\x1b[K"  # back to the start of the line, erase it (a terminal only)
UNDER_WAY = "..."  # the end of a line that says a phase began; the phase lasts until the next output
QUIET_S = 10.0  # the longest a phase stays silent: then a line says it goes on, and again every QUIET_S


def escapes_allowed(stream: Any) -> bool:
    """Whether `stream` may get ANSI escape codes (colours, a line redrawn in place): a terminal, with NO_COLOR unset
    or empty (no-color.org) and TERM not 'dumb'. A pipe or a file gets plain text only."""
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except ValueError:  # a closed stream
        return False


def plain_worker_lines() -> None:
    """Ray prints its workers' lines (a trial's notice, a client's warning) under a coloured `(name pid=...)`
    prefix whatever the stream, unless RAY_COLOR_PREFIX=0: set that (where the user has not set it) unless both
    stdout and stderr may get escape codes. Ray's driver reads it at each line it prints."""
    if not (escapes_allowed(sys.stdout) and escapes_allowed(sys.stderr)):
        os.environ.setdefault("RAY_COLOR_PREFIX", "0")


@dataclass
class TrialProgress:
    number: int  # in the order the trials were first seen: 1, 2, ...
    params: dict[str, Any]
    rounds: int  # the rounds it runs if nothing stops it
    started_at: float | None = None  # its latest start in this run (None: restored as it was, never started here)
    ended_at: float | None = None
    round: int = 0  # the last round it reported (or reached before a restore)
    last: dict[str, Any] = field(default_factory=dict)  # its last result
    running: bool = False
    outcome: str | None = None  # None until it ends: finished, stopped_early, diverged or error
    error_file: str | None = None

    @property
    def in_force(self) -> dict[str, Any]:
        """Its parameters as they are now: under PBT a trial goes on with perturbed values, which its results
        carry as hp.<name> (the config it started with is what Tune keeps)."""
        now = {k.removeprefix(HP_PREFIX): v for k, v in self.last.items() if k.startswith(HP_PREFIX)}
        numeric = (int, float)
        return {
            name: now[name] if isinstance(now.get(name), numeric) and isinstance(value, numeric) else value
            for name, value in self.params.items()
        }

    @property
    def seconds(self) -> float | None:
        if self.started_at is None or self.ended_at is None:
            return None
        return self.ended_at - self.started_at


class ProgressState:
    """What a Tune run has done so far. Pure: the events come in as calls, the time from `clock`."""

    def __init__(self, run: Watch, clock: Clock = time.monotonic) -> None:
        self.label, self.total, self.rounds = run.label, run.total, run.rounds
        self.metric, self.mode, self.noun = run.metric, run.mode, run.noun
        self.may_stop_early, self.show_best, self.clock = run.may_stop_early, run.show_best, clock  # ASHA: a bound
        self.rounds_of = run.rounds_of  # a trial's rounds by its config (default: rounds)
        # trial-rounds of the whole run at most (default: total x rounds)
        self.total_rounds = run.total_rounds if run.total_rounds is not None else run.total * run.rounds
        self.started_at = clock()
        self.first_start: float | None = None  # the time base of the rate: Ray's start-up before it is not counted
        self.rounds_run = 0  # trial-rounds reported in this run
        self.trials: dict[str, TrialProgress] = {}

    # ---- events

    def trial(self, trial_id: str, params: dict[str, Any] | None = None) -> TrialProgress:
        if trial_id not in self.trials:
            params = dict(params or {})
            rounds = self.rounds_of(params) if self.rounds_of is not None and params else self.rounds
            self.trials[trial_id] = TrialProgress(len(self.trials) + 1, params, rounds)
        return self.trials[trial_id]

    def started(self, trial_id: str, params: dict[str, Any], from_round: int = 0) -> TrialProgress:
        """Started, or restarted from a checkpoint taken after `from_round`."""
        now = self.clock()
        trial = self.trial(trial_id, params)
        trial.started_at, trial.running, trial.round = now, True, max(trial.round, from_round)
        if self.first_start is None:
            self.first_start = now
        return trial

    def reported(self, trial_id: str, result: dict[str, Any]) -> TrialProgress:
        trial = self.trial(trial_id)
        trial.last, trial.round = dict(result), int(result.get(ROUND) or trial.round + 1)
        self.rounds_run += 1
        return trial

    def completed(self, trial_id: str, last_result: dict[str, Any] | None = None) -> TrialProgress:
        trial = self.trial(trial_id)
        if last_result:
            trial.last, trial.round = dict(last_result), int(last_result.get(ROUND) or trial.round)
        trial.outcome = ended_status(trial.last, trial.round, trial.rounds)
        return self._ended(trial)

    def errored(self, trial_id: str, error_file: str | None = None) -> TrialProgress:
        trial = self.trial(trial_id)
        trial.outcome, trial.error_file = TRIAL_ERROR, error_file
        return self._ended(trial)

    def recovered(self, trial_id: str) -> TrialProgress:
        """Its process died; Tune queues it again, to restart from its last checkpoint."""
        trial = self.trial(trial_id)
        trial.running = False
        return trial

    def restored(self, trial_id: str, params: dict[str, Any], last_result: dict[str, Any] | None, failed: bool):
        """A trial that had ended before the run was interrupted (a resume): counted, not timed."""
        trial = self.trial(trial_id, params)
        if trial.outcome is None:
            if failed:
                self.errored(trial_id)
            else:
                self.completed(trial_id, last_result)
            trial.ended_at = None
        return trial

    def _ended(self, trial: TrialProgress) -> TrialProgress:
        trial.running, trial.ended_at = False, self.clock()
        return trial

    # ---- what is shown

    def best(self) -> tuple[float, TrialProgress] | None:
        """The best latest value of a trial (what selection compares: a trial's last round, not its best one); a
        diverged trial's worst-by-construction score never counts; the first trial to reach it on a tie."""
        found: tuple[float, TrialProgress] | None = None
        for trial in self.trials.values():
            value = trial.last.get(self.metric)
            if trial.last.get(DIVERGED) or not isinstance(value, (int, float)) or not math.isfinite(value):
                continue
            if found is None or (value > found[0] if self.mode == "max" else value < found[0]):
                found = (float(value), trial)
        return found

    def counts(self) -> dict[str, int]:
        counts = dict.fromkeys((*ENDED_STATUSES, TRIAL_ERROR), 0)  # in the order they are shown
        for trial in self.trials.values():
            if trial.outcome is not None:
                counts[trial.outcome] += 1
        return counts

    @property
    def ended(self) -> int:
        return sum(trial.outcome is not None for trial in self.trials.values())

    @property
    def running(self) -> int:
        return sum(trial.running for trial in self.trials.values())

    def rounds_left(self) -> int:
        """Trial-rounds still to run at most: every unfinished trial to its last round, those not started too."""
        unseen = max(0, self.total_rounds - sum(t.rounds for t in self.trials.values()))
        return unseen + sum(max(0, t.rounds - t.round) for t in self.trials.values() if t.outcome is None)

    def time_left(self) -> float | None:
        """Wall seconds per trial-round so far (concurrency included) x trial-rounds still to run at most."""
        if self.first_start is None or self.rounds_run == 0:
            return None
        return (self.clock() - self.first_start) / self.rounds_run * self.rounds_left()


# ---- the renderers: pure functions of the state ---------------------------------------------------------------


def duration(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def rounds_text(n: int) -> str:
    return f"{n} round" if n == 1 else f"{n} rounds"


def short(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def params_text(params: dict[str, Any]) -> str:
    return ", ".join(f"{k}={short(v)}" for k, v in params.items())


_OUTCOME_WORDS = (
    (TRIAL_COLLAPSED, "collapsed"),  # not-a-metric: the word shown (ran every round, ended at chance)
    (TRIAL_STOPPED_EARLY, "stopped early"),
    (TRIAL_DIVERGED, "diverged"),  # not-a-metric: the word shown
    (TRIAL_ERROR, "failed"),
)


def status_line(state: ProgressState, final: bool = False) -> str:
    """`[full] 3/16 trials ended (1 finished, 1 stopped early, 1 failed), 2 running | max val_acc=0.8123 (trial 3
    round 20: mu=0.01, lambda=1.5) | 2m05s elapsed, at most ~5m10s left`; the final one: `[full] done: ... | 5m10s`."""
    counts = state.counts()
    how = [f"{counts[TRIAL_FINISHED]} finished"]
    how += [f"{counts[outcome]} {word}" for outcome, word in _OUTCOME_WORDS if counts[outcome]]
    done = f"{state.ended}/{state.total} {state.noun}s ended ({', '.join(how)})"
    head = f"[{state.label}] "
    if final:
        head += "done: " if state.ended >= state.total else "interrupted: "
    parts = [head + (done if final else f"{done}, {state.running} running")]
    best = state.best() if state.show_best else None
    if best is not None:
        value, trial = best
        params = f": {params_text(trial.in_force)}" if trial.params else ""
        parts.append(
            f"{state.mode} {state.metric}={value:.4f} ({state.noun} {trial.number} round {trial.round}{params})"
        )
    elapsed = duration(state.clock() - state.started_at)
    if final:
        parts.append(elapsed)
    else:
        left = state.time_left()
        if left is None or state.rounds_left() == 0:
            parts.append(f"{elapsed} elapsed")
        else:
            parts.append(f"{elapsed} elapsed, {'at most ' if state.may_stop_early else ''}~{duration(left)} left")
    return " | ".join(parts)


def _values(state: ProgressState, result: dict[str, Any]) -> str:
    keys = [state.metric] + [k for k in (TEST_ACC,) if k != state.metric]
    text = " ".join(f"{k}={result[k]:.4f}" for k in keys if isinstance(result.get(k), (int, float)))
    spent = result.get(EPSILON)  # base.privacy: the budget the trial spent
    return text + (f" {EPSILON}={spent:.3g}" if isinstance(spent, (int, float)) and state.metric != EPSILON else "")


def ended_line(state: ProgressState, trial: TrialProgress) -> str:
    """One line when a trial ends: how, at which round, its scores and parameters, how long it took here."""
    prefix = f"[{state.label}] {state.noun} {trial.number}/{state.total}"
    params = f" [{params_text(trial.in_force)}]" if trial.params else ""
    seconds = trial.seconds
    took = f"{duration(seconds)}" if seconds is not None else ""
    if trial.outcome in (TRIAL_FINISHED, TRIAL_COLLAPSED):
        took = f" ({rounds_text(trial.round)}{', ' + took if took else ''})"
        how = "finished" if trial.outcome == TRIAL_FINISHED else "collapsed (at chance)"  # engine/chance.py
        return f"{prefix} {how}: {_values(state, trial.last)}{params}{took}"
    took = f" ({took})" if took else ""
    if trial.outcome == TRIAL_STOPPED_EARLY:
        return f"{prefix} stopped early by ASHA at round {trial.round}: {_values(state, trial.last)}{params}{took}"
    if trial.outcome == TRIAL_DIVERGED:
        reason = str(trial.last.get(DIVERGENCE_KEY) or "non-finite loss")[:120]
        return f"{prefix} diverged at round {trial.round}: {reason}{params}{took}"
    where = f" (see {trial.error_file})" if trial.error_file else ""
    return f"{prefix} FAILED after {rounds_text(trial.round)}{params}{took}{where}"


def started_line(state: ProgressState, trial: TrialProgress) -> str:
    """(--verbose)"""
    params = params_text(trial.params) or "defaults"
    return f"[{state.label}] {state.noun} {trial.number}/{state.total} started: {params}"


def first_start_line(state: ProgressState, trial: TrialProgress) -> str:
    """The run's first trial started: its new process imports torch and builds the data (seconds; minutes on a
    loaded machine) before it reports a round. A phase: the silence watch says when it goes on."""
    return (
        f"[{state.label}] starting {state.noun} {trial.number}/{state.total}: its process imports torch and builds "
        f"the data before round {trial.round + 1}{UNDER_WAY}"
    )


def repeated_round(shown: int, result: dict[str, Any]) -> bool:
    """Whether `result` reports a round at or before `shown`, the trial's last round already reported (or reached
    before the restore): a round run again after a restart from an older checkpoint."""
    reported = result.get(ROUND)
    return reported is not None and int(reported) <= shown


def round_line(state: ProgressState, trial: TrialProgress, result: dict[str, Any]) -> str:
    """(--verbose) one line per trial round."""

    def get(key: str) -> float:
        value = result.get(key)
        return float(value) if isinstance(value, (int, float)) else float("nan")

    return (
        f"[{state.label}] {state.noun} {trial.number}/{state.total} round {result.get(ROUND)}/{trial.rounds} "
        f"{state.metric}={get(state.metric):.4f} {TEST_ACC}={get(TEST_ACC):.4f} "
        f"loss={get(TRAIN_LOSS):.4f} ({get(ROUND_TIME_S):.1f}s)"
    )


# ---- the display ---------------------------------------------------------------------------------------------


class ProgressDisplay:
    """Writes the state to `stream` (default: whatever sys.stdout is at each write). `tty` (default: whether the
    stream may get escape codes, `escapes_allowed`, asked once) chooses the in-place status line; otherwise whole
    lines only, never '\\r' or ANSI codes."""

    def __init__(
        self,
        state: ProgressState,
        *,
        verbose: bool = False,
        stream: TextIO | None = None,
        tty: bool | None = None,
        width: int | None = None,  # a terminal's columns (default: asked at each redraw)
        redraw_every_s: float = 0.5,
        summary_every_s: float = 30.0,
    ) -> None:
        self.state, self.verbose, self._stream, self._tty, self.width = state, verbose, stream, tty, width
        self.redraw_every_s, self.summary_every_s = redraw_every_s, summary_every_s
        self._drawn_at: float | None = None  # a terminal: when the status line was last drawn
        self._shown = False  # a terminal: the status line is on screen (the cursor is at its end)
        self._last_text = ""  # a terminal: what the status line shows
        self._summary_at = state.started_at  # elsewhere: when the last summary line was written
        self._finished = False

    @property
    def stream(self) -> TextIO:
        return self._stream if self._stream is not None else sys.stdout

    @property
    def tty(self) -> bool:
        if self._tty is None:
            self._tty = escapes_allowed(self.stream)
        return self._tty

    def __getstate__(self) -> dict[str, Any]:
        # Tune pickles its callbacks with the run's configuration: a stream is not picklable, stdout is found again
        return {**self.__dict__, "_stream": None}

    def line(self, text: str) -> None:
        """A line that stays (a trial ended; with --verbose, a start or a round): above the status line."""
        if self.tty:
            self._write((ERASE if self._shown else "") + text + "\n")
            self._shown = False
            self._draw()
        else:
            self._write(text + "\n")

    def tick(self) -> None:
        """Something may have changed (an event, or only the clock): redraw, or write a summary when it is time."""
        if self._finished:
            return
        now = self.state.clock()
        if self.tty:
            if self._drawn_at is None or now - self._drawn_at >= self.redraw_every_s:
                self._draw()
        elif now - self._summary_at >= self.summary_every_s:
            self._summary_at = now
            self._write(status_line(self.state) + "\n")

    def finish(self) -> None:
        """The final status line, which stays."""
        if self._finished:
            return
        self._finished = True
        self._write((ERASE if self.tty and self._shown else "") + status_line(self.state, final=True) + "\n")
        self._shown = False

    def _draw(self) -> None:
        if self._finished:
            return
        width = self.width or shutil.get_terminal_size((100, 24)).columns
        text = status_line(self.state)
        if len(text) > width - 1:  # a wrapped line could not be redrawn in place
            text = text[: max(1, width - 4)] + "..."
        if not (self._shown and text == self._last_text):  # nothing new: nothing written
            self._write(ERASE + text)
        self._shown, self._drawn_at, self._last_text = True, self.state.clock(), text

    def _write(self, text: str) -> None:
        self.stream.write(text)
        self.stream.flush()


class ConsoleProgress:
    """A Tune run's events (tune/events.py) -> the state, the lines and the status line on the console."""

    def __init__(
        self,
        state: ProgressState,
        display: ProgressDisplay | None = None,
        verbose: bool = False,
        after: str | None = None,
    ) -> None:
        """`display` (tests: a stream, a tty choice) defaults to stdout's, with `verbose`. `after`: what the command
        does once the run has ended (a phase, said after the final status line), e.g. "saving each cell's model"."""
        self.state, self.after = state, after
        self.display = display or ProgressDisplay(state, verbose=verbose)
        self._after_said = False

    def restored(self, trial_id: str, config: dict[str, Any], last_result: Any, errored: bool) -> None:
        self.state.restored(trial_id, config, last_result, errored)

    def started(self, trial_id: str, config: dict[str, Any], round: int) -> None:
        first = self.state.first_start is None  # the run's first trial process: seconds before its first round
        started = self.state.started(trial_id, config, round)
        if self.display.verbose:
            self.display.line(started_line(self.state, started))
        if first:
            self.display.line(first_start_line(self.state, started))
        self.display.tick()

    def reported(self, trial_id: str, result: dict[str, Any]) -> None:
        # a trial resumed or restarted from a checkpoint older than its last reported round runs that round again:
        # its line was printed the first time
        again = repeated_round(self.state.trial(trial_id).round, result)
        reported = self.state.reported(trial_id, result)
        if self.state.rounds_run == 1:
            settled()  # the first trial's start-up is over, though nothing may be printed until a trial ends
        if self.display.verbose and not again:
            self.display.line(round_line(self.state, reported, result))
        self.display.tick()

    def completed(self, trial_id: str, last_result: Any) -> None:
        self.display.line(ended_line(self.state, self.state.completed(trial_id, last_result)))

    def errored(self, trial_id: str, error_file: str | None) -> None:
        self.display.line(ended_line(self.state, self.state.errored(trial_id, error_file)))

    def recovered(self, trial_id: str) -> None:
        recovered = self.state.recovered(trial_id)
        self.display.line(
            f"[{self.state.label}] {self.state.noun} {recovered.number}/{self.state.total} failed after round "
            f"{recovered.round}: Tune restarts it from its last checkpoint"
        )

    def tick(self) -> None:
        self.display.tick()

    def finish(self) -> None:
        self.display.finish()
        if self.after and not self._after_said and self.state.ended >= self.state.total:  # not a stopped run's
            self._after_said = True
            self.display.line(f"[{self.state.label}] {self.after}{UNDER_WAY}")


def console(verbose: bool = False, after: str | None = None) -> Watcher:
    """The CLI's watcher: a live status line on a terminal, a line per trial elsewhere; with `verbose` a line per
    trial start and round too; `after`, what the command does once a run has ended (ConsoleProgress). Where the
    output is not a terminal (or NO_COLOR is set), Ray's prefixes of the workers' lines are plain too."""
    plain_worker_lines()  # before any trial prints: every command that runs trials makes its watcher here

    def watch(run: Watch) -> ConsoleProgress:
        state = ProgressState(run)
        return ConsoleProgress(state, verbose=verbose, after=after)

    return watch


# ---- the silences between lines -----------------------------------------------------------------------------------


class SilenceWatch:
    """A command's stdout, watched for silences. A line that ends in '...' says a phase began (Ray's start, a trial
    process's imports, a model's export); while it lasts and nothing else is written, a line every `every_s` says
    that it goes on: `  saving the selected model to MLflow... (20s so far)`. Any other output ends it.
    `during(text)` brackets a phase that says nothing unless it lasts (waiting for Ray's start). Whole lines only,
    on a terminal too; what is written passes through unchanged."""

    _TAIL = 4096  # of the line being written: enough to tell how it ends

    def __init__(self, stream: TextIO, every_s: float = QUIET_S, clock: Clock = time.monotonic) -> None:
        self.stream, self.every_s, self.clock = stream, every_s, clock
        self._lock = threading.RLock()  # reentrant: a signal handler that prints runs on the thread holding it
        self._tail = ""  # what was written since the last newline
        self._said: tuple[str, float] | None = None  # the phase a '...' line began (its text), and when
        self._during: list[tuple[str, float]] = []  # the phases `during` brackets, innermost last
        self._quiet_since = clock()  # the last output, this watch's own lines included

    def __getattr__(self, name: str) -> Any:  # isatty, fileno, encoding, buffer, ...: the stream's
        if name == "stream":  # not set yet (a copy being made): no recursion
            raise AttributeError(name)
        return getattr(self.stream, name)

    def write(self, text: str) -> int:
        with self._lock:
            if text:
                self._note(text)
            return self.stream.write(text)

    def flush(self) -> None:
        self.stream.flush()

    def _note(self, text: str) -> None:
        self._quiet_since = self.clock()
        lines = (self._tail + text).split("\n")
        self._tail = lines[-1][-self._TAIL :]
        line = lines[-2].rstrip() if len(lines) > 1 else ""
        began = not self._tail and line.endswith(UNDER_WAY)  # a whole line, and nothing after it yet
        self._said = (line[: -len(UNDER_WAY)], self._quiet_since) if began else None

    def settled(self) -> None:
        """The phase a line began is over, though nothing was printed (a trial's first round came)."""
        with self._lock:
            self._said = None

    def heard(self) -> None:
        """Something was written beside stdout (stderr: a stop's message, a warning): not silent, and the phase a
        line began is no longer the news (a stopped run must not be said to be importing still)."""
        with self._lock:
            self._said, self._quiet_since = None, self.clock()

    @contextmanager
    def during(self, text: str) -> Iterator[None]:
        """A phase that is said only once it has been silent for `every_s`, and ends with the block."""
        entry = (text, self.clock())
        with self._lock:
            self._during.append(entry)
        try:
            yield
        finally:
            with self._lock:
                self._during.remove(entry)

    def check(self) -> None:
        """A line if a phase has been silent for `every_s` (the watch's thread calls this twice a second)."""
        with self._lock:
            now, phase = self.clock(), self._during[-1] if self._during else self._said
            if phase is None or self._tail or now - self._quiet_since < self.every_s:
                return  # no phase, a line being written (a terminal's status line), or not silent for long
            text, since = phase
            self.stream.write(f"{text}{UNDER_WAY} ({duration(now - since)} so far)\n")
            self.stream.flush()
            self._quiet_since = now

    def run(self, stop: threading.Event, every_s: float = 0.5) -> None:
        while not stop.wait(every_s):
            try:
                self.check()
            except (OSError, ValueError):  # the stream was closed (a pipe's reader gone): nothing more to say
                return


class _Beside:
    """stderr beside a watched stdout: what it writes passes through, and tells the watch (`SilenceWatch.heard`)."""

    def __init__(self, stream: TextIO, watch: SilenceWatch) -> None:
        self.stream, self.watch = stream, watch

    def __getattr__(self, name: str) -> Any:
        if name in ("stream", "watch"):  # not set yet: no recursion
            raise AttributeError(name)
        return getattr(self.stream, name)

    def write(self, text: str) -> int:
        if text:
            self.watch.heard()
        return self.stream.write(text)

    def flush(self) -> None:
        self.stream.flush()


@contextmanager
def watch_silences(every_s: float = QUIET_S) -> Iterator[SilenceWatch]:
    """sys.stdout watched for the length of a command (see SilenceWatch), and sys.stderr beside it; a command run by
    another (reproduce runs tune and ablate) shares its caller's watch."""
    if isinstance(sys.stdout, SilenceWatch):
        yield sys.stdout
        return
    watch, stop = SilenceWatch(sys.stdout, every_s), threading.Event()
    beside = _Beside(sys.stderr, watch)
    thread = threading.Thread(target=watch.run, args=(stop,), name="silence-watch", daemon=True)
    sys.stdout, sys.stderr = watch, beside  # TextIOs by delegation
    thread.start()
    try:
        yield watch
    finally:
        stop.set()
        thread.join(timeout=2)
        if sys.stdout is watch:
            sys.stdout = watch.stream
        if sys.stderr is beside:
            sys.stderr = beside.stream


@contextmanager
def during(text: str) -> Iterator[None]:
    """A phase said only if it is silent for long (`SilenceWatch.during`), where a command watches its stdout."""
    if not isinstance(sys.stdout, SilenceWatch):
        yield
        return
    with sys.stdout.during(text):
        yield


def settled() -> None:
    """The phase the last line began is over (`SilenceWatch.settled`), where a command watches its stdout."""
    if isinstance(sys.stdout, SilenceWatch):
        sys.stdout.settled()
