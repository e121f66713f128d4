"""The live progress of a study or an ablation (cli/progress.py, fed by tune/callbacks.py's TrialEventsCallback):
hand-built events on a fake clock, the exact text; then the shared store's real study and ablation through
`tune.py` and `ablate.py` (with --verbose: tests/system/test_progress.py)."""

from __future__ import annotations

import io
import os
import pickle
import re
import sys
import time
from types import SimpleNamespace

import pytest

from raytune_fl.cli.progress import (
    ConsoleProgress,
    ProgressDisplay,
    ProgressState,
    SilenceWatch,
    console,
    ended_line,
    escapes_allowed,
    plain_worker_lines,
    repeated_round,
    round_line,
    started_line,
    status_line,
    watch_silences,
)
from raytune_fl.tune.callbacks import TrialEventsCallback
from raytune_fl.tune.events import Watch
from tests.support.progress_lines import ENDED, PER_ROUND


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def at(self, seconds: float) -> Clock:
        self.now = seconds
        return self


FIRST_START = "[{label}] starting trial {n}: its process imports torch and builds the data before round 1..."


def _state(clock: Clock, total: int = 4, rounds: int = 3, **kwargs) -> ProgressState:
    kwargs.setdefault("may_stop_early", True)
    return ProgressState(Watch("full", total, rounds, "val_acc", "max", **kwargs), clock=clock)


def _result(round_: int, val: float, test: float = 0.5, **more) -> dict:
    return {"round": round_, "val_acc": val, "test_acc": test, "train_loss": 1.25, "round_time_s": 2.0, **more}


# ---- the state and its text --------------------------------------------------------------------------------------


def test_counts_best_with_its_params_and_the_time_left():
    clock = Clock()
    state = _state(clock)
    assert status_line(state) == "[full] 0/4 trials ended (0 finished), 0 running | 0s elapsed"
    clock.at(10)
    state.started("a", {"mu": 0.1234567, "lambda": 2})
    clock.at(20)
    state.reported("a", _result(1, 0.5))
    # 1 trial-round in 10 s (since the first start); at most 2 more for a, 3 x 3 for the trials not started
    assert status_line(state) == (
        "[full] 0/4 trials ended (0 finished), 1 running | max val_acc=0.5000 (trial 1 round 1: mu=0.1235, lambda=2)"
        " | 20s elapsed, at most ~1m50s left"
    )
    clock.at(30)
    state.reported("a", _result(2, 0.7))
    clock.at(40)
    stopped = state.completed("a", _result(2, 0.7))
    assert ended_line(state, stopped) == (
        "[full] trial 1/4 stopped early by ASHA at round 2: val_acc=0.7000 test_acc=0.5000 [mu=0.1235, lambda=2] (30s)"
    )
    state.started("b", {"mu": 0.5, "lambda": 1})
    clock.at(50)
    state.reported("b", _result(1, 0.9))
    clock.at(70)
    state.reported("b", _result(2, 0.6))  # the best of the trials' latest values (selection's), not of every round
    # 4 trial-rounds in 60 s: 15 s each; b has 1 round left, 2 trials 3 each: 7 x 15 s
    assert status_line(state) == (
        "[full] 1/4 trials ended (0 finished, 1 stopped early), 1 running | max val_acc=0.7000 (trial 1 round 2: "
        "mu=0.1235, lambda=2) | 1m10s elapsed, at most ~1m45s left"
    )


def test_a_pbt_trial_shows_the_values_in_force_not_those_it_started_with():
    clock = Clock()
    state = _state(clock, total=2, rounds=4, may_stop_early=False)
    state.started("a", {"optimizer.lr": 0.1372, "sigma": "median"})
    state.reported("a", _result(2, 0.6, **{"hp.optimizer.lr": 0.1372}))
    # PBT: at round 2 it copied another trial and went on at 0.02; a text value stays as it started
    state.reported("a", _result(4, 0.96, **{"hp.optimizer.lr": 0.02, "hp.sigma": 1.0}))
    assert "(trial 1 round 4: optimizer.lr=0.02, sigma=median)" in status_line(state)
    clock.at(12)
    line = ended_line(state, state.completed("a", _result(4, 0.96, **{"hp.optimizer.lr": 0.02})))
    assert line.endswith("val_acc=0.9600 test_acc=0.5000 [optimizer.lr=0.02, sigma=median] (4 rounds, 12s)")


