"""FedGH (Zhang, Sun, Chen 2023): gradient harmonization on the server, no local term, no client state.

Paper (`fidelity: paper`): conflicting pairs of client deltas (negative inner product of the whole flattened
trainable delta) are each projected onto the normal plane of the other's original delta, in client-id order,
then the sample-weighted mean is applied; BatchNorm statistics are averaged. No setting makes it FedAvg in
general (so `as_fedavg` is None), but whenever no pair of deltas conflicts, identical updates included, its
round is FedAvg's exactly.

`fidelity: official`: FedLD's code's version, per tensor and unweighted: a plain mean in the first round, then
deltas ranked by their projection on an EMA (0.99) of past steps, highest paired with lowest, pairs projected
and summed until two remain, divided by the number of clients. The EMA is server state (checkpointed).
Both in raytune_fl.aggregators.fedgh.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from raytune_fl.aggregators.fedgh import fedgh, fedgh_official
from raytune_fl.methods.base import Method, MethodContext, ServerAggregator, Stateless
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


def build(params: dict[str, Any], context: MethodContext) -> Method:
    official = params["fidelity"] == "official"
    return Method("fedgh", (), OfficialHarmonization(context.num_clients) if official else Stateless(fedgh))
