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
    per_client = ("anchors",)

    def on_round_start(self, ctx: ClientContext) -> None:
        # w_t: the global weights this round started from, frozen for the whole local run. The trainable ones are
        # named here, not filtered by requires_grad per step: inside a vectorised step (engine/batched.py) the
        # parameters are stand-ins that do not carry the flag.
        self.names = [name for name, p in ctx.model.named_parameters() if p.requires_grad]
        params = dict(ctx.model.named_parameters())
        self.anchors = [params[name].detach().clone() for name in self.names]

    def loss(self, batch: Batch) -> Tensor:
        params = dict(batch.model.named_parameters())
        return proximal([params[name] for name in self.names], self.anchors)


def build(params: dict[str, Any], context: MethodContext) -> Method:
    # proximal() is already 0.5 * ||w - w_t||^2, so the term weight is mu itself
    return Method("fedprox", active([ProximalTerm(params["mu"])]), Stateless(fedavg))
