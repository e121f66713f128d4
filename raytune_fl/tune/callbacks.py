"""Ray Tune callbacks (run in the driver): Tune's trial events handed to the MLflow layer and to a watcher
(tune/events.py; the CLI's console progress)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from ray import tune

from raytune_fl.engine.report import RoundReport, evaluated_only
from raytune_fl.metrics import ROUND
from raytune_fl.tracking import TrialTracker
from raytune_fl.tracking.background import SerialWriter
from raytune_fl.tune import interrupt
from raytune_fl.tune.events import TrialEvents
from raytune_fl.tune.refusal import refusal
from raytune_fl.tune.selection import beats, candidacy

# Ray Tune's own bookkeeping keys in a trial's result: not the round's report
TUNE_RESULT_KEYS = frozenset(
    {
        "training_iteration",
        "time_this_iter_s",
        "time_total_s",
        "timestamp",
        "pid",
        "hostname",
        "node_ip",
        "done",
        "time_since_restore",
        "iterations_since_restore",
        "checkpoint_dir_name",
        "should_checkpoint",
        "config",
        "trial_id",
        "date",
        "experiment_tag",
    }
)


def round_report(result: dict[str, Any]) -> RoundReport:
    """The round's report a trial sent (tune/trainable.py), from the result Tune hands the driver."""
    if ROUND not in result:  # not one of ours (a runner's own report): Tune's iteration count is its round
        result = {**result, ROUND: result.get("training_iteration", 0)}
    return RoundReport.from_result({k: v for k, v in evaluated_only(result).items() if k not in TUNE_RESULT_KEYS})


class MlflowTrialLogger(tune.Callback):
    """Tune's trial events -> tracking.TrialTracker (one child run per trial, metrics per round, step = round).

    Only an adapter: what is logged, and how a resumed trial continues in its run, is TrialTracker's. The writes
    run on a background thread, in order (tracking/background.py): Tune holds each trial until the driver has
    handled its round, so a write done here would pause the trial. All are written when the experiment ends, and
    before the parent run closes what is still open.
    """

    def __init__(self, trials: TrialTracker) -> None:
        self.trials = trials
        self._writer: SerialWriter | None = None

    def __getstate__(self) -> dict[str, Any]:  # Tune pickles its callbacks with the experiment state
        return {**self.__dict__, "_writer": None}

    @property
    def writer(self) -> SerialWriter:
        if self._writer is None:
            self._writer = SerialWriter()
            self.trials.wait_for(self._writer.flush)
        return self._writer

    def on_trial_start(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self.writer.submit(self.trials.open, trial.trial_id, dict(trial.config))

    def on_trial_result(self, iteration: int, trials: list, trial: Any, result: dict, **info: Any) -> None:
        if refusal(result) is None:  # a configuration error's report is no round (tune/refusal.py)
            self.writer.submit(self.trials.log_round, trial.trial_id, dict(trial.config), round_report(result))

    def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        refused = refusal(trial.last_result) is not None
        self.writer.submit(self.trials.fail if refused else self.trials.complete, trial.trial_id)

    def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self.writer.submit(self.trials.fail, trial.trial_id)

    def on_trial_recover(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        """The trial's process died (a lost node, say) and Tune restarts it from its last checkpoint: same run."""
        self.writer.submit(self.trials.restarted, trial.trial_id)

    def on_experiment_end(self, trials: list, **info: Any) -> None:
        self.writer.flush()  # the study's results are read back from MLflow next


class BestSoFar(tune.Callback):
    """As each trial ends, calls `action(trial_id, checkpoint, config)` for it if it is the best so far by the rule
    the study selects with (tune/selection.py): the model helper logs its model ahead of the study's end."""

    def __init__(
        self, action: Callable[[str, tune.Checkpoint, dict[str, Any]], None], metric: str, mode: str, rounds: int
    ):
        self.action: Callable[[str, tune.Checkpoint, dict[str, Any]], None] | None = action
        self.metric, self.maximize, self.rounds = metric, mode == "max", rounds
        self.best: tuple[bool, float] | None = None

    def __getstate__(self) -> dict[str, Any]:  # pickled with the experiment state; the action is this process's
        return {**self.__dict__, "action": None}

    def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        chosen = candidacy(trial.last_result or {}, self.metric, self.rounds)
        if (
            self.action is None
            or chosen is None
            or trial.checkpoint is None
            or not beats(chosen, self.best, self.maximize)
        ):
            return
        self.best = chosen
        self.action(str(trial.trial_id), trial.checkpoint, dict(trial.config))


class ForwardInterrupt(tune.Callback):
    """A Ctrl-C or SIGTERM that came before Tune listened reaches Tune on its loop's next step (tune/interrupt.py)."""

    def on_step_begin(self, iteration: int, trials: list, **info: Any) -> None:
        interrupt.forward_if_missed()


def print_line(line: str) -> None:
    print(line, file=sys.stdout, flush=True)


class TrialEventsCallback(tune.Callback):
    """Tune's trial events -> a watcher's `TrialEvents`, ticked on each step of Tune's loop."""

    def __init__(self, events: TrialEvents) -> None:
        self.events = events
        self._adopted = False

    def on_step_begin(self, iteration: int, trials: list, **info: Any) -> None:
        if not self._adopted:  # a resumed run: what had ended before counts, and keeps its number
            self._adopted = True
            for trial in trials:
                if trial.status in ("TERMINATED", "ERROR"):
                    failed = trial.status == "ERROR" or refusal(trial.last_result) is not None
                    self.events.restored(trial.trial_id, trial.config, trial.last_result, failed)
        self.events.tick()

    def on_step_end(self, iteration: int, trials: list, **info: Any) -> None:
        self.events.tick()

    def on_trial_start(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self.events.started(trial.trial_id, trial.config, int((trial.last_result or {}).get(ROUND) or 0))

    def on_trial_result(self, iteration: int, trials: list, trial: Any, result: dict, **info: Any) -> None:
        if refusal(result) is None:
            self.events.reported(trial.trial_id, result)

    def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        if refusal(trial.last_result) is not None:  # the driver says the error itself, once (tune/refusal.py)
            self.events.errored(trial.trial_id, None)
        else:
            self.events.completed(trial.trial_id, trial.last_result)

    def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self.events.errored(trial.trial_id, trial.error_file)

    def on_trial_recover(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self.events.recovered(trial.trial_id)

    def on_experiment_end(self, trials: list, **info: Any) -> None:
        self.events.finish()
