"""FedProx's proximal term (raytune_fl.methods.fedprox explains the method)."""

from __future__ import annotations

from torch import Tensor

from raytune_fl.methods.base import Batch, ClientContext, LocalTerm
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
