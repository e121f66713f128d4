"""pFedMe's personal model theta and the local step it sets (raytune_fl.methods.pfedme explains the method)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor, nn

from raytune_fl.methods.base import ClientContext
from raytune_fl.methods.personal_model import PersonalModel, cross_entropy, own_weights, squared_distance
from raytune_fl.types import Weights


class MoreauPersonal(PersonalModel):
    """theta's objective f(theta; batch) + (lambda / 2) ||theta - w||^2, w detached as it stands at the step."""

    name = "pfedme"
    starts_from_state = False  # theta starts at w^t each round (the official code's set_parameters)

    def __init__(self, lam: float, inner_steps: int, lr: float) -> None:
        super().__init__(lr)
        self.lam, self.inner_steps = lam, inner_steps

    def objective(self, model: nn.Module, x: Tensor, y: Tensor) -> Tensor:
        w = dict(model.named_parameters())
        ce = cross_entropy(self.forward(model, x, self.params), y)
        anchors = {name: w[name].detach() for name in self.params}
        return ce + 0.5 * self.lam * squared_distance(self.params, anchors)

    def after_backward(self, ctx: ClientContext) -> None:
        self.step()  # inner step 1, with the gradient `loss` took
        assert self.last_x is not None and self.last_y is not None  # set by `loss`, which ran before this step
        for _ in range(self.inner_steps - 1):
            value = self.objective(ctx.model, self.last_x, self.last_y)  # the step's batch again
            self.grads = list(torch.autograd.grad(value, self.trained()))
            self.step()
        with torch.no_grad():  # w's step is eta lambda (w - theta): the cross-entropy's gradient is dropped
            for name, w in ctx.model.named_parameters():
                if w.grad is not None:
                    w.grad.copy_(self.lam * (w - self.params[name]))


def personal_model(global_weights: Weights, state: Mapping[str, Any]) -> Weights:
    """The client's theta after its last local step (none yet: the global weights)."""
    return own_weights(global_weights, state, MoreauPersonal.name)
