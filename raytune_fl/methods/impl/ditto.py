"""Ditto's personal model (raytune_fl.methods.ditto explains the method)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torch import Tensor, nn

from raytune_fl.methods.base import ClientContext
from raytune_fl.methods.personal_model import PersonalModel, cross_entropy, own_weights, squared_distance
from raytune_fl.types import Weights


class DittoPersonal(PersonalModel):
    """v's objective F_k(v) + (lambda / 2) ||v - w^t||^2: its gradient is Ditto's grad F_k(v) + lambda (v - w^t)."""

    name = "ditto"

    def __init__(self, lam: float, lr: float | None) -> None:
        super().__init__(lr)
        self.lam = lam

    def on_round_start(self, ctx: ClientContext) -> None:
        super().on_round_start(ctx)
        # w^t: the global weights this round started from, fixed for the round
        self.anchors = {name: p.detach().clone() for name, p in ctx.model.named_parameters()}

    def objective(self, model: nn.Module, x: Tensor, y: Tensor) -> Tensor:
        ce = cross_entropy(self.forward(model, x, self.params), y)
        return ce + 0.5 * self.lam * squared_distance(self.params, self.anchors)


def personal_model(global_weights: Weights, state: Mapping[str, Any]) -> Weights:
    """The client's v (none yet: the global weights)."""
    return own_weights(global_weights, state, DittoPersonal.name)