def test_every_way_a_trial_ends_and_the_final_line():
    clock = Clock()
    state = _state(clock)
    for name, mu in (("a", 0.01), ("b", 1e6), ("c", 0.2), ("d", 0.3)):
        state.started(name, {"mu": mu})
    clock.at(5)
    state.reported("a", _result(3, 0.8, 0.75))
    state.reported("b", {"round": 1, "diverged": 1.0, "val_acc": 0.0, "divergence": "non-finite local loss (client 2)"})
    state.reported("c", _result(1, 0.4))
    finished = state.completed("a", _result(3, 0.8, 0.75))
    diverged = state.completed("b", {"round": 1, "diverged": 1.0, "val_acc": 0.0, "divergence": "non-finite (2)"})
    failed = state.errored("c", "/tmp/ray/c/error.txt")
    assert (
        ended_line(state, finished)
        == "[full] trial 1/4 finished: val_acc=0.8000 test_acc=0.7500 [mu=0.01] (3 rounds, 5s)"
    )
    assert ended_line(state, diverged) == "[full] trial 2/4 diverged at round 1: non-finite (2) [mu=1e+06] (5s)"
    assert ended_line(state, failed) == "[full] trial 3/4 FAILED after 1 round [mu=0.2] (5s) (see /tmp/ray/c/error.txt)"
    assert state.best()[1].number == 1  # a diverged trial's val_acc 0 never counts
    assert status_line(state) == (
        "[full] 3/4 trials ended (1 finished, 1 diverged, 1 failed), 1 running | max val_acc=0.8000 (trial 1 round 3: "
        "mu=0.01) | 5s elapsed, at most ~5s left"  # 3 trial-rounds reported in 5 s; d has all 3 left
    )
    assert status_line(state, final=True).startswith("[full] interrupted: 3/4 trials ended")
    state.completed("d", _result(3, 0.7))
    clock.at(65)
    assert status_line(state, final=True) == (
        "[full] done: 4/4 trials ended (2 finished, 1 diverged, 1 failed) | max val_acc=0.8000 (trial 1 round 3: "
        "mu=0.01) | 1m05s"
    )


def test_a_trial_that_ran_every_round_at_chance_is_counted_and_said_collapsed():
    clock = Clock()
    state = _state(clock, total=3)
    for name in ("a", "b", "c"):
        state.started(name, {"mu": 0.1})
    clock.at(4)
    learned = state.completed("a", _result(3, 0.8, 0.75, collapsed=0.0))
    stuck = state.completed("b", _result(3, 0.1, 0.11, collapsed=1.0))
    cut = state.completed("c", _result(1, 0.1, 0.11, collapsed=1.0))  # ASHA's cut, not a collapse
    assert (learned.outcome, stuck.outcome, cut.outcome) == ("finished", "collapsed", "stopped_early")
    assert ended_line(state, stuck) == (
        "[full] trial 2/3 collapsed (at chance): val_acc=0.1000 test_acc=0.1100 [mu=0.1] (3 rounds, 4s)"
    )
    assert list(state.counts()) == ["finished", "collapsed", "stopped_early", "diverged", "error"]
    assert status_line(state, final=True) == (
        "[full] done: 3/3 trials ended (1 finished, 1 collapsed, 1 stopped early) | max val_acc=0.8000 (trial 1 "
        "round 3: mu=0.1) | 4s"
    )


def test_min_mode_no_params_and_no_asha():
    clock = Clock()
    state = ProgressState(Watch("fedavg", 1, 4, "val_loss", "min"), clock=clock)  # FIFO: the time left is an estimate
    state.started("a", {})
    clock.at(3)
    state.reported("a", {"round": 1, "val_loss": 0.9})
    state.reported("a", {"round": 2, "val_loss": float("nan")})  # not a value
    state.reported("a", {"round": 3, "val_loss": 0.4})
    assert status_line(state) == (
        "[fedavg] 0/1 trials ended (0 finished), 1 running | min val_loss=0.4000 (trial 1 round 3) | 3s elapsed, "
        "~1s left"
    )
    state.completed("a", {"round": 4, "val_loss": 0.5})
    assert status_line(state) == (
        "[fedavg] 1/1 trials ended (1 finished), 0 running | min val_loss=0.5000 (trial 1 round 4) | 3s elapsed"
    )


