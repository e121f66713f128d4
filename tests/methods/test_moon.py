"""MOON: the model-contrastive loss by hand, the term running the global and previous models, the previous model
kept as per-client state through ClientWorker, mu = 0 as FedAvg, refusals."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

from raytune_fl.aggregators import fedavg
from raytune_fl.methods import METHODS, build_method
from raytune_fl.methods.base import Batch, ClientContext
from raytune_fl.methods.impl.moon import ModelContrastiveTerm, model_contrastive
from raytune_fl.weights import read_weights as _weights_of
from tests.support.methods import assert_bit_equal as _assert_same
from tests.support.methods import initial_weights as _initial
from tests.support.methods import through_pickle as _through_pickle
from tests.support.methods import two_client_worker as _worker

# rows: sample 1 has cos(z, z_glob) = 1/sqrt(2), cos(z, z_prev) = 0; sample 2 has 0 and 1
Z = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
Z_GLOB = torch.tensor([[1.0, 1.0], [3.0, 0.0]])
Z_PREV = torch.tensor([[0.0, 1.0], [0.0, 5.0]])
TAU = 0.5


def _moon_by_hand() -> float:
    a1, b1 = (1 / math.sqrt(2)) / TAU, 0.0 / TAU  # sample 1: sqrt(2) and 0
    a2, b2 = 0.0 / TAU, 1.0 / TAU  # sample 2: 0 and 2
    l1 = -math.log(math.exp(a1) / (math.exp(a1) + math.exp(b1)))  # = log(1 + e^-sqrt(2)) ~ 0.2169
    l2 = -math.log(math.exp(a2) / (math.exp(a2) + math.exp(b2)))  # = log(1 + e^2) ~ 2.1269
    return (l1 + l2) / 2


def test_model_contrastive_by_hand():
    assert model_contrastive(Z, Z_GLOB, Z_PREV, TAU).item() == pytest.approx(_moon_by_hand(), rel=1e-6)
    assert _moon_by_hand() == pytest.approx((math.log1p(math.exp(-math.sqrt(2))) + math.log1p(math.exp(2))) / 2)


class _Linear2(nn.Module):
    """z = x W^T, returned as (logits, z) like every model."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(2, 2, bias=False)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        z = self.lin(x)
        return z, z


def test_moon_term_runs_the_global_and_previous_models():
    model = _Linear2()
    with torch.no_grad():
        model.lin.weight.copy_(torch.eye(2))  # global model: z_glob = x
    x = Z_GLOB.clone()
    # previous model W with x W^T = Z_PREV: [1, 1] -> [0, 1] and [3, 0] -> [0, 5]
    previous = {"lin.weight": np.array([[0.0, 0.0], [5 / 3, -2 / 3]], np.float32)}
    term = ModelContrastiveTerm(weight=1.0, tau=TAU)
    ctx = ClientContext(model, 0, 2, x, torch.zeros(2), lr=0.1, state={"contrastive": previous})
    term.on_round_start(ctx)
    batch = Batch(x, torch.zeros(2), Z, Z, model, 2)
    assert term.loss(batch).item() == pytest.approx(_moon_by_hand(), rel=1e-5)

    twin = term._global
    term.on_round_start(ClientContext(model, 1, 1, x, torch.zeros(2), lr=0.1))  # a first-timer: no previous
    assert term._global is twin  # the frozen copy is cached and reloaded, not deep-copied again
    assert term.loss(batch).item() == 0.0


def test_moon_first_round_is_zero_and_state_is_the_trained_model():
    worker = _worker("moon")
    w0 = _initial()
    first = worker.train(0, 1, w0)
    assert first.metrics["term_contrastive"] == 0.0
    assert first.num_steps == 2 and np.isfinite(first.metrics["loss"])
    assert np.abs(first.delta["classifier.weight"]).max() > 0  # training happened
    # a zero term changes nothing: the first round is exactly FedAvg's
    _assert_same(first.delta, _worker("fedavg").train(0, 1, w0).delta)

    state = _through_pickle(first.state)
    assert set(state) == {"contrastive"}
    _assert_same(state["contrastive"], _weights_of(worker.model))  # every entry, BN buffers included
    assert all(isinstance(v, np.ndarray) for v in state["contrastive"].values())

    w1 = fedavg(w0, [first])
    other = _worker("moon")
    second = other.train(0, 2, w1, state=state)  # another worker object: state travels alone
    _assert_same(second.state["contrastive"], _weights_of(other.model))  # replaced by this round's model
    assert second.metrics["term_contrastive"] > 0.0
    assert np.isfinite(second.metrics["loss"])
    assert second.metrics["loss"] > second.metrics["ce"]


def test_moon_mu_zero_is_fedavg_bit_for_bit():
    w0 = _initial()
    moon, plain = _worker("moon", {"mu": 0.0}), _worker("fedavg")
    a, b = moon.train(1, 1, w0), plain.train(1, 1, w0)
    _assert_same(a.delta, b.delta)
    assert a.state is None  # the switched-off term keeps no previous model
    w1 = fedavg(w0, [b])
    _assert_same(moon.train(1, 2, w1, state=a.state).delta, plain.train(1, 2, w1).delta)
    assert METHODS.get("moon").as_fedavg == {"mu": 0.0}


@pytest.mark.parametrize(
    ("params", "message"),
    [({"tau": 0.0}, "tau: must be"), ({"tau": "hot"}, "tau: must be"), ({"mu": -1.0}, "mu: must be")],
)
def test_moon_rejects_bad_hyperparameters(params, message):
    with pytest.raises(ValueError, match=message):
        build_method("moon", params, 10)
