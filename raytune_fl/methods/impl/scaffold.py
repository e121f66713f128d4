"""SCAFFOLD's code: the gradient correction and the server's control variate (raytune_fl.methods.scaffold
explains the method)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from raytune_fl.aggregators.fedavg import fedavg
from raytune_fl.aggregators.scaffold import client_control_update, server_control_update
from raytune_fl.methods.base import ClientContext, ClientHook, ServerAggregator
from raytune_fl.types import ClientUpdate, Weights
from raytune_fl.weights import numpy_copy

NAME = "scaffold"


def _or_zeros(variate: Mapping[str, np.ndarray] | None, like: Weights) -> Weights:
    variate = variate or {}
    return {name: np.asarray(variate[name]) if name in variate else np.zeros_like(w) for name, w in like.items()}


class ScaffoldCorrection(ClientHook):
    name = NAME

    def __init__(self, momentum: float = 0.0) -> None:
        self.momentum = momentum  # the clients' SGD momentum, for the effective step count

    def on_round_start(self, ctx: ClientContext) -> None:
        self.stacked_correction: dict[str, torch.Tensor] | None = None
        self.params = {name: p for name, p in ctx.model.named_parameters() if p.requires_grad}
        self.start = numpy_copy(self.params)  # w_t
        self.c_i = _or_zeros(ctx.state.get(self.name), self.start)
        self.c = _or_zeros(ctx.payload.get(self.name), self.start)
        # c - c_i is fixed for the whole round: build it once, on the parameters' device and dtype
        self.correction = {
            name: torch.as_tensor(self.c[name] - self.c_i[name], dtype=p.dtype, device=p.device)
            for name, p in self.params.items()
        }

    def after_backward(self, ctx: ClientContext) -> None:
        for name, p in self.params.items():
            if p.grad is not None:
                p.grad.add_(self.correction[name])

    def after_backward_batched(self, hooks: Sequence[ClientHook], grads: Mapping[str, torch.Tensor]) -> None:
        stacked = self.stacked_correction
        if stacked is None:  # once a round: every client's c - c_i along the first dimension
            stacked = {name: torch.stack([h.correction[name] for h in hooks]) for name in grads}  # type: ignore[attr-defined]
            self.stacked_correction = stacked
        for name, grad in grads.items():
            grad.add_(stacked[name])

    def on_round_end(self, ctx: ClientContext) -> None:
        self.stacked_correction = None
        new = client_control_update(
            self.c_i, self.c, self.start, numpy_copy(self.params), ctx.steps, ctx.lr, self.momentum
        )
        ctx.new_state[self.name] = new
        ctx.extras[self.name] = {name: new[name] - self.c_i[name] for name in new}
        self.correction = {}


class ScaffoldServer(ServerAggregator):
    """FedAvg on the weights; holds and updates the server control variate c."""

    def __init__(self, num_clients: int) -> None:
        self.num_clients = num_clients
        self.c: Weights = {}  # empty: zeros, until the first round's deltas arrive

    def aggregate(self, global_weights: Weights, updates: Sequence[ClientUpdate]) -> Weights:
        new = fedavg(global_weights, updates)
        missing = [u.client_id for u in updates if NAME not in u.extras]
        if missing:
            raise ValueError(f"SCAFFOLD: clients {missing} sent no control-variate delta (extras[{NAME!r}])")
        self.c = server_control_update(self.c, [u.extras[NAME] for u in updates], self.num_clients)
        return new

    def payload(self) -> dict[str, Any]:
        return {NAME: self.c}

    def state_dict(self) -> dict[str, Any]:
        return {"c": {name: value.copy() for name, value in self.c.items()}}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.c = {name: np.array(value, copy=True) for name, value in state.get("c", {}).items()}