def test_ablation_cells_have_their_own_rounds_and_no_best():
    clock = Clock()
    rounds = {"fedavg/seed0/rounds=2": 2, "fedavg/seed0/rounds=4": 4}
    state = ProgressState(
        Watch(
            "ablation",
            2,
            4,
            noun="cell",
            show_best=False,
            rounds_of=lambda config: rounds[config["cell"]],
            total_rounds=6,
        ),
        clock=clock,
    )
    short = state.started("x", {"cell": "fedavg/seed0/rounds=2"})
    clock.at(4)
    state.reported("x", _result(1, 0.5))
    state.reported("x", _result(2, 0.6))
    assert ended_line(state, state.completed("x", _result(2, 0.6))) == (
        "[ablation] cell 1/2 finished: val_acc=0.6000 test_acc=0.5000 [cell=fedavg/seed0/rounds=2] (2 rounds, 4s)"
    )
    assert short.rounds == 2
    # 2 cell-rounds in 4 s; the 4-round cell is still to run
    assert status_line(state) == "[ablation] 1/2 cells ended (1 finished), 0 running | 4s elapsed, ~8s left"
    long = state.started("y", {"cell": "fedavg/seed0/rounds=4"})
    assert round_line(state, long, _result(1, 0.5)) == (
        "[ablation] cell 2/2 round 1/4 val_acc=0.5000 test_acc=0.5000 loss=1.2500 (2.0s)"
    )


def test_the_verbose_lines_keep_the_old_format():
    state = _state(Clock())
    trial = state.started("a", {"mu": 0.5})
    assert started_line(state, trial) == "[full] trial 1/4 started: mu=0.5"
    assert started_line(state, state.started("b", {})) == "[full] trial 2/4 started: defaults"
    assert round_line(state, trial, _result(2, 0.75, 0.7)) == (
        "[full] trial 1/4 round 2/3 val_acc=0.7500 test_acc=0.7000 loss=1.2500 (2.0s)"
    )


# ---- the display ---------------------------------------------------------------------------------------------------


def _trial(trial_id: str, config: dict, last_result: dict | None = None, status: str = "RUNNING", error_file=None):
    return SimpleNamespace(
        trial_id=trial_id, config=config, last_result=last_result or {}, status=status, error_file=error_file
    )


def test_not_a_terminal_whole_lines_a_line_per_trial_and_a_summary_every_30_s():
    clock, stream = Clock(), io.StringIO()
    state = _state(clock, total=2, rounds=2)
    callback = TrialEventsCallback(ConsoleProgress(state, ProgressDisplay(state, stream=stream, tty=False)))
    a = _trial("a", {"mu": 0.1})
    callback.on_step_begin(0, [a])
    callback.on_trial_start(0, [a], a)
    for t, round_, val in ((10, 1, 0.5), (29, 2, 0.6)):
        clock.at(t)
        a.last_result = _result(round_, val)
        callback.on_trial_result(0, [a], a, a.last_result)
        callback.on_step_end(0, [a])
    # the first trial's start-up said (its process imports torch), then no line per round, no summary before 30 s
    assert stream.getvalue() == f"{FIRST_START.format(label='full', n='1/2')}\n"
    clock.at(30)
    callback.on_trial_complete(0, [a], a)
    callback.on_step_end(0, [a])
    b = _trial("b", {"mu": 0.2})
    callback.on_trial_start(0, [a, b], b)
    for t in (31, 59.9, 60, 75):
        clock.at(t)
        callback.on_step_end(0, [a, b])
    clock.at(80)
    callback.on_trial_error(0, [a, b], b)
    callback.on_experiment_end([a, b])
    callback.on_experiment_end([a, b])  # once only
    assert stream.getvalue().splitlines() == [
        FIRST_START.format(label="full", n="1/2"),  # b's start says nothing: its process is a's, ready
        "[full] trial 1/2 finished: val_acc=0.6000 test_acc=0.5000 [mu=0.1] (2 rounds, 30s)",
        # b has not started yet: 2 trial-rounds in 30 s, 2 to go
        "[full] 1/2 trials ended (1 finished), 0 running | max val_acc=0.6000 (trial 1 round 2: mu=0.1) | 30s elapsed,"
        " at most ~30s left",
        "[full] 1/2 trials ended (1 finished), 1 running | max val_acc=0.6000 (trial 1 round 2: mu=0.1) | "
        "1m00s elapsed, at most ~1m00s left",
        "[full] trial 2/2 FAILED after 0 rounds [mu=0.2] (50s)",
        "[full] done: 2/2 trials ended (1 finished, 1 failed) | max val_acc=0.6000 (trial 1 round 2: mu=0.1) | 1m20s",
    ]
    assert "\r" not in stream.getvalue() and "\x1b" not in stream.getvalue()


