"""Ray Tune callbacks (run in the driver): progress lines, and Tune's trial events handed to the MLflow layer."""

from __future__ import annotations

import sys
from collections.abc import Callable
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


class ProgressPrinter(tune.Callback):
    """One line per trial round: Tune's own table is too verbose for a terminal on long studies."""

    def __init__(self, variant: str, num_trials: int, rounds: int, metric: str, out: Callable[[str], None]) -> None:
        self.variant, self.num_trials, self.rounds, self.metric, self.out = (
            variant,
            num_trials,
            rounds,
            metric,
            out,
        )
        self.index: dict[str, int] = {}

    def on_trial_start(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        n = self.index.setdefault(trial.trial_id, len(self.index) + 1)
        params = ", ".join(f"{k}={_short(v)}" for k, v in trial.config.items()) or "defaults"
        self.out(f"[{self.variant}] trial {n}/{self.num_trials} started: {params}")

    def on_trial_result(self, iteration: int, trials: list, trial: Any, result: dict, **info: Any) -> None:
        n = self.index.get(trial.trial_id, 0)
        self.out(
            f"[{self.variant}] trial {n}/{self.num_trials} round {result.get('round')}/{self.rounds} "
            f"{self.metric}={_get(result, self.metric):.4f} test_acc={_get(result, 'test_acc'):.4f} "
            f"loss={_get(result, 'train_loss'):.4f} ({_get(result, 'round_time_s'):.1f}s)"
        )

    def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        last = (trial.last_result or {}).get("round", 0)
        how = "finished" if last >= self.rounds else f"stopped early by ASHA at round {last}"
        self.out(f"[{self.variant}] trial {self.index.get(trial.trial_id, 0)}/{self.num_trials} {how}")

    def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self.out(
            f"[{self.variant}] trial {self.index.get(trial.trial_id, 0)}/{self.num_trials} FAILED: {trial.error_file}"
        )


def _get(result: dict, key: str) -> float:
    value = result.get(key)
    return float(value) if isinstance(value, (int, float)) else float("nan")


def _short(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def print_line(line: str) -> None:
    print(line, file=sys.stdout, flush=True)
