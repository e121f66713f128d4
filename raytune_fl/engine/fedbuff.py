"""FedBuff's asynchronous schedule on the same pool (and actors) as synchronous rounds.

`concurrency` clients are always in flight. Each finishes at a simulated time (its local steps over its
speed, from `base.system`); arrivals are processed in simulated-time order, so the schedule, the
staleness of every update and therefore the metrics are the same on every run, however fast the real
actors are. Real training still overlaps: a job is submitted to the pool when its client starts and
collected when its simulated arrival comes up. Every `buffer_size` arrivals are aggregated as one round.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from raytune_fl.aggregators.fedavg import is_running_statistic
from raytune_fl.config import ExperimentConfig, clients_per_round
from raytune_fl.engine.pool import ClientLost, ClientPool, TrainJob
from raytune_fl.engine.schedules import RoundHost
from raytune_fl.engine.system import ClientPlan, ClientRecord, placed
from raytune_fl.metrics import SIM_TIME, STALENESS_MAX, STALENESS_MEAN
from raytune_fl.types import ClientUpdate, Weights


@dataclass
class Flight:
    finish: float  # simulated arrival time
    seq: int  # dispatch number: ties in simulated time go in dispatch order
    version: int  # rounds completed when the client started: staleness = rounds completed at arrival - version
    job: TrainJob
    plan: ClientPlan
    ticket: int | None = None  # None for a client that drops out: it is never trained

    def to_state(self) -> dict[str, Any]:
        return {
            "finish": self.finish,
            "seq": self.seq,
            "version": self.version,
            "job": self.job,
            "plan": dataclasses.asdict(self.plan),
        }


def rebase_statistics(update: ClientUpdate, start: Weights, current: Weights) -> ClientUpdate:
    """A stale update's BatchNorm running statistics, re-expressed against the current model.

    They are state, not gradients: added to a newer model, a stale variance delta can drive the variance
    negative (NaN). Re-based, the aggregate takes the mean of the clients' own statistics.
    """
    if update.staleness == 0:
        return update
    delta = {
        key: (start[key] + value - current[key]).astype(value.dtype) if is_running_statistic(key) else value
        for key, value in update.delta.items()
    }
    return dataclasses.replace(update, delta=delta)


class BufferedAsync:
    """FedBuff's schedule. Between runs its state is what a checkpoint taken at the last report holds (clients
    in flight, the buffer, the dispatch count); a run rebuilds its flights from that state on its pool."""

    def __init__(self, experiment: ExperimentConfig, num_clients: int, buffer_size: int | None) -> None:
        if experiment.system.deadline is not None:
            raise ValueError("system.deadline: FedBuff has no round deadline (late updates are applied stale)")
        self.rounds, self.seed, self.num_clients = experiment.rounds, experiment.seed, num_clients
        self.concurrency = clients_per_round(experiment.participation, num_clients)
        self.buffer_size = int(buffer_size or 1)
        self.sim_time = 0.0
        self.saved: dict[str, Any] | None = None  # the state as of the last report, for checkpoints
        # the running state, rebuilt from `saved` by each run
        self.dispatches = 0
        self.flights: list[Flight] = []
        self.buffer: list[ClientUpdate] = []
        self.log: list[ClientRecord] = []

    def run(self, host: RoundHost, pool: ClientPool) -> None:
        state = self.saved or {"dispatches": 0, "flights": [], "buffer": [], "log": []}
        self.dispatches = int(state["dispatches"])
        self.buffer = list(state["buffer"])
        self.log = [ClientRecord(**row) for row in state["log"]]
        self.flights = []
        for saved in state["flights"]:  # restored from a checkpoint: these clients train again, from the same job
            flight = Flight(saved["finish"], saved["seq"], saved["version"], saved["job"], ClientPlan(**saved["plan"]))
            flight.ticket = None if flight.plan.dropped else pool.submit(flight.job)
            self.flights.append(flight)
        while len(self.flights) < self.concurrency:
            self.dispatch(host, pool)
        started = time.perf_counter()
        while host.round < self.rounds:
            flight = min(self.flights, key=lambda f: (f.finish, f.seq))
            self.flights.remove(flight)
            self.sim_time = flight.finish
            staleness = host.round - flight.version
            status, outcome = "dropped", None
            if flight.ticket is not None:
                outcome = pool.collect([flight.ticket])[flight.ticket]
                if isinstance(outcome, ClientLost):
                    status = "lost"
                else:
                    status = "trained"
                    update = dataclasses.replace(outcome, staleness=staleness)
                    self.buffer.append(rebase_statistics(update, flight.job.weights, host.weights))
            plan = flight.plan
            where = placed(outcome)
            self.log.append(
                ClientRecord(host.round + 1, plan.client_id, status, plan.steps, plan.sim_time, staleness, **where)
            )
            if len(self.buffer) >= self.buffer_size:
                buffer, log = self.buffer, self.log
                self.buffer, self.log = [], []
                # what a checkpoint taken at this report must hold; the freed slot is refilled after the report,
                # exactly as a restored run refills it
                self.saved = self.running_state()
                round_index, start_weights = host.round + 1, host.weights
                updates = host.apply_round(round_index, buffer)
                host.report_round(round_index, start_weights, updates, log, pool, started)
                started = time.perf_counter()
            self.dispatch(host, pool)

    def dispatch(self, host: RoundHost, pool: ClientPool) -> None:
        """Start one idle client (seeded draw) on the current model, at the current simulated time."""
        busy = {f.job.client_id for f in self.flights}
        idle = [c for c in range(self.num_clients) if c not in busy]
        rng = np.random.default_rng([self.seed, self.dispatches, 13])  # 13: its own stream
        cid = idle[int(rng.integers(len(idle)))]
        plan = host.system.plan([cid], stream=self.dispatches)[0]
        job = TrainJob(
            cid,
            host.round + 1,
            host.weights,
            host.method.aggregator.payload(),
            host.client_states.get(cid),
            plan.max_steps,
            stream=self.dispatches,
        )
        flight = Flight(self.sim_time + plan.sim_time, self.dispatches, host.round, job, plan)
        flight.ticket = None if plan.dropped else pool.submit(job)
        self.flights.append(flight)
        self.dispatches += 1

    def running_state(self) -> dict[str, Any]:
        return {
            "dispatches": self.dispatches,
            "flights": [f.to_state() for f in self.flights],
            "buffer": list(self.buffer),
            "log": [dataclasses.asdict(r) for r in self.log],
        }

    def round_metrics(self, updates: Sequence[ClientUpdate]) -> dict[str, Any]:
        staleness = [u.staleness for u in updates]
        return {SIM_TIME: self.sim_time, STALENESS_MEAN: float(np.mean(staleness)), STALENESS_MAX: max(staleness)}

    def state_dict(self) -> dict[str, Any]:
        return {"sim_time": self.sim_time, "asynchronous": self.saved}  # not-a-metric: the checkpoint's keys

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.sim_time = float(state["sim_time"])  # not-a-metric: the checkpoint's key
        self.saved = state.get("asynchronous")
