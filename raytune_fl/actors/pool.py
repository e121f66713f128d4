"""Client actors, created once per trial and reused every round (each one imports torch: seconds).

Inside a Tune trial the actors land in the trial's placement group (one bundle each), so their
CPU/GPU fractions are reserved by Tune before the trial starts.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import ray

from raytune_fl.config import ResourcesConfig
from raytune_fl.engine.federation import FederatedData
from raytune_fl.engine.worker import ClientWorker, WorkerSpec
from raytune_fl.types import ClientUpdate, Weights


class ClientActor:
    def __init__(
        self,
        spec: WorkerSpec,
        x_train: np.ndarray,
        y_train: np.ndarray,
        parts: list[np.ndarray],
        threads: int,
    ) -> None:
        import torch

        torch.set_num_threads(threads)
        # With num_gpus=0 an actor on a GPU node still sees the GPUs: decide from Ray's assignment.
        device = "cuda" if ray.get_gpu_ids() else "cpu"
        self.worker = ClientWorker(dataclasses.replace(spec, device=device), x_train, y_train, parts)

    def train(
        self, client_id: int, round_index: int, weights: Weights, payload: Mapping[str, Any], state: Any
    ) -> ClientUpdate:
        return self.worker.train(client_id, round_index, weights, payload, state)

    def ready(self) -> bool:
        return True


class RayActorPool:
    def __init__(self, data: FederatedData, spec: WorkerSpec, resources: ResourcesConfig) -> None:
        self.timeout_s = resources.round_timeout_s
        self.sizes = [len(part) for part in data.train_parts]
        remote = ray.remote(ClientActor).options(num_cpus=resources.cpus_per_actor, num_gpus=resources.gpus_per_actor)
        # the training arrays go into the object store once; every actor reads them zero-copy
        x_ref, y_ref = ray.put(data.dataset.x_train), ray.put(data.dataset.y_train)
        threads = max(1, int(resources.cpus_per_actor))
        self.actors = [remote.remote(spec, x_ref, y_ref, data.train_parts, threads) for _ in range(resources.actors)]

    def ready(self) -> None:
        """Block until every actor has started (torch imported, data loaded), so round 1 times training only."""
        refs = [actor.ready.remote() for actor in self.actors]
        done, waiting = ray.wait(refs, num_returns=len(refs), timeout=self.timeout_s)
        if waiting:
            raise TimeoutError(
                f"{len(waiting)} of {len(refs)} client actors did not start within {self.timeout_s:.0f}s; "
                "does the trial's placement group have one bundle per actor?"
            )
        ray.get(done)  # re-raises an actor's constructor error

    def train(
        self,
        client_ids: Sequence[int],
        round_index: int,
        weights: Weights,
        payload: Mapping[str, Any],
        states: Mapping[int, Any],
    ) -> list[ClientUpdate]:
        weights_ref = ray.put(weights)  # once per round, shared by every client
        payload_ref = ray.put(dict(payload))
        queue = sorted(client_ids, key=lambda cid: -self.sizes[cid])  # largest first: shorter round tail
        idle = list(self.actors)
        pending: dict[ray.ObjectRef, tuple[object, int]] = {}
        updates: list[ClientUpdate] = []
        while queue or pending:
            while idle and queue:
                actor, cid = idle.pop(), queue.pop(0)
                ref = actor.train.remote(cid, round_index, weights_ref, payload_ref, states.get(cid))
                pending[ref] = (actor, cid)
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=self.timeout_s)
            if not ready:
                waiting = sorted(cid for _, cid in pending.values())
                raise TimeoutError(
                    f"round {round_index}: no client update for {self.timeout_s:.0f}s "
                    f"(waiting for clients {waiting}); raise resources.round_timeout_s if rounds are this slow"
                )
            for ref in ready:
                actor, _ = pending.pop(ref)
                updates.append(ray.get(ref))
                idle.append(actor)
        return updates

    def close(self) -> None:
        for actor in self.actors:
            ray.kill(actor)
        self.actors = []


def ray_pool_factory(resources: ResourcesConfig):
    def make(data: FederatedData, spec: WorkerSpec) -> RayActorPool:
        return RayActorPool(data, spec, resources)

    return make
