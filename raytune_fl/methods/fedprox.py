"""FedProx (Li et al. 2020): adds (mu/2) * ||w - w_t||^2 over trainable parameters."""

from __future__ import annotations

from typing import Any

from torch import Tensor

from raytune_fl.aggregators import fedavg
from raytune_fl.methods.base import (
    Batch,
    ClientContext,
    LocalTerm,
    Method,
    MethodContext,
    Stateless,
    active,
)
from raytune_fl.methods.losses import proximal


class ProximalTerm(LocalTerm):
    name = "proximal"

    def on_round_start(self, ctx: ClientContext) -> None:
        # w_t: the global weights this round started from, frozen for the whole local run
        self.anchors = [p.detach().clone() for p in ctx.model.parameters() if p.requires_grad]

    def loss(self, batch: Batch) -> Tensor:
        params = [p for p in batch.model.parameters() if p.requires_grad]
        return proximal(params, self.anchors)


def build(params: dict[str, Any], context: MethodContext) -> Method:
    # proximal() is already 0.5 * ||w - w_t||^2, so the term weight is mu itself
    return Method("fedprox", active([ProximalTerm(params["mu"])]), Stateless(fedavg))
