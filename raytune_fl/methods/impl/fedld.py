"""FedLD's code: the margin term and the principal-gradient server (raytune_fl.methods.fedld explains the method)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from torch import Tensor

from raytune_fl.aggregators.principal import Fidelity, principal_gradient
from raytune_fl.methods.base import Batch, LocalTerm, ServerAggregator
from raytune_fl.methods.losses import margin_control
from raytune_fl.types import ClientUpdate, Weights


class MarginControl(LocalTerm):
    name = "margin"

    def __init__(self, weight: float, fidelity: Fidelity = "paper") -> None:
        super().__init__(weight)
        self.fidelity = fidelity
        # the official form's one Frobenius norm over the whole batch couples its samples; the paper's is per sample
        self.per_sample = fidelity == "paper"

    def loss(self, batch: Batch) -> Tensor:
        return margin_control(batch.logits, self.fidelity)


class PrincipalGradient(ServerAggregator):
    """The principal-gradient aggregator; it counts its rounds (the official variant plain-averages the first)."""

    def __init__(self, fraction: float = 0.8, fidelity: Fidelity = "paper") -> None:
        self.fraction, self.fidelity = fraction, fidelity
        self.rounds = 0

    def aggregate(self, global_weights: Weights, updates: Sequence[ClientUpdate]) -> Weights:
        new = principal_gradient(
            global_weights, updates, fraction=self.fraction, fidelity=self.fidelity, first_round=self.rounds == 0
        )
        self.rounds += 1
        return new

    def state_dict(self) -> dict[str, Any]:
        return {"rounds": self.rounds}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.rounds = int(state["rounds"])
