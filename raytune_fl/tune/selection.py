"""How a study's best trial is chosen, in one place: trials that ran every round first, then the best final value.

A multi-objective study's trade-off is its Pareto front (`pareto_front`); the configuration it hands the ablation
is the front's best on its first objective.

Plain Python (no Ray, no Optuna): the study's summary of its Tune results and the dashboard's reading of the
logged trial runs both pick with `best_of`; the study's summary and its best-so-far model (tune/callbacks.py) read a
trial's last metrics with `candidacy`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any, TypeVar

from raytune_fl.metrics import DIVERGED, ROUND

T = TypeVar("T")


def candidacy(metrics: dict[str, Any], metric: str, rounds: int) -> tuple[bool, float] | None:
    """(ran every round, final value) of an ended trial's last metrics; None when it cannot be chosen: it diverged
    (its score is the worst by construction) or its value is missing or not finite."""
    if metrics.get(DIVERGED):
        return None
    value = metrics.get(metric)
    if value is None or not math.isfinite(value):
        return None
    return int(metrics.get(ROUND, 0)) >= rounds, float(value)


def beats(challenger: tuple[bool, float], holder: tuple[bool, float] | None, maximize: bool) -> bool:
    """Whether `best_of` chooses a candidacy over another (a tie keeps the holder: `best_of` keeps the first)."""
    if holder is None:
        return True
    sign = 1.0 if maximize else -1.0
    return (challenger[0], sign * challenger[1]) > (holder[0], sign * holder[1])


def dominates(a: Sequence[float], b: Sequence[float], maximize: Sequence[bool]) -> bool:
    """Whether `a` is at least as good as `b` on every objective and better on one."""
    signed = [(x if up else -x, y if up else -y) for x, y, up in zip(a, b, maximize, strict=True)]
    return all(x >= y for x, y in signed) and any(x > y for x, y in signed)


def pareto_front(points: Sequence[Sequence[float]], maximize: Sequence[bool]) -> list[int]:
    """The indices of the points no other point dominates, in their order; equal points are all kept, and a point
    with a non-finite value is never on the front."""
    finite = [i for i, p in enumerate(points) if all(math.isfinite(v) for v in p)]
    return [i for i in finite if not any(dominates(points[j], points[i], maximize) for j in finite if j != i)]


def best_of(candidates: Iterable[tuple[bool, float, T]], maximize: bool) -> T | None:
    """The chosen item of (ran every round, final value, item) candidates; non-finite values never count.

    An ASHA-stopped trial's value is from an earlier round, so a trial that finished beats it whatever its value.
    """
    sign = 1.0 if maximize else -1.0
    scored = [(full, sign * value, item) for full, value, item in candidates if math.isfinite(value)]
    return max(scored, key=lambda s: s[:2])[2] if scored else None
