"""FedProx: the proximal term by hand, anchored at the weights the round started from."""

from __future__ import annotations

import pytest
import torch

from raytune_fl.methods.base import ClientContext
from raytune_fl.methods.impl.fedprox import ProximalTerm


def test_proximal_term_is_anchored_at_round_start():
    model = torch.nn.Linear(2, 1)
    term = ProximalTerm(weight=0.5)
    term.on_round_start(ClientContext(model, 0, 1, torch.zeros(1), torch.zeros(1), lr=0.1))
    with torch.no_grad():
        model.weight.add_(torch.tensor([[1.0, -2.0]]))
        model.bias.add_(torch.tensor([3.0]))
    batch = type("B", (), {"model": model})()
    assert term.loss(batch).item() == pytest.approx(0.5 * (1 + 4 + 9))
