"""A round's report: what the engine tells its caller after each round. Plain Python (no torch): the driver's
MLflow logging reads it and never trains.

`RoundReport` is typed where its parts differ: the scalar metrics (logged per round), the per-client log, the
classifier spectrum and the per-client accuracies (filed as tables), why a run diverged, and the trial process's
system samples (`system/...`, opt-in: tracking/system_metrics.py). It reads as the flat mapping Tune carries
(`to_result`, and `report["val_acc"]`), and is rebuilt from one (`from_result`) where Tune hands a result back to the
driver.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

# the keys beside the scalars, declared with every metric name; their users import them from here too
from raytune_fl.metrics import (
    CARRIED_KEY,
    CLIENT_ACC_KEY,
    CLIENT_LOG_KEY,
    DIVERGED,
    DIVERGENCE_KEY,
    ROUND,
    SPECTRUM_KEY,
    SYSTEM_PREFIX,
    VAL_LOSS,
)

LIST_KEYS = (SPECTRUM_KEY, CLIENT_ACC_KEY, CLIENT_LOG_KEY)


@dataclass(frozen=True)
class RoundReport(Mapping[str, Any]):
    round: int
    scalars: dict[str, Any]  # every metric but the lists, in the order reported (timings end in _s)
    client_log: list[dict[str, Any]] | None = None  # one row per sampled client: status, steps, simulated time
    spectrum: list[float] | None = None  # the classifier's singular values (rounds with diagnostics)
    client_accuracy: list[float] | None = None  # each client's validation accuracy (rounds with diagnostics)
    divergence: str | None = None
    # the trial process's system samples under MLflow's names (system/cpu_utilization_percentage, ...): logged on
    # the trial's run apart from `scalars`, never compared or tabled with the learning metrics
    system: dict[str, float] | None = None
    _flat: dict[str, Any] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        flat: dict[str, Any] = {ROUND: self.round, **self.scalars}
        for key, values in zip(LIST_KEYS, (self.spectrum, self.client_accuracy, self.client_log), strict=True):
            if values is not None:
                flat[key] = values
        if self.divergence is not None:
            flat[DIVERGENCE_KEY] = self.divergence
        flat.update(self.system or {})
        object.__setattr__(self, "_flat", flat)

    @classmethod
    def from_result(cls, result: Mapping[str, Any]) -> RoundReport:
        """A report from its flat form (what the engine assembles, what Tune carries back)."""
        system = {k: float(v) for k, v in result.items() if k.startswith(SYSTEM_PREFIX)}
        scalars = {k: v for k, v in result.items() if k not in (*LIST_KEYS, DIVERGENCE_KEY, ROUND) and k not in system}
        return cls(
            int(result[ROUND]),
            scalars,
            client_log=result.get(CLIENT_LOG_KEY),
            spectrum=result.get(SPECTRUM_KEY),
            client_accuracy=result.get(CLIENT_ACC_KEY),
            divergence=result.get(DIVERGENCE_KEY),
            system=system or None,
        )

    @property
    def evaluated(self) -> bool:
        """Whether the round ended with the server's evaluation (eval_every), or is a divergence's last report."""
        return VAL_LOSS in self.scalars

    @property
    def diverged(self) -> bool:
        return bool(self.scalars.get(DIVERGED))

    def metrics(self) -> dict[str, float]:
        """The numeric scalars, as floats: what is logged per round (flags such as booleans left out)."""
        return {k: float(v) for k, v in self.scalars.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}

    def lists(self) -> dict[str, list]:
        """The per-round lists this round carries, by key."""
        return {k: self._flat[k] for k in LIST_KEYS if k in self._flat}

    def to_result(self) -> dict[str, Any]:
        """The flat mapping Tune reports (a copy)."""
        return dict(self._flat)

    def __getitem__(self, key: str) -> Any:
        return self._flat[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._flat)

    def __len__(self) -> int:
        return len(self._flat)


def carry_evaluation(result: dict[str, Any], last_evaluated: Mapping[str, Any] | None) -> dict[str, Any]:
    """A round between evaluations as Tune gets it: the scalars of the last evaluated round that this one lacks
    (the tuned metric among them: Tune's scheduler and searcher require it in every result), named under
    CARRIED_KEY so that the driver drops them again (`evaluated_only`)."""
    carried = {k: v for k, v in (last_evaluated or {}).items() if k not in result and k not in (*LIST_KEYS, ROUND)}
    return {**result, **carried, CARRIED_KEY: sorted(carried)} if carried else result


def evaluated_only(result: Mapping[str, Any]) -> dict[str, Any]:
    """A Tune result without what `carry_evaluation` carried into it: what the round itself measured."""
    dropped = {CARRIED_KEY, *result.get(CARRIED_KEY, ())}
    return {k: v for k, v in result.items() if k not in dropped}


class TuneResults:
    """Each round's report as the flat result Tune gets (tune/trainable.py): a round between evaluations carries
    the last evaluated round's scalars (`carry_evaluation`)."""

    def __init__(self) -> None:
        self.last_evaluated: dict[str, Any] | None = None

    def __call__(self, report: RoundReport) -> dict[str, Any]:
        if report.evaluated:
            self.last_evaluated = dict(report.scalars)
            return report.to_result()
        return carry_evaluation(report.to_result(), self.last_evaluated)