def test_verbose_adds_the_starts_and_every_round():
    clock, stream = Clock(), io.StringIO()
    state = _state(clock, total=1, rounds=2, may_stop_early=False)
    callback = TrialEventsCallback(
        ConsoleProgress(state, ProgressDisplay(state, stream=stream, tty=False, verbose=True))
    )
    a = _trial("a", {"mu": 0.1})
    callback.on_trial_start(0, [a], a)
    for round_ in (1, 2):
        clock.at(round_)
        a.last_result = _result(round_, 0.4 + round_ / 10)
        callback.on_trial_result(0, [a], a, a.last_result)
    callback.on_trial_complete(0, [a], a)
    callback.on_experiment_end([a])
    assert stream.getvalue().splitlines() == [
        "[full] trial 1/1 started: mu=0.1",
        FIRST_START.format(label="full", n="1/1"),
        "[full] trial 1/1 round 1/2 val_acc=0.5000 test_acc=0.5000 loss=1.2500 (2.0s)",
        "[full] trial 1/1 round 2/2 val_acc=0.6000 test_acc=0.5000 loss=1.2500 (2.0s)",
        "[full] trial 1/1 finished: val_acc=0.6000 test_acc=0.5000 [mu=0.1] (2 rounds, 2s)",
        "[full] done: 1/1 trials ended (1 finished) | max val_acc=0.6000 (trial 1 round 2: mu=0.1) | 2s",
    ]


def test_a_terminal_redraws_one_line_in_place_at_most_twice_a_second():
    clock, stream = Clock(), io.StringIO()
    state = _state(clock, total=1, rounds=2, may_stop_early=False)
    display = ProgressDisplay(state, stream=stream, tty=True, width=200)
    callback = TrialEventsCallback(ConsoleProgress(state, display))
    a = _trial("a", {"mu": 0.1})
    for t in (0.0, 0.1, 0.2, 0.49):  # one draw: the others come too soon after it
        clock.at(t)
        callback.on_step_end(0, [a])
    assert stream.getvalue() == "\r\x1b[K[full] 0/1 trials ended (0 finished), 0 running | 0s elapsed"
    clock.at(0.5)
    callback.on_trial_start(0, [a], a)
    clock.at(0.7)
    callback.on_step_end(0, [a])
    frames = stream.getvalue().split("\r\x1b[K")
    # the first trial's start-up is a line that stays above the status line, drawn again at once
    assert frames[1:] == [
        "[full] 0/1 trials ended (0 finished), 0 running | 0s elapsed",
        FIRST_START.format(label="full", n="1/1") + "\n",
        "[full] 0/1 trials ended (0 finished), 1 running | 0s elapsed",
    ]
    clock.at(1.0)
    a.last_result = _result(2, 0.5)
    callback.on_trial_result(0, [a], a, a.last_result)
    clock.at(1.5)
    callback.on_trial_complete(0, [a], a)  # a line that stays, then the status line under it again
    callback.on_experiment_end([a])
    frames = stream.getvalue().split("\r\x1b[K")
    assert frames[-3:] == [
        "[full] trial 1/1 finished: val_acc=0.5000 test_acc=0.5000 [mu=0.1] (2 rounds, 1s)\n",
        "[full] 1/1 trials ended (1 finished), 0 running | max val_acc=0.5000 (trial 1 round 2: mu=0.1) | 2s elapsed",
        "[full] done: 1/1 trials ended (1 finished) | max val_acc=0.5000 (trial 1 round 2: mu=0.1) | 2s\n",
    ]
    callback.on_step_end(0, [a])  # nothing after the final line
    assert stream.getvalue().endswith(" | 2s\n")


