"""The pool that drives a trial's client actors (actors/client.py), created once per trial and reused every round.

Inside a Tune trial the actors land in the trial's placement group (one bundle each), so their
CPU/GPU fractions are reserved by Tune before the trial starts.

Failure policy: an actor that dies while training a client (node lost, OOM kill, os._exit), or does not
answer within `resources.round_timeout_s`, is replaced by a fresh actor in the same bundle and the client
is retried there, up to `faults.retries` times; after that the client comes back as `ClientLost` and the
round completes without it. Per-client method state lives in the round driver, so nothing is lost with
an actor. This is the only module that calls ray.wait.

Client batching (`resources.client_batch` > 1): a round's jobs (`submit_all`) are cut into chunks once, from the
whole round (engine/pool.py's client_batches, with one share per actor), and an idle actor trains a whole chunk at
once (`train_many`). The chunks never depend on timing, so a run of a seed batches the same clients together
wherever and whenever they train. A chunk is lost, and retried, as one: every client in it gets a WorkerFailure and
is retried in the same chunk, or past the retries comes back as `ClientLost`. `submit` (FedBuff's asynchronous
dispatches) still queues one job, trained alone.

Partial sums (`resources.partial_sums`, a round `submit_all(..., summed=True)`): the round's jobs are cut into one
chunk per actor the same way, and each actor sends back one message: its clients' metrics and states, and one sum of
their deltas (`train_summed`). The driver then handles `actors` messages a round, not one per client.

Actors across trials (an `ActorCache`, used inside Tune trials, whose process Tune reuses for the next trial):
a closed pool parks its actors in this process instead of killing them, and the next pool with the same data
and resources reconfigures them (a fresh model and method on the data they hold) instead of starting new ones
(a new actor imports torch and loads the data: seconds). Parked actors stay in the placement group of the
trial process that owns them, and die with it. A trial process's first pool takes the actors its trial started
early (actors/client.py's start_early), if any.
"""

from __future__ import annotations

import dataclasses
import hashlib
import time
from collections.abc import Sequence
from typing import Any

import ray
from ray.exceptions import RayActorError

from raytune_fl.actors.client import ActorCache, Parked, actor_class, actor_threads, resources_key
from raytune_fl.config import FaultsConfig, ResourcesConfig
from raytune_fl.engine.data import FederatedData
from raytune_fl.engine.pool import ClientLost, Outcome, TrainJob, WorkerFailure, client_batches
from raytune_fl.engine.worker import WorkerSpec

# a unit of the queue: its tickets, their jobs (one, or a chunk trained together), its attempt (0 = the first try),
# whether the chunk comes back as one sum (resources.partial_sums)
_Queued = tuple[tuple[int, ...], tuple[TrainJob, ...], int, bool]


@dataclasses.dataclass
class _InFlight:
    slot: int
    tickets: tuple[int, ...]
    jobs: tuple[TrainJob, ...]  # one job (ClientActor.train), or a chunk (train_many)
    attempt: int
    deadline: float
    summed: bool = False


def _sharing(jobs: Sequence[TrainJob], run: Sequence[int]) -> list[list[int]]:
    """`run` (positions in `jobs`) split by the weights and payload its jobs start from: a chunk ships one of each.
    A synchronous round's jobs all share them, so this is `run` itself there."""
    groups: dict[tuple[int, int], list[int]] = {}
    for i in run:
        groups.setdefault((id(jobs[i].weights), id(jobs[i].payload)), []).append(i)
    return list(groups.values())


