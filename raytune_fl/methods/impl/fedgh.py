"""FedGH's official-variant server, with its EMA history (raytune_fl.methods.fedgh explains the method)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from raytune_fl.aggregators.fedgh import fedgh_official
from raytune_fl.methods.base import ServerAggregator
from raytune_fl.types import ClientUpdate, Weights


class OfficialHarmonization(ServerAggregator):
    """The official variant's server: the EMA history of past steps per tensor (empty: the first round)."""

    def __init__(self, num_clients: int) -> None:
        self.num_clients = int(num_clients)
        self.history: Weights = {}

    def aggregate(self, global_weights: Weights, updates: Sequence[ClientUpdate]) -> Weights:
        new, self.history = fedgh_official(global_weights, updates, self.history, self.num_clients)
        return new

    def state_dict(self) -> dict[str, Any]:
        return {"history": {key: value.copy() for key, value in self.history.items()}}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.history = {key: np.array(value, np.float64, copy=True) for key, value in state.get("history", {}).items()}
