"""A trial's hyperparameter schedule: the searched values in force from each round on, as segments.

Population-based training (tune/search.py) changes a trial's hyperparameters between rounds and copies a better
trial's state into a worse one: what the trial ran is then not one configuration but a sequence of them. The
schedule travels in the trial's checkpoint (a clone inherits its donor's history and appends its own new values),
with the study's selection (its MLflow parent run) and into `ablate`, which replays it segment by segment.

Plain Python: a value object, written and read as JSON.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Segment:
    """The searched hyperparameters in force from `first_round` until the next segment's first round."""

    first_round: int
    params: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ParamSchedule:
    """The segments in order of their first round (the first one starts at round 1)."""

    segments: tuple[Segment, ...] = ()

    def then(self, first_round: int, params: Mapping[str, Any]) -> ParamSchedule:
        """The schedule with `params` in force from `first_round` on: the segments from that round on are dropped
        (a trial restarted from an earlier checkpoint runs those rounds again), and a segment whose values equal the
        one before it is not added (a trial paused and resumed unchanged keeps one segment)."""
        kept = tuple(s for s in self.segments if s.first_round < first_round)
        plain = {name: _plain(value) for name, value in params.items()}
        if kept and kept[-1].params == plain:
            return ParamSchedule(kept)
        return ParamSchedule((*kept, Segment(first_round, plain)))

    def in_force(self, round_index: int) -> dict[str, Any]:
        """The values round `round_index` ran with."""
        current = [s for s in self.segments if s.first_round <= round_index]
        if not current:
            raise ValueError(f"round {round_index} precedes the schedule's first segment")
        return current[-1].params

    def spans(self, rounds: int) -> list[tuple[Segment, int]]:
        """Each segment with its last round (the next segment's first round - 1; the last one: `rounds`)."""
        ends = [s.first_round - 1 for s in self.segments[1:]] + [rounds]
        return list(zip(self.segments, ends, strict=True))

    @property
    def constant(self) -> bool:
        """Whether one configuration ran every round."""
        return len(self.segments) <= 1

    def to_json(self) -> str:
        return json.dumps([[s.first_round, s.params] for s in self.segments], sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> ParamSchedule:
        return cls(tuple(Segment(int(first), dict(params)) for first, params in json.loads(text)))

    @classmethod
    def of(cls, value: ParamSchedule | Mapping[str, Any] | None) -> ParamSchedule | None:
        """A schedule from itself or from `dataclasses.asdict` of one (a study manifest's JSON record)."""
        if value is None or isinstance(value, ParamSchedule):
            return value
        return cls(tuple(Segment(int(s["first_round"]), dict(s["params"])) for s in value["segments"]))

    def describe(self) -> str:
        """One line: `rounds 1-: lr=0.1; rounds 5-: lr=0.05`."""
        return "; ".join(
            f"rounds {s.first_round}-: "
            + ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in s.params.items())
            for s in self.segments
        )


def _plain(value: Any) -> Any:
    """A numpy scalar (what Ray draws) as its Python value: the schedule is JSON."""
    item = getattr(value, "item", None)
    return item() if callable(item) and not isinstance(value, (list, dict, str)) else value
