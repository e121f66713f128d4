"""Client hooks that several methods share."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

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

    def after_backward_batched(self, hooks: Sequence[ClientHook], grads: Mapping[str, torch.Tensor]) -> None:
        # clip_grad_norm_ per client: each row's norm over all its gradients, the same coefficient formula
        stacked = list(grads.values())
        norms = torch.stack([torch.linalg.vector_norm(g.flatten(1), 2, dim=1) for g in stacked])
        total = torch.linalg.vector_norm(norms, 2, dim=0)
        coefficient = (self.max_norm / (total + 1e-6)).clamp(max=1.0)
        for g in stacked:
            g.mul_(coefficient.view(-1, *([1] * (g.dim() - 1))))
