"""What a Tune run (a variant study, the ablation's cells) tells whoever watches it: no Ray, no console.

The run describes itself in a `Watch`; the caller's factory turns that into a `TrialEvents` (the CLI's is the
console progress, cli/progress.py), and tune/callbacks.py's `TrialEventsCallback` feeds it Tune's trial events.
So the study never imports the console, and the console never imports Tune.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from raytune_fl.metrics import VAL_ACC


@dataclass(frozen=True)
class Watch:
    """A Tune run, as a progress display needs it."""

    label: str  # the variant's name, or "ablation"
    total: int  # trials (cells) it runs
    rounds: int  # rounds a trial runs unless stopped
    metric: str = VAL_ACC
    mode: str = "max"
    noun: str = "trial"
    may_stop_early: bool = False  # ASHA may stop trials: the time left is an upper bound
    show_best: bool = True
    rounds_of: Callable[[dict[str, Any]], int] | None = None  # a trial's rounds by its config (default: rounds)
    total_rounds: int | None = None  # trial-rounds of the whole run at most (default: total x rounds)


class TrialEvents(Protocol):
    """Tune's trial events, by trial id, in the driver."""

    def restored(self, trial_id: str, config: dict[str, Any], last_result: Any, errored: bool) -> None: ...
    def started(self, trial_id: str, config: dict[str, Any], round: int) -> None: ...
    def reported(self, trial_id: str, result: dict[str, Any]) -> None: ...
    def completed(self, trial_id: str, last_result: Any) -> None: ...
    def errored(self, trial_id: str, error_file: str | None) -> None: ...
    def recovered(self, trial_id: str) -> None: ...
    def tick(self) -> None: ...  # Tune's loop stepped: the clock moved
    def finish(self) -> None: ...


Watcher = Callable[[Watch], TrialEvents]  # how a caller watches a run (None: nobody does)
