"""What the personalised methods' tests (Ditto, APFL, pFedMe) share: a 2-in, 2-class linear model small enough to
differentiate by hand, its cross-entropy gradient written out in numpy, and one local round of a method on it."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from raytune_fl.engine.local import LocalData, LocalSettings, train_local
from raytune_fl.methods import build_method
from raytune_fl.methods.base import ClientContext
from raytune_fl.types import Weights
from raytune_fl.weights import read_weights

X = np.array([[1.0, 2.0], [-1.0, 0.5], [0.5, -1.5], [2.0, 1.0]])
Y = np.array([0, 1, 1, 0])
W0 = {"classifier.weight": np.array([[0.2, -0.1], [0.05, 0.3]]), "classifier.bias": np.array([0.1, -0.2])}


class Linear2(nn.Module):
    """logits = W x + b; the representation z is x itself (the loop's model contract: (logits, z))."""

    def __init__(self) -> None:
        super().__init__()
        self.classifier = nn.Linear(2, 2)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        return self.classifier(x), x


def ce_grad(weights: Weights) -> Weights:
    """d mean CE / d (W, b) over X, Y by hand: (softmax(W x + b) - onehot(y)) x^T, averaged over samples."""
    logits = X @ weights["classifier.weight"].T + weights["classifier.bias"]
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    err = (p - np.eye(2)[Y]) / len(Y)
    return {"classifier.weight": err.T @ X, "classifier.bias": err.sum(axis=0)}


def one_round(
    name: str, params: dict[str, Any], state: dict | None = None, lr: float = 0.1, steps: int = 1
) -> tuple[Weights, ClientContext]:
    """`steps` local steps of `name` from W0 (float64, one batch of all four samples a step, no momentum): the
    trained w and the client's context (its new_state)."""
    torch.set_default_dtype(torch.float64)
    try:
        model = Linear2()
    finally:
        torch.set_default_dtype(torch.float32)
    model.load_state_dict({k: torch.from_numpy(v) for k, v in W0.items()})
    x, y = torch.from_numpy(X), torch.from_numpy(Y)
    ctx = ClientContext(model, client_id=0, round_index=1, x=x, y=y, lr=lr, state=state or {})
    settings = LocalSettings(epochs=steps, batch_size=4, lr=lr, momentum=0.0, weight_decay=0.0)
    method = build_method(name, params, 2)
    train_local(model, method, LocalData(x, y, 2), settings, torch.Generator().manual_seed(0), client=ctx)
    return read_weights(model), ctx


def step(weights: Weights, grads: Weights, lr: float) -> Weights:
    return {k: weights[k] - lr * grads[k] for k in weights}
