"""Ray Tune callbacks (run in the driver): Tune's trial events handed to the MLflow layer (progress: progress.py)."""

from __future__ import annotations

import sys
from typing import Any

from ray import tune

from raytune_fl.tracking import TrialTracker


class MlflowTrialLogger(tune.Callback):
    """Tune's trial events -> tracking.TrialTracker (one child run per trial, metrics per round, step = round).

    Only an adapter: what is logged, and how a resumed trial continues in its run, is TrialTracker's.
    """

    def __init__(self, trials: TrialTracker) -> None:
        self.trials = trials

    def on_trial_start(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self.trials.open(trial.trial_id, trial.config)

    def on_trial_result(self, iteration: int, trials: list, trial: Any, result: dict, **info: Any) -> None:
        self.trials.log_round(trial.trial_id, trial.config, result)

    def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self.trials.complete(trial.trial_id)

    def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self.trials.fail(trial.trial_id)

    def on_trial_recover(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        """The trial's process died (a lost node, say) and Tune restarts it from its last checkpoint: same run."""
        self.trials.restarted(trial.trial_id)


def print_line(line: str) -> None:
    print(line, file=sys.stdout, flush=True)