def test_a_terminal_line_is_cut_to_the_width():
    clock, stream = Clock(), io.StringIO()
    state = _state(clock)
    ProgressDisplay(state, stream=stream, tty=True, width=30).tick()
    assert stream.getvalue() == "\r\x1b[K" + "[full] 0/4 trials ended (0..."
    assert len(stream.getvalue()) - len("\r\x1b[K") == 29  # a wrapped line could not be redrawn in place


def test_a_terminal_status_line_is_written_only_when_its_text_changes():
    clock, stream = Clock(), io.StringIO()
    display = ProgressDisplay(_state(clock), stream=stream, tty=True, width=200, redraw_every_s=0.5)
    for t in (0.0, 0.5, 1.0, 1.4):  # "0s", "0s" (rounded half to even), "1s", throttled
        clock.at(t)
        display.tick()
    assert stream.getvalue().split("\r\x1b[K")[1:] == [
        "[full] 0/4 trials ended (0 finished), 0 running | 0s elapsed",
        "[full] 0/4 trials ended (0 finished), 0 running | 1s elapsed",
    ]


def test_tty_is_asked_of_the_stream_once(monkeypatch):
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm")

    class Stream(io.StringIO):
        asked = 0

        def isatty(self) -> bool:
            Stream.asked += 1
            return True

    stream = Stream()
    display = ProgressDisplay(_state(Clock()), stream=stream, width=100)
    for _ in range(3):
        display.tick()
        display.line("x")
    assert display.tty and Stream.asked == 1
    assert ProgressDisplay(_state(Clock()), stream=io.StringIO()).tty is False


# ---- issue 46: no escape codes where they would be text --------------------------------------------------------


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _events_on(display: ProgressDisplay, clock: Clock) -> str:
    """A trial started, two rounds and its end (over 40 s: a summary line too), shown on `display`; what it wrote."""
    callback = TrialEventsCallback(ConsoleProgress(display.state, display))
    a = _trial("a", {"mu": 0.1})
    callback.on_trial_start(0, [a], a)
    for t, round_ in ((10, 1), (40, 2)):
        clock.at(t)
        a.last_result = _result(round_, 0.5)
        callback.on_trial_result(0, [a], a, a.last_result)
        callback.on_step_end(0, [a])
    callback.on_trial_complete(0, [a], a)
    display.finish()
    return display.stream.getvalue()


@pytest.mark.parametrize(
    ("env", "escapes"),
    [({}, True), ({"NO_COLOR": "1"}, False), ({"TERM": "dumb"}, False), ({"NO_COLOR": ""}, True)],
    ids=["terminal", "no-color", "dumb-terminal", "no-color-empty"],
)
def test_a_terminal_gets_escape_codes_unless_no_color_or_a_dumb_terminal(monkeypatch, env, escapes):
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert escapes_allowed(_Terminal()) is escapes
    clock = Clock()
    state = _state(clock, total=1, rounds=2)
    written = _events_on(ProgressDisplay(state, stream=_Terminal(), width=200, verbose=True), clock)
    assert ("\x1b[" in written) is escapes and ("\r" in written) is escapes
    assert "[full] trial 1/1 finished" in written  # the same lines either way


def test_a_pipe_or_a_file_gets_no_escape_codes(monkeypatch, tmp_path):
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    clock = Clock()
    with open(tmp_path / "log.txt", "w") as file:  # a real file: isatty() is False
        assert escapes_allowed(file) is False
    written = _events_on(ProgressDisplay(_state(clock, total=1, rounds=2), stream=io.StringIO(), verbose=True), clock)
    assert "\x1b[" not in written and "\r" not in written and "[full] trial 1/1 finished" in written
    assert escapes_allowed(object()) is False  # no isatty at all


def _ray_line(is_err: bool = False) -> str:
    """A trial's line as Ray's driver prints it (its own function, to a buffer): prefix, then the text."""
    from ray._private.worker import print_worker_logs

    buffer = io.StringIO()
    data = {"pid": 4242, "task_name": "federated_trial", "ip": "10.0.0.1", "localhost": "10.0.0.1", "is_err": is_err}
    print_worker_logs({**data, "lines": ["notice: resources.client_batch: ..."]}, buffer)
    return buffer.getvalue()


