"""APFL's personal model and mixing weight (raytune_fl.methods.apfl explains the method)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from raytune_fl.aggregators.fedavg import is_running_statistic
from raytune_fl.methods.base import ClientContext
from raytune_fl.methods.personal_model import WEIGHTS, PersonalModel, cross_entropy
from raytune_fl.types import Weights, is_float_entry

ALPHA_KEY = "alpha"  # the client's alpha in its state, beside its v


class ApflPersonal(PersonalModel):
    """v (and alpha) trained on the cross-entropy of the mixed model alpha v + (1 - alpha) w, w as it stands at the
    step (detached: no gradient reaches it)."""

    name = "apfl"

    def __init__(self, alpha: float, adaptive: bool, lr: float | None, alpha_lr: float | None) -> None:
        super().__init__(lr)
        self.initial_alpha, self.adaptive, self.personal_alpha_lr = alpha, adaptive, alpha_lr

    def on_round_start(self, ctx: ClientContext) -> None:
        super().on_round_start(ctx)
        own = ctx.state.get(self.name) or {}
        device = next(ctx.model.parameters()).device
        value = float(own.get(ALPHA_KEY, self.initial_alpha))
        self.alpha = torch.tensor(value, device=device, requires_grad=self.adaptive)
        self.alpha_lr = ctx.lr if self.personal_alpha_lr is None else self.personal_alpha_lr

    def objective(self, model: nn.Module, x: Tensor, y: Tensor) -> Tensor:
        w = dict(model.named_parameters())
        mixed = {name: self.alpha * v + (1 - self.alpha) * w[name].detach() for name, v in self.params.items()}
        return cross_entropy(self.forward(model, x, mixed), y)

    def trained(self) -> list[Tensor]:
        return [*self.params.values(), *([self.alpha] if self.adaptive else [])]

    def step(self) -> None:
        if not self.adaptive:
            super().step()
            return
        *grads, alpha_grad = self.grads
        self.grads = grads
        super().step()  # v at its own rate
        with torch.no_grad():  # alpha at alpha's, kept a share
            self.alpha.sub_(self.alpha_lr * alpha_grad).clamp_(0.0, 1.0)

    def on_round_end(self, ctx: ClientContext) -> None:
        super().on_round_end(ctx)
        ctx.new_state[self.name][ALPHA_KEY] = float(self.alpha.item())


def mixed_model(global_weights: Weights, state: Mapping[str, Any]) -> Weights:
    """The client's alpha v + (1 - alpha) w on its parameters, its own buffers (BatchNorm statistics, counts); none
    yet: the global weights."""
    own = state.get(ApflPersonal.name)
    if not own:
        return dict(global_weights)
    alpha, v = float(own[ALPHA_KEY]), own[WEIGHTS]
    out: Weights = {}
    for key, w in global_weights.items():
        if is_float_entry(w) and not is_running_statistic(key):
            out[key] = (alpha * np.asarray(v[key], dtype=np.float64) + (1 - alpha) * w).astype(w.dtype)
        else:
            out[key] = np.array(v[key])
    return out
