"""A model scored again on arrays: what logged accuracies are checked against."""

from __future__ import annotations

import numpy as np
import torch


def accuracy(model: torch.nn.Module, x: np.ndarray, y: np.ndarray) -> float:
    with torch.no_grad():
        logits = model(torch.from_numpy(x))
    return float((logits.argmax(dim=1).numpy() == y).sum()) / len(y)