def test_rays_prefix_of_a_workers_line_is_plain_unless_stdout_and_stderr_are_terminals(monkeypatch):
    monkeypatch.delenv("RAY_COLOR_PREFIX", raising=False)
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    monkeypatch.setattr(sys, "stdout", _Terminal())
    monkeypatch.setattr(sys, "stderr", _Terminal())
    plain_worker_lines()  # both terminals: Ray colours its prefix, as it always did
    assert "RAY_COLOR_PREFIX" not in os.environ
    assert _ray_line().startswith("\x1b[")
    monkeypatch.setattr(sys, "stdout", io.StringIO())  # `raytune-fl tune ... | tee log`: stdout piped
    plain_worker_lines()
    assert _ray_line() == "(federated_trial pid=4242) notice: resources.client_batch: ...\n"
    assert _ray_line(is_err=True) == _ray_line()


def test_no_color_makes_rays_prefix_plain_on_a_terminal_and_an_explicit_choice_stays(monkeypatch):
    monkeypatch.delenv("RAY_COLOR_PREFIX", raising=False)
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setattr(sys, "stdout", _Terminal())
    monkeypatch.setattr(sys, "stderr", _Terminal())
    plain_worker_lines()
    assert "\x1b[" not in _ray_line()
    monkeypatch.setenv("RAY_COLOR_PREFIX", "1")  # the user's own choice of Ray's colours is theirs
    plain_worker_lines()
    assert os.environ["RAY_COLOR_PREFIX"] == "1"


def test_the_commands_watcher_makes_rays_prefix_plain_when_piped(monkeypatch):
    """tune.py and ablate.py make their watcher with console() before any trial runs (scripts/ too)."""
    monkeypatch.delenv("RAY_COLOR_PREFIX", raising=False)
    monkeypatch.setattr(sys, "stdout", io.StringIO())
    console()
    assert "\x1b[" not in _ray_line()


def test_a_resumed_run_counts_what_had_ended_and_continues_from_the_checkpoint():
    clock, stream = Clock(), io.StringIO()
    state = _state(clock, total=3, rounds=4)
    callback = TrialEventsCallback(ConsoleProgress(state, ProgressDisplay(state, stream=stream, tty=False)))
    done = _trial("a", {"mu": 0.1}, _result(4, 0.7), status="TERMINATED")
    cut = _trial("b", {"mu": 0.2}, _result(2, 0.6), status="PENDING")  # restored from its checkpoint at round 2
    callback.on_step_begin(0, [done, cut])
    callback.on_trial_start(0, [done, cut], cut)
    clock.at(10)
    callback.on_trial_result(0, [done, cut], cut, _result(3, 0.65))
    assert state.counts()["finished"] == 1  # counted, not announced again; b's process starts from its checkpoint
    assert stream.getvalue() == FIRST_START.format(label="full", n="2/3").replace("round 1", "round 3") + "\n"
    # b: 1 round left; c: 4; 1 round run here in 10 s
    assert status_line(state).endswith("| 10s elapsed, at most ~50s left")
    assert status_line(state).startswith(
        "[full] 1/3 trials ended (1 finished), 1 running | max val_acc=0.7000 (trial 1"
    )


def test_a_round_run_again_after_a_restore_is_printed_once():
    assert [repeated_round(3, {"round": r}) for r in (2, 3, 4)] == [True, True, False]
    assert not repeated_round(3, {})  # not one of ours: no round to compare
    clock, stream = Clock(), io.StringIO()
    state = _state(clock, total=1, rounds=4, may_stop_early=False)
    callback = TrialEventsCallback(
        ConsoleProgress(state, ProgressDisplay(state, stream=stream, tty=False, verbose=True))
    )
    # killed after round 3 was reported, its checkpoint after round 2: the resumed trial runs round 3 again
    cut = _trial("b", {"mu": 0.2}, _result(3, 0.6), status="PENDING")
    callback.on_step_begin(0, [cut])
    callback.on_trial_start(0, [cut], cut)
    for round_ in (3, 4):
        callback.on_trial_result(0, [cut], cut, _result(round_, 0.5 + round_ / 10))
    rounds = [line for line in stream.getvalue().splitlines() if " round " in line and "val_acc=" in line]
    assert rounds == ["[full] trial 1/1 round 4/4 val_acc=0.9000 test_acc=0.5000 loss=1.2500 (2.0s)"]


def test_the_callback_pickles_without_its_stream():
    """Tune pickles the run's callbacks with the tuner (and restores them on a resume)."""
    state = ProgressState(Watch("full", 2, 3))
    callback = TrialEventsCallback(
        ConsoleProgress(state, ProgressDisplay(state, stream=io.TextIOWrapper(io.BytesIO())))
    )
    copy = pickle.loads(pickle.dumps(callback))
    assert copy.events.display._stream is None and copy.events.state.total == 2


