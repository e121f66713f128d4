"""SCAFFOLD: the control-variate updates and the server's step by hand, the correction through the hook and SGD on a
scalar, and client and server state through partial participation on real training."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch

from raytune_fl.aggregators.fednova import effective_steps
from raytune_fl.aggregators.scaffold import client_control_update, server_control_update
from raytune_fl.methods import build_method
from raytune_fl.methods.base import ClientContext
from raytune_fl.methods.impl.scaffold import ScaffoldCorrection, ScaffoldServer
from raytune_fl.types import ClientUpdate
from tests.support.methods import SETTINGS
from tests.support.methods import assert_bit_equal as _assert_bit_equal
from tests.support.methods import f32 as _f32
from tests.support.methods import initial_weights as _initial
from tests.support.methods import three_client_worker as _worker
from tests.support.methods import update as _update


class Scalar(torch.nn.Module):
    """F(w) = 6 w: the gradient is 6 wherever w is (docs/explanation/methods.md#scaffold's check by hand)."""

    def __init__(self, w: float) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.tensor(w))


def _scalar_round(state: dict, payload: dict, steps: int = 1, momentum: float = 0.0) -> tuple[float, ClientContext]:
    model = Scalar(3.0)
    ctx = ClientContext(model, 0, 1, torch.zeros(1), torch.zeros(1), lr=0.1, state=state, payload=payload)
    hook = ScaffoldCorrection(momentum)
    hook.on_round_start(ctx)
    optimizer = torch.optim.SGD([model.w], lr=0.1, momentum=momentum)  # as the loop: built after on_round_start
    for _ in range(steps):
        optimizer.zero_grad()
        (6 * model.w).backward()
        hook.after_backward(ctx)
        optimizer.step()
        ctx.steps += 1
    hook.on_round_end(ctx)
    return model.w.item(), ctx


def test_scaffold_worked_check_through_the_hook_and_sgd():
    w, ctx = _scalar_round({"scaffold": {"w": _f32(4.5)}}, {"scaffold": {"w": _f32(2.0)}})
    # w - lr (g - c_i + c) = 3 - 0.1 * (6 - 4.5 + 2) = 3 - 0.35 = 2.65
    assert w == pytest.approx(2.65, abs=1e-6)
    # c_i+ = c_i - c + (w_t - w) / (K lr) = 4.5 - 2 + 0.35 / 0.1 = 6 (one step: exactly the gradient at w_t)
    assert float(ctx.new_state["scaffold"]["w"]) == pytest.approx(6.0, abs=1e-5)
    assert float(ctx.extras["scaffold"]["w"]) == pytest.approx(1.5, abs=1e-5)  # 6 - 4.5
    assert isinstance(ctx.new_state["scaffold"]["w"], np.ndarray)
    plain, fresh = _scalar_round({}, {})  # c = c_i = 0: plain SGD, 3 - 0.1 * 6 = 2.4
    assert plain == pytest.approx(2.4, abs=1e-6)
    assert float(fresh.new_state["scaffold"]["w"]) == pytest.approx(6.0, abs=1e-5)  # 0 - 0 + 0.6 / 0.1


def test_scaffold_with_momentum_still_estimates_the_gradient():
    # constant g = 6, momentum 0.5, 3 steps: the buffer is 6, 9, 10.5, so w = 3 - 0.1 * 25.5 = 0.45
    w, ctx = _scalar_round({}, {}, steps=3, momentum=0.5)
    assert w == pytest.approx(0.45, abs=1e-5)
    # a_3 = 1 + 1.5 + 1.75 = 4.25: c_i+ = 2.55 / (4.25 * 0.1) = 6, the gradient (K = 3 would give 8.5)
    assert float(ctx.new_state["scaffold"]["w"]) == pytest.approx(6.0, abs=1e-4)


def test_scaffold_control_updates_by_hand():
    c_i, c = {"w": _f32([1.0, -1.0])}, {"w": _f32([0.5, 0.5])}
    start, end = {"w": _f32([2.0, 2.0])}, {"w": _f32([1.0, 3.0])}
    # K = 4, lr = 0.25: (w_t - w) / 1 = [1, -1]; c_i+ = [1 - 0.5 + 1, -1 - 0.5 - 1] = [1.5, -2.5]
    np.testing.assert_allclose(client_control_update(c_i, c, start, end, 4, 0.25)["w"], [1.5, -2.5])
    # momentum 0.5, K = 2: a_2 = 2.5; (w_t - w) / (2.5 * 0.25) = [1.6, -1.6]; c_i+ = [2.1, -3.1]
    np.testing.assert_allclose(client_control_update(c_i, c, start, end, 2, 0.25, 0.5)["w"], [2.1, -3.1], rtol=1e-6)
    # no local step: nothing to estimate from, c_i is kept
    np.testing.assert_array_equal(client_control_update(c_i, c, start, end, 0, 0.25)["w"], c_i["w"])
    # |S| = 2 of N = 4: c + (2/4) * mean([1.5, -0.5]) = 2 + 0.5 * 0.5 = 2.25
    moved = server_control_update({"w": _f32(2.0)}, [{"w": _f32(1.5)}, {"w": _f32(-0.5)}], 4)
    assert float(moved["w"]) == pytest.approx(2.25)
    # from an empty c (zeros): 0 + (3/3) * mean([3, 0, 0]) = 1
    assert float(server_control_update({}, [{"w": _f32(3.0)}, {"w": _f32(0.0)}, {"w": _f32(0.0)}], 3)["w"]) == 1.0


