"""Client hooks that several methods share."""

from __future__ import annotations

import torch

from raytune_fl.methods.base import ClientContext, ClientHook


class GradientClip(ClientHook):
    """Clips the global 2-norm of the gradients before each step (FedAlign's and FedDyn's official code: 10)."""

    name = "clip_grad_norm"

    def __init__(self, max_norm: float) -> None:
        self.max_norm = float(max_norm)

    def after_backward(self, ctx: ClientContext) -> None:
        grads = [p for p in ctx.model.parameters() if p.grad is not None]
        torch.nn.utils.clip_grad_norm_(grads, self.max_norm)
