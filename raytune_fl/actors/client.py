"""The client actor, and this process's actors across trials. Light to import: no torch, no engine.

Why light: a Tune trial's process starts its client actors first, before it imports torch and builds its
federation (`start_early`). Each actor imports torch in its own process meanwhile (~2.5 s of CPU each), so the
actors' start-up and the trial's own run side by side on the cores instead of one after the other. Hence the
two-step actor: `ClientActor(threads, device)` starts a process and imports; `load` hands it the training data and
`configure` a trial's model and method (again for each trial a parked actor serves).

The process's actors across trials: `ActorCache` (early, parked and live actors), owned by the trial that runs.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import ray

if TYPE_CHECKING:
    from raytune_fl.config import ResourcesConfig
    from raytune_fl.engine.pool import TrainJob
    from raytune_fl.engine.worker import WorkerSpec
    from raytune_fl.types import ClientUpdate, Weights, WorkerPlace


class ClientActor:
    def __init__(self, threads: int, device: str = "auto") -> None:  # device: resources.device
        import torch

        from raytune_fl.engine import pool, worker  # noqa: F401  (imported now, while the trial builds its run)
        from raytune_fl.types import WorkerPlace

        torch.set_num_threads(threads)
        context = ray.get_runtime_context()
        # Ray sets CUDA_VISIBLE_DEVICES to these ids, so the actor's "cuda" is its assigned GPU
        gpus = ",".join(str(g) for g in ray.get_gpu_ids())
        group = context.get_placement_group_id() or ""
        self.place: WorkerPlace = WorkerPlace(context.get_node_id(), gpus, "cpu", group, context.get_actor_id() or "")
        self.device_setting = device
        self.data: tuple[np.ndarray, np.ndarray, list[np.ndarray]] | None = None
        self.kills: frozenset[tuple[int, int]] = frozenset()

    def load(self, x_train: np.ndarray, y_train: np.ndarray, parts: list[np.ndarray]) -> None:
        """The training data (once per actor: a parked actor keeps it for the next trial)."""
        self.data = (x_train, y_train, parts)

    def configure(self, spec: WorkerSpec, kills: frozenset[tuple[int, int]]) -> bool:
        """Ready for a trial: a fresh model and method on the data loaded (nothing else carries over)."""
        from raytune_fl.devices import choose_device, reproducible
        from raytune_fl.engine.worker import ClientWorker

        where = f" on Ray node {self.place.node} (Ray GPU ids: {self.place.gpus or 'none'})"
        device = choose_device(self.device_setting, bool(self.place.gpus), where)  # DeviceError: the trial fails
        reproducible(spec.deterministic)  # this trial's setting (a parked actor may have served another)
        self.place = dataclasses.replace(self.place, device=device)
        assert self.data is not None, "load() comes before configure()"
        self.worker = ClientWorker(dataclasses.replace(spec, device=device), *self.data)
        self.kills = kills
        return True

    def train(self, job: TrainJob, weights: Weights, payload: Mapping[str, Any], attempt: int) -> ClientUpdate:
        from raytune_fl.engine.pool import run_job

        if attempt == 0 and (job.round_index, job.client_id) in self.kills:
            os._exit(1)  # chaos testing: die the way a lost node or an OOM kill does, mid-round
        update = run_job(self.worker, dataclasses.replace(job, weights=weights, payload=payload))
        update.place = self.place
        return update

    def train_many(
        self, jobs: Sequence[TrainJob], weights: Weights, payload: Mapping[str, Any], attempt: int
    ) -> list[ClientUpdate]:
        """A chunk of one round's clients (`client_batch`), trained at once; updates in the order of `jobs`."""
        return self._chunk(self.worker.train_many, jobs, weights, payload, attempt)

    def train_summed(
        self, jobs: Sequence[TrainJob], weights: Weights, payload: Mapping[str, Any], attempt: int
    ) -> list[ClientUpdate]:
        """This actor's share of a round, one sum of their deltas (resources.partial_sums); in the order of `jobs`."""
        return self._chunk(self.worker.train_summed, jobs, weights, payload, attempt)

    def _chunk(
        self,
        train: Callable[[list[TrainJob]], list[ClientUpdate]],
        jobs: Sequence[TrainJob],
        weights: Weights,
        payload: Mapping[str, Any],
        attempt: int,
    ) -> list[ClientUpdate]:
        if attempt == 0 and any((job.round_index, job.client_id) in self.kills for job in jobs):
            os._exit(1)  # chaos testing: the whole chunk is lost with the actor, as a real loss would lose it
        updates = train([dataclasses.replace(job, weights=weights, payload=payload) for job in jobs])
        for update in updates:
            update.place = self.place
        return updates

    def ready(self) -> WorkerPlace:
        return self.place


