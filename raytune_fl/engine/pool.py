"""How the round driver reaches its clients. The in-process pool is here; the Ray pool is in actors/.

A pool takes train jobs (`submit`) and hands back their outcomes (`collect`), so the synchronous round
(submit all, collect all) and FedBuff's asynchronous schedule (collect one at a time, in simulated time)
share one transport. A client whose worker dies is retried by the pool and, past its retries, comes
back as `ClientLost`: the round driver decides what a lost client means.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from raytune_fl.engine.worker import ClientWorker, TrainJob, client_batches  # re-exported, where they were
from raytune_fl.types import ClientUpdate


@dataclass(frozen=True)
class ClientLost:
    """A client whose worker died on every attempt: it contributes nothing to this round."""

    client_id: int
    attempts: int
    error: str


@dataclass(frozen=True)
class WorkerFailure:
    """One worker death (or hang past the timeout) while training a client; the pool restarted the worker."""

    round_index: int
    client_id: int
    attempt: int  # 0 = the first try
    error: str


Outcome = ClientUpdate | ClientLost


class ClientPool(Protocol):
    def ready(self) -> None: ...  # block until the clients can train

    def submit(self, job: TrainJob) -> int:
        """Queue a job; returns its ticket. Training may start at once, in the background."""
        ...

    def submit_all(self, jobs: Sequence[TrainJob], summed: bool = False) -> list[int]:
        """Queue a round's jobs together; their tickets, in the order of `jobs`. A pool that trains clients in
        batches (`client_batch`) forms them here, from the whole round, so that they never depend on timing.
        `summed` (resources.partial_sums): each worker trains its share of the round and sends one sum of their
        deltas (ClientUpdate.summed) instead of a delta per client."""
        ...

    def collect(self, tickets: Sequence[int]) -> dict[int, Outcome]:
        """Block until every ticket has an outcome (an update, or ClientLost past the retries)."""
        ...

    def drain_failures(self) -> list[WorkerFailure]:
        """The worker failures since the last call."""
        ...

    def close(self) -> None: ...


def run_job(worker: ClientWorker, job: TrainJob) -> ClientUpdate:
    return worker.train(job.client_id, job.round_index, job.weights, job.payload, job.state, job.max_steps, job.stream)


class InProcessPool:
    """Trains clients one after another in this process: no Ray, for debugging and baselines.

    Jobs run when collected; results are the same as training at submission because a job carries
    everything it depends on. A Python exception (e.g. a diverged loss) propagates: there is no worker to lose.
    """

    def __init__(self, worker: ClientWorker) -> None:
        self.worker = worker
        self.sizes = [int(ix.numel()) for ix in worker.client_indices]
        self.jobs: dict[int, TrainJob] = {}
        self.summed: set[int] = set()  # tickets of rounds submitted with partial sums
        self.next_ticket = 0

    def ready(self) -> None:
        pass

    def submit(self, job: TrainJob) -> int:
        self.next_ticket += 1
        self.jobs[self.next_ticket] = job
        return self.next_ticket

    def submit_all(self, jobs: Sequence[TrainJob], summed: bool = False) -> list[int]:
        tickets = [self.submit(job) for job in jobs]  # batches are formed when collected (all jobs run then)
        if summed:
            self.summed.update(tickets)
        return tickets

    def collect(self, tickets: Sequence[int]) -> dict[int, Outcome]:
        if self.summed.intersection(tickets):  # one worker: the round's clients are one sum
            self.summed.difference_update(tickets)
            return dict(zip(tickets, self.worker.train_summed([self.jobs.pop(t) for t in tickets])))
        batch = self.worker.spec.client_batch
        if batch <= 1:
            return {t: run_job(self.worker, self.jobs.pop(t)) for t in tickets}
        jobs = [self.jobs.pop(t) for t in tickets]
        outcomes: dict[int, Outcome] = {}
        for run in client_batches(jobs, self.sizes, batch, workers=1):
            for i, update in zip(run, self.worker.train_many([jobs[i] for i in run])):
                outcomes[tickets[i]] = update
        return outcomes

    def drain_failures(self) -> list[WorkerFailure]:
        return []

    def close(self) -> None:
        self.jobs.clear()
        self.summed.clear()