def test_what_follows_a_run_is_said_once_after_its_final_line_and_not_after_a_stopped_run():
    for total, said in ((1, True), (2, False)):  # 2: the second trial never ended (Ctrl-C)
        clock, stream = Clock(), io.StringIO()
        state = _state(clock, total=total, rounds=2, may_stop_early=False)
        events = ConsoleProgress(state, ProgressDisplay(state, stream=stream, tty=False), after="writing the table")
        callback = TrialEventsCallback(events)
        a = _trial("a", {"mu": 0.1}, _result(2, 0.5))
        callback.on_trial_start(0, [a], a)
        callback.on_trial_complete(0, [a], a)
        callback.on_experiment_end([a])
        callback.on_experiment_end([a])
        lines = stream.getvalue().splitlines()
        assert lines[1].startswith(f"[full] trial 1/{total} finished: ")
        assert lines[2].startswith("[full] done: " if said else "[full] interrupted: ")
        assert lines[3:] == (["[full] writing the table..."] if said else [])


# ---- the silences between lines (SilenceWatch) -------------------------------------------------------------------


def _watched(clock: Clock) -> tuple[SilenceWatch, io.StringIO]:
    stream = io.StringIO()
    return SilenceWatch(stream, every_s=10, clock=clock), stream


def _checked(watch: SilenceWatch, clock: Clock, *times: float) -> None:
    """The watch's thread's checks, at these times."""
    for t in times:
        clock.at(t)
        watch.check()


def test_a_phase_is_said_again_every_10_s_of_silence_until_other_output():
    clock = Clock()
    watch, stream = _watched(clock)
    print("[fedavg] done: 1/1 trials ended (1 finished) | 6s", file=watch)
    print("  saving the selected model to MLflow...", file=watch)  # print writes the text, then its newline
    _checked(watch, clock, 5, 9.9)
    assert stream.getvalue().count("\n") == 2  # not silent for 10 s yet
    _checked(watch, clock, 10, 12, 19.9, 20, 25)
    print("=== variant fedprox (method fedprox) ===", file=watch)
    _checked(watch, clock, 40, 60)  # the phase ended with that line
    assert stream.getvalue().splitlines()[1:] == [
        "  saving the selected model to MLflow...",
        "  saving the selected model to MLflow... (10s so far)",
        "  saving the selected model to MLflow... (20s so far)",
        "=== variant fedprox (method fedprox) ===",
    ]


@pytest.mark.parametrize(
    "text",
    [
        "[fedavg] done: 1/1 trials ended (1 finished) | 6s\n",  # no phase
        "saving...",  # a line not yet ended
        "saving...\n\r\x1b[K[full] 0/1 trials ended",  # a terminal's status line written after it
        "saving... (10s so far)\n",
    ],
)
def test_only_a_whole_last_line_that_ends_in_dots_begins_a_phase(text):
    clock = Clock()
    watch, stream = _watched(clock)
    watch.write(text)
    _checked(watch, clock, 10, 30)
    assert stream.getvalue() == text


def test_output_beside_stdout_ends_a_phase_and_the_silence():
    clock = Clock()
    watch, stream = _watched(clock)
    print(FIRST_START.format(label="full", n="1/2"), file=watch)
    clock.at(8)
    watch.heard()  # stderr: "SIGTERM: stopping the running trials ...": the trial is no longer said to be starting
    with watch.during("starting Ray (a private local cluster): waiting for it"):
        _checked(watch, clock, 17.9, 18)  # 10 s after the stderr line, not after the last stdout one
    _checked(watch, clock, 40)
    assert stream.getvalue().splitlines()[1:] == [
        "starting Ray (a private local cluster): waiting for it... (10s so far)"
    ]


def test_a_phase_settled_without_output_is_not_said_again():
    clock = Clock()
    watch, stream = _watched(clock)
    print(FIRST_START.format(label="full", n="1/2"), file=watch)
    clock.at(4)
    watch.settled()  # the trial's first round came: nothing printed until a trial ends
    _checked(watch, clock, 10, 30)
    assert stream.getvalue() == FIRST_START.format(label="full", n="1/2") + "\n"


