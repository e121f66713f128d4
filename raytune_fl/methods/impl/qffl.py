"""q-FFL's code: the global-model loss hook and the fair aggregator (raytune_fl.methods.qffl explains the method)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
import torch.nn.functional as F

from raytune_fl.aggregators.qffl import qffl
from raytune_fl.methods.base import ClientContext, ClientHook, ServerAggregator
from raytune_fl.types import ClientUpdate, Weights

NAME = "qffl"


class GlobalLoss(ClientHook):
    """F_k: the global model's mean cross-entropy on this client's data, measured before any local step."""

    name = NAME
    per_sample = False  # reports the client's loss over all its data, with no noise
    batch_size = 512  # evaluation only: no gradients kept, so larger than a training batch

    @torch.no_grad()
    def on_round_start(self, ctx: ClientContext) -> None:
        was_training = ctx.model.training
        ctx.model.eval()  # BatchNorm's running statistics: the global model as it is, not updated by this pass
        try:
            # summed on the device in float64, in batch order (the same additions as a Python float's), and read
            # once: no device-to-host sync per batch
            total: torch.Tensor | None = None
            for start in range(0, ctx.x.shape[0], self.batch_size):
                logits, _ = ctx.model(ctx.x[start : start + self.batch_size])
                y = ctx.y[start : start + self.batch_size]
                loss = F.cross_entropy(logits.double(), y, reduction="sum")
                total = loss if total is None else total + loss
        finally:
            ctx.model.train(was_training)
        summed = 0.0 if total is None else total.item()
        ctx.extras[self.name] = np.float64(summed / max(ctx.x.shape[0], 1))


class QFairAggregator(ServerAggregator):
    def __init__(self, q: float, lr: float, momentum: float = 0.0, lipschitz: str = "per_step") -> None:
        self.q = float(q)
        self.lr = float(lr)
        self.momentum = float(momentum)  # the clients' SGD momentum: their effective local step counts
        self.lipschitz = lipschitz

    def aggregate(self, global_weights: Weights, updates: Sequence[ClientUpdate]) -> Weights:
        missing = [u.client_id for u in updates if NAME not in u.extras]
        if missing:
            raise ValueError(f"q-FFL: clients {missing} sent no global-model loss (extras[{NAME!r}])")
        losses = [float(u.extras[NAME]) for u in updates]
        return qffl(global_weights, updates, losses, self.q, self.lr, self.momentum, self.lipschitz)