def test_scaffold_server_averages_weights_like_fedavg_and_keeps_c():
    server = ScaffoldServer(num_clients=4)
    server.load_state_dict({"c": {"w": _f32([2.0])}})
    updates = [
        _update(1, 3, {"w": [4.0]}, extras={"scaffold": {"w": _f32([-0.5])}}),
        _update(0, 1, {"w": [0.0]}, extras={"scaffold": {"w": _f32([1.5])}}),
    ]
    new = server.aggregate({"w": _f32([1.0])}, updates)
    assert float(new["w"][0]) == 4.0  # sample-weighted: 1 + (1/4 * 0 + 3/4 * 4)
    assert float(server.payload()["scaffold"]["w"][0]) == pytest.approx(2.25)  # as by hand above
    copy = ScaffoldServer(num_clients=4)
    copy.load_state_dict(pickle.loads(pickle.dumps(server.state_dict())))
    assert float(copy.payload()["scaffold"]["w"][0]) == pytest.approx(2.25)
    with pytest.raises(ValueError, match=r"clients \[0\] sent no control-variate delta"):
        server.aggregate({"w": _f32([1.0])}, [_update(0, 1, {"w": [0.0]})])


def _check_option_two(update: ClientUpdate, c_i: dict, c: dict) -> None:
    """c_i+ = c_i - c + (w_t - w) / (a_K lr), with w - w_t read off the update's own delta."""
    new = update.state["scaffold"]
    assert new.keys() == c_i.keys()
    for name, value in new.items():
        a_k = effective_steps(update.num_steps, SETTINGS.momentum)  # momentum 0.9: not K, see the test above
        expected = c_i[name] - c.get(name, 0.0) - update.delta[name] / (a_k * SETTINGS.lr)
        np.testing.assert_allclose(value, expected, rtol=1e-4, atol=1e-5, err_msg=name)
        np.testing.assert_allclose(update.extras["scaffold"][name], value - c_i[name], rtol=1e-5, atol=1e-6)


def test_scaffold_state_round_trips_with_partial_participation():
    worker, weights = _worker("scaffold"), _initial()
    server = build_method("scaffold", {}, worker.spec.method_context(3))
    # a fresh client (c = c_i = 0) trains exactly as FedAvg's
    reference = _worker("fedavg").train(0, 1, weights)
    states: dict[int, dict] = {}
    payload = server.aggregator.payload()
    first = [worker.train(cid, 1, weights, payload, states.get(cid)) for cid in (0, 1)]
    _assert_bit_equal(first[0].delta, reference.delta)
    params = [name for name, _ in worker.model.named_parameters()]
    zeros = {name: np.zeros_like(weights[name]) for name in params}
    for update in first:
        _check_option_two(update, zeros, {})
        states[update.client_id] = update.state
    weights = server.aggregate(weights, first)
    c = server.aggregator.payload()["scaffold"]
    for name in params:  # |S|/N * mean = (2/3) * (d0 + d1) / 2, and the deltas are the new c_i here
        moved = (first[0].extras["scaffold"][name] + first[1].extras["scaffold"][name]) / 3
        np.testing.assert_allclose(c[name], moved, rtol=1e-5, atol=1e-7)

    # round 2: client 0 sits out; client 1 resumes from its c_i, client 2 starts fresh
    state_0 = pickle.loads(pickle.dumps(states[0]))
    payload = pickle.loads(pickle.dumps(server.aggregator.payload()))  # what Ray would ship
    second = [worker.train(cid, 2, weights, payload, states.get(cid)) for cid in (1, 2)]
    _check_option_two(second[0], states[1]["scaffold"], c)
    _check_option_two(second[1], zeros, c)
    # the correction c - c_i is really applied: client 1 no longer trains like FedAvg
    plain = _worker("fedavg").train(1, 2, weights)
    assert not np.allclose(plain.delta["classifier.weight"], second[0].delta["classifier.weight"])
    for update in second:
        states[update.client_id] = update.state
    weights = server.aggregate(weights, second)
    c2 = server.aggregator.payload()["scaffold"]
    for name in params:  # c += (2/3) * mean of clients 1 and 2's deltas
        moved = c[name] + (second[0].extras["scaffold"][name] + second[1].extras["scaffold"][name]) / 3
        np.testing.assert_allclose(c2[name], moved, rtol=1e-5, atol=1e-7)
    _assert_bit_equal(states[0]["scaffold"], state_0["scaffold"])  # untouched while client 0 skipped

    # round 3: client 0 comes back with its round-1 c_i, on a fresh worker (an actor restart)
    third = _worker("scaffold").train(0, 3, weights, server.aggregator.payload(), states[0])
    _check_option_two(third, state_0["scaffold"], c2)