def test_a_bracketed_phase_is_said_only_once_it_has_been_silent_for_10_s():
    clock = Clock()
    watch, stream = _watched(clock)
    print("Ray Tune results: ray_results", file=watch)
    with watch.during("starting Ray (a private local cluster): waiting for it"):
        _checked(watch, clock, 9)  # over quickly: nothing said
    _checked(watch, clock, 30)
    assert stream.getvalue() == "Ray Tune results: ray_results\n"
    print("Optuna studies: optuna.db", file=watch)  # at 30 s
    with watch.during("starting Ray (a private local cluster): waiting for it"):
        _checked(watch, clock, 39, 40, 45, 50)
    _checked(watch, clock, 70)
    assert stream.getvalue().splitlines()[2:] == [
        "starting Ray (a private local cluster): waiting for it... (10s so far)",
        "starting Ray (a private local cluster): waiting for it... (20s so far)",
    ]


def test_a_command_watches_its_stdout_on_a_thread_and_gives_it_back(monkeypatch):
    stream, errors = io.StringIO(), io.StringIO()
    monkeypatch.setattr(sys, "stdout", stream)
    monkeypatch.setattr(sys, "stderr", errors)
    with watch_silences(every_s=0.2) as watch:
        assert sys.stdout is watch and not watch.isatty()  # the stream's own answer
        with watch_silences() as inner:  # reproduce runs tune: one watch
            assert inner is watch
        print("starting Ray (a private local cluster)...")
        time.sleep(1.2)  # the thread checks twice a second
        print("SIGTERM: stopping", file=sys.stderr)  # ends the phase: nothing more is said of it
        before = stream.getvalue()
        time.sleep(0.6)
        assert stream.getvalue() == before
    assert sys.stdout is stream and sys.stderr is errors and errors.getvalue() == "SIGTERM: stopping\n"
    lines = stream.getvalue().splitlines()
    assert lines[0] == "starting Ray (a private local cluster)..." and len(lines) >= 2
    assert all(re.fullmatch(r"starting Ray \(a private local cluster\)\.\.\. \(\ds so far\)", x) for x in lines[1:])


# ---- a real study ----------------------------------------------------------------------------------------------------


def test_a_real_study_prints_a_line_per_trial_and_no_line_per_round(ablation_store):
    from mlflow.tracking import MlflowClient

    printed = ablation_store.tune_output  # tune.py without --verbose, two trials at a time, captured (conftest.py)
    assert not PER_ROUND.search(printed) and "started:" not in printed
    assert "\r" not in printed and "\x1b" not in printed
    ended = ENDED.findall(printed)
    assert sorted(n for n, _ in ended) == ["1", "2"]  # one line per trial
    client = MlflowClient(ablation_store.uri)
    runs = client.search_runs([client.get_experiment_by_name(ablation_store.space_name).experiment_id])
    status = sorted(
        r.data.tags["trial_status"]
        for r in runs
        if "mlflow.parentRunId" in r.data.tags and r.data.tags.get("stage") == "tune"
    )
    assert status == sorted("finished" if how == "finished" else "stopped_early" for _, how in ended)
    finished = status.count("finished")
    counts = f"{finished} finished" + (f", {2 - finished} stopped early" if finished < 2 else "")
    final = [line for line in printed.splitlines() if line.startswith("[full] done: ")]
    assert len(final) == 1 and final[0].startswith(f"[full] done: 2/2 trials ended ({counts}) | max val_acc=")


def test_the_ablation_prints_a_line_per_cell_and_its_final_counts(ablation_store):
    printed = ablation_store.output  # ablate.py without --verbose, captured (conftest.py)
    cells = re.findall(r"^\[ablation\] cell (\d)/8 finished: val_acc=\S+ test_acc=\S+ \[cell=(\S+)\]", printed, re.M)
    assert sorted(n for n, _ in cells) == [str(n) for n in range(1, 9)] and len({c for _, c in cells}) == 8
    assert " round 1/3 " not in printed and "started:" not in printed and "\r" not in printed
    final = [line for line in printed.splitlines() if line.startswith("[ablation] done: ")]
    assert len(final) == 1 and final[0].startswith("[ablation] done: 8/8 cells ended (8 finished) | ")
    assert "max val_acc" not in final[0]  # no best across cells of different settings and seeds