def actor_class(resources: ResourcesConfig) -> Any:
    """The client actor as Ray schedules it: one bundle's CPU/GPU fraction (the trial's placement group)."""
    return ray.remote(ClientActor).options(num_cpus=resources.cpus_per_actor, num_gpus=resources.gpus_per_actor)


def actor_threads(resources: ResourcesConfig) -> int:
    return max(1, int(resources.cpus_per_actor))


def resources_key(resources: ResourcesConfig) -> tuple:
    """What an actor started for one trial must match to serve another (with the data it holds)."""
    threads = actor_threads(resources)
    return resources.actors, resources.cpus_per_actor, resources.gpus_per_actor, threads, resources.device


@dataclasses.dataclass
class Parked:
    key: tuple  # the data's key (pool.data_key) + resources_key
    actors: list[Any]
    data_refs: tuple[ray.ObjectRef, ray.ObjectRef]


@dataclasses.dataclass
class Early:
    key: tuple  # resources_key
    actors: list[Any]


class ActorCache:
    """This process's client actors across trials: one trial at a time per process, as Tune runs them. The trial
    owns it for its run (tune/trainable.py passes it to its pool); only these methods change it.

    - early: started by `start_early`, not yet taken by a pool (no data yet);
    - parked: a closed pool's actors, kept for the next trial with the same data and resources;
    - live: the actors of the open pool, killed if that pool is never closed.
    """

    def __init__(self) -> None:
        self.parked: Parked | None = None
        self.early: Early | None = None
        self.live: list[Any] = []

    def start_early(self, resources: ResourcesConfig) -> None:
        """Start a trial's client actors now, ahead of its federation (see above); its pool takes them. Nothing to
        do when actors from an earlier trial are parked here (the pool reuses those) or some already started."""
        if self.parked is not None or self.early is not None or resources.actors < 1:
            return
        remote = actor_class(resources)
        threads = actor_threads(resources)
        actors = [remote.remote(threads, resources.device) for _ in range(resources.actors)]
        self.early = Early(resources_key(resources), actors)

    def take_early(self, resources: ResourcesConfig) -> list[Any]:
        """The actors `start_early` started, if they were started for these resources (else they are killed)."""
        started, self.early = self.early, None
        if started is None:
            return []
        if started.key == resources_key(resources):
            return started.actors
        for actor in started.actors:
            ray.kill(actor)
        return []

    def take_parked(self, key: tuple) -> Parked | None:
        """The parked actors if they were parked with `key` (the same data and resources); else they are killed
        (their bundles free up for the new pool's actors) and None."""
        parked, self.parked = self.parked, None
        if parked is not None and parked.key == key:
            return parked
        self.parked = parked
        self.release_parked()
        return None

    def park(self, parked: Parked) -> None:
        self.parked, self.live = parked, []

    def open(self, actors: Sequence[Any]) -> None:
        """A new pool's actors: those of a pool that was never closed (its thread was cut short) are killed."""
        for actor in self.live:
            ray.kill(actor)
        self.live = list(actors)

    def release_parked(self) -> int:
        """Kill the parked actors (their bundles free up); returns how many there were."""
        actors = self.parked.actors if self.parked is not None else []
        for actor in actors:
            ray.kill(actor)
        self.parked = None
        return len(actors)


PROCESS_ACTORS = ActorCache()  # the trial process's: Tune runs the next trial in the same process (reuse_actors)
