"""Simulated system heterogeneity: who drops out, how much local work each client does, who is late.

Pure numpy and seeded by (seed, stream): a round's plan is the same on every run and after a resume.
Simulated time: one unit = one local step of a client at the median speed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from raytune_fl.config import SystemConfig


@dataclass(frozen=True)
class ClientPlan:
    client_id: int
    steps: int  # local optimiser steps this round
    max_steps: int | None  # the loop's step budget; None = local_epochs over the data (the same `steps`)
    sim_time: float  # simulated duration of the client's local round
    dropped: bool  # never reports
    late: bool  # reports after the round deadline

    @property
    def status(self) -> str:
        return "dropped" if self.dropped else "late" if self.late else "trained"

    @property
    def trains(self) -> bool:
        return not (self.dropped or self.late)


@dataclass(frozen=True)
class ClientRecord:
    """One sampled (or, asynchronously, dispatched) client in one round: the per-client log's row."""

    round: int
    client: int
    status: str  # trained | dropped | late | lost
    steps: int
    sim_time: float
    staleness: int = 0
    # where it trained (filled for clients trained by Ray actors; see types.WorkerPlace)
    node: str = ""
    gpus: str = ""
    device: str = ""
    placement_group: str = ""
    actor: str = ""


def placed(outcome: Any) -> dict[str, str]:
    """A client record's node / gpus / device fields: where its update was computed, when a Ray actor says."""
    place = getattr(outcome, "place", None)
    return dataclasses.asdict(place) if place is not None else {}


def epoch_steps(num_samples: int, batch_size: int, epochs: int, drop_last: bool = False) -> int:
    """Optimiser steps of `epochs` passes; the loop skips a last batch of one sample, or any incomplete last
    batch with `drop_last`."""
    full, rest = divmod(num_samples, batch_size)
    return epochs * (full + (1 if rest >= 2 and not drop_last else 0))


def client_speeds(num_clients: int, sigma: float, seed: int) -> np.ndarray:
    """Fixed per client for the whole run: LogNormal(0, sigma), so the median client has speed 1."""
    if sigma == 0:
        return np.ones(num_clients)
    return np.exp(sigma * np.random.default_rng([seed, 17]).standard_normal(num_clients))


class SystemModel:
    def __init__(
        self,
        config: SystemConfig,
        sizes: Sequence[int],
        batch_size: int,
        epochs: int,
        seed: int,
        drop_last: bool = False,
    ) -> None:
        self.config, self.seed = config, seed
        self.sizes, self.batch_size, self.epochs, self.drop_last = list(sizes), batch_size, epochs, drop_last
        self.speeds = client_speeds(len(self.sizes), config.speed_sigma, seed)

    def plan(self, clients: Sequence[int], stream: int) -> list[ClientPlan]:
        """The plan for `clients` in one round (or one asynchronous dispatch), keyed by `stream`."""
        cfg = self.config
        rng = np.random.default_rng([self.seed, stream, 11])  # 11: apart from sampling and training streams
        dropped = rng.random(len(clients)) < cfg.dropout
        if cfg.local_steps is not None:
            low, high = cfg.local_steps
            budgets = rng.integers(low, high + 1, size=len(clients))
        plans = []
        for i, cid in enumerate(clients):
            if cfg.local_steps is not None:
                steps, budget = int(budgets[i]), int(budgets[i])
            else:
                steps, budget = epoch_steps(self.sizes[cid], self.batch_size, self.epochs, self.drop_last), None
            sim_time = steps / float(self.speeds[cid])
            late = cfg.deadline is not None and sim_time > cfg.deadline and not dropped[i]
            plans.append(ClientPlan(int(cid), steps, budget, sim_time, bool(dropped[i]), bool(late)))
        return plans

    def round_duration(self, plans: Sequence[ClientPlan]) -> float:
        """A synchronous round lasts until its last on-time update, or the deadline when someone did not make it."""
        arrived = [p.sim_time for p in plans if p.trains]
        if self.config.deadline is not None and len(arrived) < len(plans):
            return self.config.deadline
        return max(arrived, default=0.0)
