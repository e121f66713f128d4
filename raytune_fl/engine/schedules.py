"""How the federation's rounds are formed from client jobs: the protocol between the round driver and a schedule.

A schedule decides which clients train on which model and when their updates make a round: the synchronous
schedule (engine/synchronous.py) samples clients per round and waits for them, FedBuff's (engine/fedbuff.py)
keeps clients in flight and makes a round of every `buffer_size` arrivals. Either way the federation
(`RoundHost`) aggregates and reports each round; the schedule owns its simulated clock and whatever else the
next round depends on, and checkpoints it through `state_dict`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from raytune_fl.config import ExperimentConfig
from raytune_fl.engine.data import FederatedData
from raytune_fl.engine.pool import ClientPool
from raytune_fl.engine.system import ClientRecord, SystemModel
from raytune_fl.methods import Method
from raytune_fl.types import ClientUpdate, Weights


class RoundHost(Protocol):
    """What a schedule needs from the federation it drives (engine/federation.py's Federation)."""

    experiment: ExperimentConfig
    data: FederatedData
    method: Method  # the server side: the aggregator's payload goes out with every job
    system: SystemModel
    round: int  # rounds completed
    weights: Weights  # the global model
    client_states: dict[int, Any]  # per-client method state, sent with each client's job

    def sums_round(self, round_index: int) -> bool:
        """Whether the round's workers send one sum of their clients' deltas (resources.partial_sums)."""
        ...

    def apply_round(self, round_index: int, updates: Sequence[ClientUpdate]) -> list[ClientUpdate]:
        """Keep client states and aggregate (round_index becomes `round`); returns the updates in client order."""
        ...

    def report_round(
        self,
        round_index: int,
        start_weights: Weights,
        updates: Sequence[ClientUpdate],
        log: Sequence[ClientRecord],
        pool: ClientPool,
        started: float,
    ) -> float:
        """Evaluate and report the round aggregated from `start_weights`; returns when its timed part ended."""
        ...


class Schedule(Protocol):
    sim_time: float  # the simulated clock (system heterogeneity; FedBuff's arrivals)

    def run(self, host: RoundHost, pool: ClientPool) -> None:
        """Rounds `host.round + 1 .. experiment.rounds` on `pool`, each one aggregated and reported by `host`."""
        ...

    def round_metrics(self, updates: Sequence[ClientUpdate]) -> dict[str, Any]:
        """The schedule's entries in a round's metrics (its clock, FedBuff's staleness), for the updates applied."""
        ...

    def state_dict(self) -> dict[str, Any]:
        """The schedule's entries in the federation's checkpoint, as of the last report."""
        ...

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore from a federation checkpoint (the whole mapping: the schedule reads its own entries)."""
        ...
