"""How the round driver reaches its clients. The in-process pool is here; the Ray pool is in actors/."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from raytune_fl.engine.worker import ClientWorker
from raytune_fl.types import ClientUpdate, Weights


class ClientPool(Protocol):
    def ready(self) -> None: ...  # block until the clients can train

    def train(
        self,
        client_ids: Sequence[int],
        round_index: int,
        weights: Weights,
        payload: Mapping[str, Any],
        states: Mapping[int, Any],
    ) -> list[ClientUpdate]:
        """Train each client from `weights`; `payload` goes to all, `states[cid]` (if any) to client cid."""
        ...

    def close(self) -> None: ...


class InProcessPool:
    """Trains clients one after another in this process: no Ray, for debugging and baselines."""

    def __init__(self, worker: ClientWorker) -> None:
        self.worker = worker

    def ready(self) -> None:
        pass

    def train(
        self,
        client_ids: Sequence[int],
        round_index: int,
        weights: Weights,
        payload: Mapping[str, Any],
        states: Mapping[int, Any],
    ) -> list[ClientUpdate]:
        return [self.worker.train(cid, round_index, weights, payload, states.get(cid)) for cid in client_ids]

    def close(self) -> None:
        pass