def data_key(data: FederatedData) -> str:
    """Which training data an actor holds: the partition and a sample of the arrays (cheap on big datasets)."""
    digest = hashlib.sha1()
    x, y = data.dataset.x_train, data.dataset.y_train
    for array in (x.reshape(-1)[:: max(1, x.size // 1_000_000)], y, *data.train_parts):
        digest.update(str((array.shape, array.dtype)).encode())
        digest.update(array.tobytes())
    return f"{data.dataset.name}:{x.shape}:{digest.hexdigest()}"


class RayActorPool:
    def __init__(
        self,
        data: FederatedData,
        spec: WorkerSpec,
        resources: ResourcesConfig,
        faults: FaultsConfig | None = None,
        cache: ActorCache | None = None,
    ) -> None:
        self.timeout_s = resources.round_timeout_s
        faults = faults or FaultsConfig()
        self.retries = faults.retries
        self.sizes = [len(part) for part in data.train_parts]
        self.remote = actor_class(resources)
        self.threads, self.device = actor_threads(resources), resources.device
        self.spec, self.kills = spec, frozenset(map(tuple, faults.inject_kills))
        self.cache, self.num_actors = cache, resources.actors
        self.key: tuple | None = None  # what parked actors must match; hashed only where actors are kept
        reused: list[Any] = []
        started: list[Any] = []
        if cache is not None:
            self.key = (data_key(data), *resources_key(resources))
            cache.open([])
            if (parked := cache.take_parked(self.key)) is not None:
                reused, (x_ref, y_ref) = parked.actors, parked.data_refs
            else:  # other data or resources: the parked ones were freed, for this trial's actors
                started = cache.take_early(resources)
        if not reused:
            # the training arrays go into the object store once; every actor (and every restarted one) reads them
            x_ref, y_ref = ray.put(data.dataset.x_train), ray.put(data.dataset.y_train)
        self.data_args = (x_ref, y_ref, data.train_parts)
        self.data_refs = (x_ref, y_ref)
        missing = resources.actors - len(reused) - len(started)
        new = started + [self.remote.remote(self.threads, self.device) for _ in range(missing)]
        for actor in new:
            actor.load.remote(*self.data_args)
        self.actors = reused + new
        self.reused = len(reused)
        # each actor's configure answers once it has started (torch imported, data loaded): ready() waits for them
        self.starting = [actor.configure.remote(spec, self.kills) for actor in self.actors]
        if cache is not None:
            cache.open(self.actors)
        self.idle = list(range(len(self.actors)))
        self.queue: list[_Queued] = []
        self.in_flight: dict[ray.ObjectRef, _InFlight] = {}
        self.done: dict[int, Outcome] = {}
        self.failures: list[WorkerFailure] = []
        self.refs: dict[int, tuple[object, ray.ObjectRef]] = {}  # id(weights or payload) -> (object, its ref)
        self.next_ticket = 0
        self.replies = 0  # messages back from the actors (a client's update, a chunk's, or a chunk's sum)

    def ready(self) -> None:
        """Block until every actor has started (torch imported, data loaded), so round 1 times training only."""
        refs = self.starting
        done, waiting = ray.wait(refs, num_returns=len(refs), timeout=self.timeout_s)
        if waiting:
            raise TimeoutError(
                f"{len(waiting)} of {len(refs)} client actors did not start within {self.timeout_s:.0f}s; "
                "does the trial's placement group have one bundle per actor?"
            )
        for slot, ref in enumerate(refs):
            try:
                ray.get(ref)  # re-raises an actor's constructor or configure error
            except RayActorError:
                if slot >= self.reused:
                    raise
                self._replace(slot)  # a parked actor that died meanwhile: start a fresh one
                ray.get(self.actors[slot].ready.remote(), timeout=self.timeout_s)
        self.starting = []

    def submit(self, job: TrainJob) -> int:
        self.next_ticket += 1
        self.queue.append(((self.next_ticket,), (job,), 0, False))
        self._dispatch()
        return self.next_ticket

    def submit_all(self, jobs: Sequence[TrainJob], summed: bool = False) -> list[int]:
        batch = len(jobs) if summed else self.spec.client_batch  # partial sums: one chunk per actor
        if batch <= 1 and not summed:
            return [self.submit(job) for job in jobs]
        tickets = [self.next_ticket + 1 + i for i in range(len(jobs))]
        self.next_ticket += len(jobs)
        # the chunks are fixed here, from the round's jobs alone (see above)
        for run in client_batches(jobs, self.sizes, batch, workers=len(self.actors)):
            for chunk in _sharing(jobs, run):
                self.queue.append((tuple(tickets[i] for i in chunk), tuple(jobs[i] for i in chunk), 0, summed))
        self._dispatch()
        return tickets

    def collect(self, tickets: Sequence[int]) -> dict[int, Outcome]:
        while any(t not in self.done for t in tickets):
            self._dispatch()
            if not self.in_flight:
                raise RuntimeError(f"tickets {[t for t in tickets if t not in self.done]} were never submitted")
            now = time.monotonic()
            wait_s = max(0.05, min(f.deadline for f in self.in_flight.values()) - now)
            ready, _ = ray.wait(list(self.in_flight), num_returns=1, timeout=wait_s)
            for ref in ready:
                flight = self.in_flight.pop(ref)
                try:
                    result = ray.get(ref)
                except RayActorError as error:
                    self._lost(flight, error.__class__.__name__)
                    continue
                self.replies += 1
                self.done.update(zip(flight.tickets, result if isinstance(result, list) else [result]))
                self.idle.append(flight.slot)
            now = time.monotonic()
            for ref, flight in list(self.in_flight.items()):
                if now >= flight.deadline:  # a hang: the actor is replaced like a dead one
                    del self.in_flight[ref]
                    self._lost(flight, f"no reply within round_timeout_s={self.timeout_s:g}s")
        outcomes = {t: self.done.pop(t) for t in tickets}
        self._forget_unused_refs()
        return outcomes

    def drain_failures(self) -> list[WorkerFailure]:
        failures, self.failures = self.failures, []
        return failures

    def close(self) -> None:
        pending: list[ray.ObjectRef] = []
        if self.in_flight:  # a trial stopped while its next round was training: let it finish, briefly
            _, pending = ray.wait(list(self.in_flight), num_returns=len(self.in_flight), timeout=1.0)
        if self.cache is not None and self.key is not None and not pending and len(self.actors) == self.num_actors:
            self.cache.park(Parked(self.key, self.actors, self.data_refs))
        else:
            for actor in self.actors:
                ray.kill(actor)
        self.actors, self.idle, self.in_flight, self.refs = [], [], {}, {}

    def _dispatch(self) -> None:
        # largest client first (a chunk: its largest): a shorter round tail when clients outnumber actors
        self.queue.sort(key=lambda item: (-max(self.sizes[job.client_id] for job in item[1]), min(item[0])))
        while self.idle and self.queue:
            slot = self.idle.pop()
            tickets, jobs, attempt, summed = self.queue.pop(0)
            # the big parts travel as shared refs: a chunk's jobs share them (_sharing)
            weights, payload = self._ref(jobs[0].weights), self._ref(jobs[0].payload)
            bare = [dataclasses.replace(job, weights={}, payload={}) for job in jobs]
            actor = self.actors[slot]
            if summed:
                ref = actor.train_summed.remote(bare, weights, payload, attempt)
            elif len(jobs) == 1:
                ref = actor.train.remote(bare[0], weights, payload, attempt)
            else:
                ref = actor.train_many.remote(bare, weights, payload, attempt)
            deadline = time.monotonic() + self.timeout_s
            self.in_flight[ref] = _InFlight(slot, tickets, jobs, attempt, deadline, summed)

    def _ref(self, value: object) -> ray.ObjectRef:
        """The global weights go into the object store once per version, however many clients read them."""
        key = id(value)
        if key not in self.refs:
            self.refs[key] = (value, ray.put(value))
        return self.refs[key][1]

    def _forget_unused_refs(self) -> None:
        jobs = [job for _, queued, _, _ in self.queue for job in queued]
        jobs += [job for flight in self.in_flight.values() for job in flight.jobs]
        used = {id(job.weights) for job in jobs} | {id(job.payload) for job in jobs}
        self.refs = {k: v for k, v in self.refs.items() if k in used}

    def _lost(self, flight: _InFlight, error: str) -> None:
        """The actor died (or hung) with a job or a chunk: every client of it failed, and is retried as before."""
        for job in flight.jobs:
            self.failures.append(WorkerFailure(job.round_index, job.client_id, flight.attempt, error))
        self._replace(flight.slot)
        self.idle.append(flight.slot)
        if flight.attempt < self.retries:
            self.queue.append((flight.tickets, flight.jobs, flight.attempt + 1, flight.summed))
        else:
            for ticket, job in zip(flight.tickets, flight.jobs):
                self.done[ticket] = ClientLost(job.client_id, flight.attempt + 1, error)

    def _replace(self, slot: int) -> None:
        ray.kill(self.actors[slot])  # a hung actor must not keep its bundle
        actor = self.remote.remote(self.threads, self.device)
        actor.load.remote(*self.data_args)
        actor.configure.remote(self.spec, self.kills)  # Ray runs one caller's calls to an actor in order
        self.actors[slot] = actor
        if self.cache is not None:
            self.cache.live.append(actor)


def ray_pool_factory(resources: ResourcesConfig, faults: FaultsConfig | None = None, cache: ActorCache | None = None):
    """`cache`: take actors from it and park them there when the pool closes, for the next trial (see above)."""

    def make(data: FederatedData, spec: WorkerSpec) -> RayActorPool:
        return RayActorPool(data, spec, resources, faults, cache)

    return make
