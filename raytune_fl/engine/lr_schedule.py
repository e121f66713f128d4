"""The clients' learning rate in round r: constant, or decayed once per round on the server's clock.

Round r (1-based) trains at the rate a torch scheduler gives after r - 1 steps, stepped once per round as the
official FedUV code steps its CosineAnnealingLR: round 1 at the base rate. Closed forms, so that any worker can
compute any round's rate without the scheduler's history:

    constant     lr
    cosine       eta_min + (lr - eta_min) * (1 + cos(pi * (r - 1) / t_max)) / 2   (torch's closed form)
    step         lr * gamma ** ((r - 1) // step_size)
    exponential  lr * gamma ** (r - 1)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import get_args

from raytune_fl.config import ScheduleConfig, ScheduleKind

KINDS: tuple[str, ...] = get_args(ScheduleKind)


@dataclass(frozen=True)
class LrSchedule:
    kind: str = "constant"
    t_max: int = 1  # cosine: rounds from the base rate to eta_min
    eta_min: float = 0.0  # cosine: the floor
    step_size: int = 1  # step: rounds between decays
    gamma: float = 1.0  # step: factor per decay; exponential: factor per round

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown learning-rate schedule {self.kind!r}; known: {', '.join(KINDS)}")

    def lr(self, base_lr: float, round_index: int) -> float:
        """The rate of round `round_index` (1-based) for a run whose base rate is `base_lr`."""
        steps = max(round_index - 1, 0)
        if self.kind == "cosine":
            return self.eta_min + (base_lr - self.eta_min) * (1 + math.cos(math.pi * steps / self.t_max)) / 2
        if self.kind == "step":
            return base_lr * self.gamma ** (steps // self.step_size)
        if self.kind == "exponential":
            return base_lr * self.gamma**steps
        return base_lr

    @classmethod
    def of(cls, config: ScheduleConfig, rounds: int) -> LrSchedule:
        """The schedule a run of `rounds` rounds trains on. Unset factors: step 0.1 (torch's StepLR default);
        exponential has none (the config refuses it without gamma); constant and cosine do not use one."""
        gamma = config.gamma if config.gamma is not None else (0.1 if config.kind == "step" else 1.0)
        return cls(config.kind, config.t_max or rounds, config.eta_min, config.step_size, gamma)
