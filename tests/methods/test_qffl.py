"""q-FFL: the fair aggregation by hand and its guards, FedAvg at q = 0, the hook that measures the global model's
loss, and q = 0 end to end on real training."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from raytune_fl.aggregators.fedavg import fedavg
from raytune_fl.aggregators.qffl import qffl
from raytune_fl.methods import build_method
from raytune_fl.methods.base import ClientContext
from raytune_fl.methods.impl.qffl import GlobalLoss
from tests.support.methods import GLOBAL, MODEL
from tests.support.methods import assert_bit_equal as _assert_bit_equal
from tests.support.methods import f32 as _f32
from tests.support.methods import initial_weights as _initial
from tests.support.methods import random_updates as _random_updates
from tests.support.methods import three_client_data as _data
from tests.support.methods import three_client_worker as _worker
from tests.support.methods import update as _update


def test_qffl_with_q_zero_is_fedavg_exactly():
    updates = _random_updates(3)
    losses = np.random.default_rng(3).uniform(0.0, 5.0, len(updates))
    losses[1] = 0.0  # F = 0 is harmless at q = 0 (F^0 = 1)
    _assert_bit_equal(qffl(GLOBAL, updates, losses, 0.0, 0.05), fedavg(GLOBAL, updates))


def test_qffl_by_hand():
    # lr = 0.5 -> L = 2; q = 2
    # client 0: n = 1, F = 1, delta = [-0.5, 0] -> dw = -L delta = [1, 0], ||dw||^2 = 1
    #   Delta = 1^2 [1, 0] = [1, 0];  h = 2 * 1^1 * 1 + 2 * 1^2 = 4
    # client 1: n = 3, F = 2, delta = [0, 1] -> dw = [0, -2], ||dw||^2 = 4
    #   Delta = 2^2 [0, -2] = [0, -8];  h = 2 * 2^1 * 4 + 2 * 2^2 = 24
    # p = [1/4, 3/4]: sum p Delta = [1/4, -6];  sum p h = 1 + 18 = 19
    # w = [1, 1] - [1/4, -6] / 19 = [1 - 1/76, 1 + 6/19]
    updates = [_update(0, 1, {"w": [-0.5, 0.0]}), _update(1, 3, {"w": [0.0, 1.0]})]
    new = qffl({"w": _f32([1.0, 1.0])}, updates, [1.0, 2.0], q=2.0, lr=0.5)
    np.testing.assert_allclose(new["w"], [1 - 1 / 76, 1 + 6 / 19], rtol=1e-6)
    # FedAvg would give [1 - 1/8, 1 + 3/4]: q > 0 leans towards client 1, where the loss is higher
    np.testing.assert_allclose(fedavg({"w": _f32([1.0, 1.0])}, updates)["w"], [0.875, 1.75])


def test_qffl_guards():
    a = _update(0, 2, {"w": [1.0, -1.0]})
    b = _update(1, 1, {"w": [0.5, 2.0]})
    w_t = {"w": _f32([0.0, 0.0])}
    # F_a = 0 with q < 1: F^(q-1) is infinite; client a contributes nothing, as if b were alone
    np.testing.assert_allclose(qffl(w_t, [a, b], [0.0, 1.5], 0.5, 0.1)["w"], qffl(w_t, [b], [1.5], 0.5, 0.1)["w"])
    # b alone, q = 0.5, L = 10: Delta / h = F^q (-L d) / (q F^(q-1) L^2 |d|^2 + L F^q) = -d / (q L |d|^2 / F + 1)
    # |d|^2 = 4.25, F = 1.5: -d / (0.5 * 10 * 4.25 / 1.5 + 1) = -d / (15.1666..) ; w = d / 15.1666..
    np.testing.assert_allclose(qffl(w_t, [b], [1.5], 0.5, 0.1)["w"], np.array([0.5, 2.0]) / (21.25 / 1.5 + 1))
    # every client at zero loss with q > 0: sum h = 0, the weights stay put
    assert np.array_equal(qffl(w_t, [a, b], [0.0, 0.0], 2.0, 0.1)["w"], w_t["w"])
    with pytest.raises(ValueError, match="reported a loss of -1.0"):
        qffl(w_t, [a], [-1.0], 1.0, 0.1)


@pytest.mark.parametrize("q", [-1.0, float("nan"), float("inf"), "1"])
def test_qffl_validates_q(q):
    with pytest.raises(ValueError, match="q: must be"):
        build_method("qffl", {"q": q}, 10)


def test_qffl_hook_reports_the_global_models_loss_and_restores_train_mode():
    torch.manual_seed(0)
    model = MODEL.build()
    x, y, _ = _data()
    x, y = torch.from_numpy(x), torch.from_numpy(y)
    model.eval()
    with torch.no_grad():
        expected = F.cross_entropy(model(x)[0].double(), y).item()
    model.train()
    hook = GlobalLoss()
    hook.batch_size = 7  # 62 samples: eight full batches and a partial one
    ctx = ClientContext(model, 0, 1, x, y, lr=0.05)
    hook.on_round_start(ctx)
    assert model.training
    assert isinstance(ctx.extras["qffl"], np.floating)
    assert float(ctx.extras["qffl"]) == pytest.approx(expected, rel=1e-6)


def test_qffl_end_to_end_q_zero_trains_and_aggregates_as_fedavg():
    weights = _initial()
    ours, theirs = _worker("qffl", {"q": 0.0}), _worker("fedavg")
    updates = [ours.train(cid, 1, weights) for cid in (0, 1)]
    reference = [theirs.train(cid, 1, weights) for cid in (0, 1)]
    for a, b in zip(updates, reference):
        _assert_bit_equal(a.delta, b.delta)  # measuring F_k disturbs neither BatchNorm nor the random stream
        assert float(a.extras["qffl"]) > 0
    server = build_method("qffl", {"q": 0.0}, ours.spec.method_context(3))
    _assert_bit_equal(server.aggregate(weights, updates), fedavg(weights, reference))
    fair = build_method("qffl", {"q": 1.0}, ours.spec.method_context(3)).aggregate(weights, updates)
    assert not np.allclose(fair["classifier.weight"], fedavg(weights, reference)["classifier.weight"])
