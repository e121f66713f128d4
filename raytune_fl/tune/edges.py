"""Selected values at the edge of their search range: within 5 % of a bound, a better value may lie beyond it.

The tune summary prints a line per such value and the study's parent run carries edge.<name> tags, each asking for
the range to be widened."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from raytune_fl.config import Distribution

EDGE_FRACTION = 0.05  # of the range's width on the distribution's own scale (log space for loguniform)
LOWER, UPPER = "lower", "upper"


@dataclass(frozen=True)
class Edge:
    """A searched hyperparameter whose selected value lies within EDGE_FRACTION of one bound of its range."""

    name: str
    side: str  # LOWER or UPPER
    value: float
    bound: float  # the bound it is near
    scale: str  # "log" or "linear": where the distance was measured

    def describe(self) -> str:
        """One line: the value, the bound it is near, and what to do."""
        return (
            f"{self.name}={self.value:.4g} is within {EDGE_FRACTION * 100:g} % of its {self.side} bound "
            f"{self.bound:.4g} ({self.scale} scale); widen {self.name}'s range"
        )


def edge_flags(search_space: Mapping[str, Distribution], best_params: Mapping[str, Any]) -> list[Edge]:
    """The searched numeric ranges whose selected value (in `best_params`) is within EDGE_FRACTION of a bound, in the
    search space's order. Choices have no edge; a name without a numeric selected value is skipped."""
    edges = []
    for name, spec in search_space.items():
        value = best_params.get(name)
        if spec.kind == "choice" or isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        low, high = getattr(spec, spec.kind)
        log = spec.kind == "loguniform"
        if log and value <= 0:
            continue  # not a value this range can draw
        at = _scaled(value, log)
        lo, hi = _scaled(low, log), _scaled(high, log)
        near = EDGE_FRACTION * (hi - lo)
        scale = "log" if log else "linear"
        if at - lo <= near:
            edges.append(Edge(name, LOWER, float(value), float(low), scale))
        elif hi - at <= near:
            edges.append(Edge(name, UPPER, float(value), float(high), scale))
    return edges


def _scaled(x: float, log: bool) -> float:
    return math.log(x) if log else float(x)
