"""A configuration error found only inside a trial (a precision its node's device lacks, a plugin's model refusing
its settings) ends the run at its first occurrence, never retried: the command exits 2 with the error's own text.

Tune retries whatever a trial raises (FailureConfig's max_failures), printing its traceback each time, and cannot be
told that an error is not worth retrying; the same settings would fail the same way. So the trial reports such an
error as its last result (`refused_result`), `StopOnRefusal` ends the whole run on it, and the driver raises it
again as a `TrialConfigError` once fit() has returned (`raise_refusal`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any, cast

from ray import tune

from raytune_fl.config import ConfigError
from raytune_fl.config.space import OBJECTIVES
from raytune_fl.data.partition import PartitionError
from raytune_fl.devices import DeviceError
from raytune_fl.plugins import PluginError
from raytune_fl.registry import UnknownNameError

# the user's settings at fault: a retry fails the same way (PrecisionError is a DeviceError)
CONFIG_FAULTS: tuple[type[Exception], ...] = (ConfigError, DeviceError, PartitionError, PluginError, UnknownNameError)
REFUSED_KEY = "config_refused"  # a refused trial's last result: the error's text


class TrialConfigError(ConfigError):
    """A trial's configuration error, raised again in the driver with the trial's own text."""


def config_fault(error: BaseException) -> BaseException | None:
    """The configuration error `error` is, or wraps (an actor's error reaches its trial inside Ray's RayTaskError);
    None for any other error, which Tune retries as before."""
    cause = getattr(error, "cause", None)  # RayTaskError.cause: the actor's own exception
    for candidate in (cause, error):
        if isinstance(candidate, CONFIG_FAULTS):
            return candidate
    return None


def refused_result(error: BaseException) -> dict[str, Any]:
    """What a trial reports for its configuration error: the error's text, and every objective a study may select
    on at its worst value (Tune refuses a result without the run's metric; the searcher counts the trial failed)."""
    worst = {name: -math.inf if mode == "max" else math.inf for name, mode in OBJECTIVES.items()}
    return {**worst, REFUSED_KEY: str(error).strip() or type(error).__name__}


def refusal(result: Mapping[str, Any] | None) -> str | None:
    """The configuration error a trial's result reports, or None for a round's result."""
    text = (result or {}).get(REFUSED_KEY)
    return str(text) if text is not None else None


class StopOnRefusal(tune.Stopper):
    """Stops the refused trial, then the whole run: the other trials share the setting that failed."""

    def __init__(self) -> None:
        self.refused = False

    def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
        if refusal(result) is not None:
            self.refused = True
            return True
        return False

    def stop_all(self) -> bool:
        return self.refused


def raise_refusal(results: tune.ResultGrid, where: str) -> None:
    """The first refused trial's error as a TrialConfigError (its text first, then where it was found); nothing
    when no trial was refused."""
    for result in cast("Iterable[tune.Result]", results):  # a ResultGrid iterates by index
        text = refusal(result.metrics)
        if text is not None:
            where_found = f"found by a trial of {where} on its Ray node; not retried: the run stopped"
            raise TrialConfigError(f"{text}\n  ({where_found})")
