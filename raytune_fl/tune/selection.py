"""How a study's best trial is chosen, in one place: trials that ran every round first, then the best final value.

Plain Python (no Ray, no Optuna): the study's summary of its Tune results and the dashboard's reading of the
logged trial runs both pick with `best_of`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import TypeVar

T = TypeVar("T")


def best_of(candidates: Iterable[tuple[bool, float, T]], maximize: bool) -> T | None:
    """The chosen item of (ran every round, final value, item) candidates; non-finite values never count.

    An ASHA-stopped trial's value is from an earlier round, so a trial that finished beats it whatever its value.
    """
    sign = 1.0 if maximize else -1.0
    scored = [(full, sign * value, item) for full, value, item in candidates if math.isfinite(value)]
    return max(scored, key=lambda s: s[:2])[2] if scored else None
