"""FedAvgM's server: the velocity v, server state (raytune_fl.methods.fedavgm explains the method)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from raytune_fl.aggregators.fedavgm import fedavgm
from raytune_fl.methods.base import ServerAggregator
from raytune_fl.types import ClientUpdate, Weights


class ServerMomentum(ServerAggregator):
    def __init__(self, server_momentum: float, server_lr: float) -> None:
        self.server_momentum = float(server_momentum)
        self.server_lr = float(server_lr)
        self.velocity: Weights = {}  # empty: zeros

    def aggregate(self, global_weights: Weights, updates: Sequence[ClientUpdate]) -> Weights:
        new, self.velocity = fedavgm(global_weights, updates, self.velocity, self.server_momentum, self.server_lr)
        return new

    def state_dict(self) -> dict[str, Any]:
        return {"velocity": {key: value.copy() for key, value in self.velocity.items()}}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.velocity = {key: np.array(value, copy=True) for key, value in state.get("velocity", {}).items()}
