"""Synchronous rounds: each round a seeded sample of clients trains on the current model; the round ends
when its last on-time update arrives (or at the deadline) and is aggregated as one.

Rounds overlap: round r + 1 is submitted right after round r is aggregated, before r is evaluated and reported.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from raytune_fl.config import clients_per_round
from raytune_fl.engine.pool import ClientLost, ClientPool, TrainJob
from raytune_fl.engine.schedules import RoundHost
from raytune_fl.engine.system import ClientPlan, ClientRecord, placed
from raytune_fl.metrics import SIM_TIME
from raytune_fl.types import ClientUpdate


def sample_clients(
    num_clients: int, participation: float, seed: int, round_index: int, poisson: bool = False
) -> list[int]:
    """The round's clients: `participation` x clients of them drawn without replacement, or (`poisson`, what
    client-level DP's accountant assumes) each client independently with probability `participation`, so a round may
    draw any number of them, none included."""
    rng = np.random.default_rng([seed, round_index, 7])  # 7: a stream apart from the training seeds
    if poisson:
        return [int(c) for c in np.flatnonzero(rng.random(num_clients) < participation)]
    count = clients_per_round(participation, num_clients)
    if count >= num_clients:
        return list(range(num_clients))
    return sorted(int(c) for c in rng.choice(num_clients, size=count, replace=False))


def outcome_status(outcome: Any, plan: ClientPlan) -> str:
    if not plan.trains:
        return plan.status
    return "lost" if isinstance(outcome, ClientLost) else "trained"


@dataclass(frozen=True)
class _SubmittedRound:
    index: int
    plans: list[ClientPlan]
    tickets: list[int]


class SynchronousRounds:
    """The synchronous schedule. Its only state is the simulated clock: sampling and plans are keyed by
    (seed, round), so a restored run draws the same clients."""

    def __init__(self, report_clock: bool) -> None:
        self.report_clock = report_clock  # system heterogeneity is on: rounds have simulated durations
        self.sim_time = 0.0

    def run(self, host: RoundHost, pool: ClientPool) -> None:
        """Each round's clients are submitted as soon as the previous model is aggregated, so a pool that trains
        in the background (Ray actors) trains round r + 1 while round r is evaluated and reported. Nothing round
        r + 1 depends on (weights, client states, the aggregator's payload) changes after aggregation."""
        started = time.perf_counter()
        # restored from the last round's checkpoint (its trial was killed before Tune saw it end): nothing to run
        done = host.round >= host.experiment.rounds
        current: _SubmittedRound | None = None if done else self._submit_round(host, pool, host.round + 1)
        while current is not None:
            outcomes = pool.collect(current.tickets)
            by_client = {o.client_id: o for o in (outcomes[t] for t in current.tickets)}
            log = [
                ClientRecord(
                    current.index,
                    p.client_id,
                    outcome_status(by_client.get(p.client_id), p),
                    p.steps,
                    p.sim_time,
                    staleness=0,  # a synchronous round's clients all start from its model
                    **placed(by_client.get(p.client_id)),
                )
                for p in current.plans
            ]
            updates = [o for o in by_client.values() if isinstance(o, ClientUpdate)]
            self.sim_time += host.system.round_duration(current.plans)
            start_weights = host.weights
            updates = host.apply_round(current.index, updates)
            upcoming = None
            if current.index < host.experiment.rounds:
                upcoming = self._submit_round(host, pool, current.index + 1)
            evaluated_at = host.report_round(current.index, start_weights, updates, log, pool, started)
            # a round's time runs from the end of the previous evaluation: rounds tile the run
            # (docs/explanation/workload.md#what-is-timed)
            started, current = evaluated_at, upcoming

    def _submit_round(self, host: RoundHost, pool: ClientPool, round_index: int) -> _SubmittedRound:
        exp = host.experiment
        poisson = exp.privacy_mechanism == "central"  # what client-level DP's accountant assumes
        clients = sample_clients(host.data.num_clients, exp.participation, exp.seed, round_index, poisson=poisson)
        plans = host.system.plan(clients, round_index)
        payload = host.method.aggregator.payload()
        jobs = [
            TrainJob(p.client_id, round_index, host.weights, payload, host.client_states.get(p.client_id), p.max_steps)
            for p in plans
            if p.trains
        ]
        tickets = pool.submit_all(jobs, summed=host.sums_round(round_index))
        return _SubmittedRound(round_index, plans, tickets)

    def round_metrics(self, updates: Sequence[ClientUpdate]) -> dict[str, Any]:
        return {SIM_TIME: self.sim_time} if self.report_clock else {}

    def state_dict(self) -> dict[str, Any]:
        # "asynchronous" is the buffered schedule's entry: None in a synchronous checkpoint, as it always was
        return {"sim_time": self.sim_time, "asynchronous": None}  # not-a-metric: the checkpoint's keys

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.sim_time = float(state["sim_time"])  # not-a-metric: the checkpoint's key
