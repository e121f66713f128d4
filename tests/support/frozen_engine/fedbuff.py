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
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from raytune_fl.aggregators.fedavg import is_running_statistic
from raytune_fl.engine.pool import ClientLost, ClientPool, TrainJob
from raytune_fl.engine.system import ClientPlan, ClientRecord, placed
from raytune_fl.types import ClientUpdate, Weights

if TYPE_CHECKING:
    from .federation import Federation


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
    def __init__(self, federation: Federation, pool: ClientPool) -> None:
        self.fed, self.pool = federation, pool
        exp = federation.experiment
        self.num_clients = federation.data.num_clients
        self.concurrency = max(1, round(exp.participation * self.num_clients))
        self.buffer_size = int(federation.method.buffer_size or 1)
        state = federation.async_state or {"dispatches": 0, "flights": [], "buffer": [], "log": []}
        self.dispatches = int(state["dispatches"])
        self.buffer = list(state["buffer"])
        self.log = [ClientRecord(**row) for row in state["log"]]
        self.flights = []
        for saved in state["flights"]:  # restored from a checkpoint: these clients train again, from the same job
            flight = Flight(saved["finish"], saved["seq"], saved["version"], saved["job"], ClientPlan(**saved["plan"]))
            flight.ticket = None if flight.plan.dropped else pool.submit(flight.job)
            self.flights.append(flight)

    def run(self) -> None:
        fed, rounds = self.fed, self.fed.experiment.rounds
        while len(self.flights) < self.concurrency:
            self.dispatch()
        started = time.perf_counter()
        while fed.round < rounds:
            flight = min(self.flights, key=lambda f: (f.finish, f.seq))
            self.flights.remove(flight)
            fed.sim_time = flight.finish
            staleness = fed.round - flight.version
            status, outcome = "dropped", None
            if flight.ticket is not None:
                outcome = self.pool.collect([flight.ticket])[flight.ticket]
                status = "lost" if isinstance(outcome, ClientLost) else "trained"
                if status == "trained":
                    update = dataclasses.replace(outcome, staleness=staleness)
                    self.buffer.append(rebase_statistics(update, flight.job.weights, fed.weights))
            plan = flight.plan
            where = placed(outcome)
            self.log.append(
                ClientRecord(fed.round + 1, plan.client_id, status, plan.steps, plan.sim_time, staleness, **where)
            )
            if len(self.buffer) >= self.buffer_size:
                buffer, log = self.buffer, self.log
                self.buffer, self.log = [], []
                # what a checkpoint taken at this report must hold; the freed slot is refilled after the report,
                # exactly as a restored run refills it
                fed.async_state = self.state()
                fed.finish_round(fed.round + 1, buffer, log, self.pool, started)
                started = time.perf_counter()
            self.dispatch()

    def dispatch(self) -> None:
        """Start one idle client (seeded draw) on the current model, at the current simulated time."""
        fed = self.fed
        busy = {f.job.client_id for f in self.flights}
        idle = [c for c in range(self.num_clients) if c not in busy]
        rng = np.random.default_rng([fed.experiment.seed, self.dispatches, 13])  # 13: its own stream
        cid = idle[int(rng.integers(len(idle)))]
        plan = fed.system.plan([cid], stream=self.dispatches)[0]
        job = TrainJob(
            cid,
            fed.round + 1,
            fed.weights,
            fed.method.aggregator.payload(),
            fed.client_states.get(cid),
            plan.max_steps,
            stream=self.dispatches,
        )
        flight = Flight(fed.sim_time + plan.sim_time, self.dispatches, fed.round, job, plan)
        flight.ticket = None if plan.dropped else self.pool.submit(job)
        self.flights.append(flight)
        self.dispatches += 1

    def state(self) -> dict[str, Any]:
        return {
            "dispatches": self.dispatches,
            "flights": [f.to_state() for f in self.flights],
            "buffer": list(self.buffer),
            "log": [dataclasses.asdict(r) for r in self.log],
        }
