"""SCAFFOLD, FedNova, FedAvgM and q-FFL: aggregation maths by hand on tiny arrays, client hooks on real training."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from raytune_fl.aggregators.fedavg import fedavg
from raytune_fl.aggregators.fedavgm import fedavgm
from raytune_fl.aggregators.fednova import effective_steps, fednova
from raytune_fl.aggregators.qffl import qffl
from raytune_fl.aggregators.scaffold import client_control_update, server_control_update
from raytune_fl.engine.local import LocalSettings
from raytune_fl.engine.worker import ClientWorker, ModelSpec, WorkerSpec
from raytune_fl.methods import build_method
from raytune_fl.methods.base import ClientContext, MethodContext
from raytune_fl.methods.impl.qffl import GlobalLoss
from raytune_fl.methods.impl.scaffold import ScaffoldCorrection, ScaffoldServer
from raytune_fl.types import ClientUpdate
from raytune_fl.weights import read_weights


def _f32(values) -> np.ndarray:
    return np.asarray(values, np.float32)


def _update(cid: int, n: int, delta: dict, steps: int = 1, buffers: dict | None = None, extras=None) -> ClientUpdate:
    return ClientUpdate(cid, n, steps, {k: _f32(v) for k, v in delta.items()}, buffers or {}, {}, extras=extras or {})


def _random_updates(seed: int, count: int = 5, steps: list[int] | None = None) -> list[ClientUpdate]:
    rng = np.random.default_rng(seed)
    steps = steps or [2] * count
    sizes = rng.integers(1, 60, count)
    return [
        _update(cid, int(sizes[cid]), {"w": rng.normal(size=(3, 2)), "b": rng.normal(size=2)}, steps[cid])
        for cid in range(count)
    ]


GLOBAL = {"w": _f32(np.arange(6).reshape(3, 2)), "b": _f32([0.5, -0.5])}


def _assert_bit_equal(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for key in a:
        assert a[key].dtype == b[key].dtype, key
        assert np.array_equal(a[key], b[key]), key


# --- SCAFFOLD -----------------------------------------------------------------------------------


class Scalar(torch.nn.Module):
    """F(w) = 6 w: the gradient is 6 wherever w is (METHODS.md's worked check)."""

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


SETTINGS = LocalSettings(epochs=1, batch_size=16, lr=0.05, momentum=0.9, weight_decay=0.0)
MODEL = ModelSpec("simple_cnn", 1, 10, (8, 8))


def _data(sizes=(32, 24, 32)):
    rng = np.random.default_rng(0)
    n = sum(sizes)
    x = rng.normal(size=(n, 1, 8, 8)).astype(np.float32)
    y = rng.integers(0, 10, n).astype(np.int64)
    return x, y, np.split(np.arange(n), np.cumsum(sizes)[:-1])


def _worker(method: str, params: dict | None = None) -> ClientWorker:
    return ClientWorker(WorkerSpec(MODEL, method, params or {}, SETTINGS, seed=0), *_data())


def _initial() -> dict:
    torch.manual_seed(0)
    return read_weights(MODEL.build())


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


# --- FedNova ------------------------------------------------------------------------------------


def test_effective_steps():
    assert effective_steps(3, 0.0) == 3.0 and effective_steps(0, 0.9) == 0.0
    # rho = 0.5: 1, then + (1 - 0.25) / 0.5 = 2.5, then + (1 - 0.125) / 0.5 = 4.25
    assert [effective_steps(k, 0.5) for k in (1, 2, 3)] == pytest.approx([1.0, 2.5, 4.25])
    with pytest.raises(ValueError, match=r"momentum must be in \[0, 1\)"):
        effective_steps(1, 1.0)


def test_fednova_by_hand():
    w_t = {"w": _f32([1.0, 1.0]), "n": np.array(5, np.int64)}
    updates = [
        _update(0, 1, {"w": [3.0, -1.0]}, steps=1, buffers={"n": np.array(7, np.int64)}),
        _update(1, 1, {"w": [3.0, 3.0]}, steps=3, buffers={"n": np.array(9, np.int64)}),
    ]
    # rho = 0: a = [1, 3], p = [1/2, 1/2]; tau_eff = 2; mean delta/a = ([3, -1] + [1, 1]) / 2 = [2, 0]
    # w = [1, 1] + 2 * [2, 0] = [5, 1]   (FedAvg: [1, 1] + [3, 1] = [4, 2])
    new = fednova(w_t, updates, momentum=0.0)
    np.testing.assert_allclose(new["w"], [5.0, 1.0], rtol=1e-6)
    assert int(new["n"]) == 7  # integer buffers as FedAvg: the lowest client id's
    # rho = 0.5, steps [1, 2] -> a = [1, 2.5]; n = [3, 1] -> p = [3/4, 1/4]; tau_eff = 0.75 + 0.625 = 1.375
    # deltas [2], [0]: mean delta/a = 3/4 * 2 + 1/4 * 0 = 1.5; w = 0 + 1.375 * 1.5 = 2.0625 (FedAvg: 1.5)
    skewed = [_update(0, 3, {"w": [2.0]}, steps=1), _update(1, 1, {"w": [0.0]}, steps=2)]
    assert float(fednova({"w": _f32([0.0])}, skewed, momentum=0.5)["w"][0]) == pytest.approx(2.0625)


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_fednova_with_equal_steps_is_fedavg_exactly(momentum):
    updates = _random_updates(1, steps=[4] * 5)
    _assert_bit_equal(fednova(GLOBAL, updates, momentum), fedavg(GLOBAL, updates))
    uneven = _random_updates(1, steps=[1, 2, 3, 4, 5])
    assert not np.allclose(fednova(GLOBAL, uneven, momentum)["w"], fedavg(GLOBAL, uneven)["w"])


def test_fednova_client_without_steps_contributes_nothing():
    # client 1 took no step (a = 0): its terms in both sums are 0 (0/0 guarded), its p still counts
    updates = [_update(0, 1, {"w": [2.0]}, steps=2), _update(1, 1, {"w": [5.0]}, steps=0)]  # 5: ignored
    # with p = [1/2, 1/2]: tau_eff = 1/2 * 2 = 1; sum p delta/a = 1/2 * 1 = 0.5; w = 1 * 0.5 = 0.5
    assert float(fednova({"w": _f32([0.0])}, updates)["w"][0]) == pytest.approx(0.5)
    assert float(fednova({"w": _f32([1.0])}, [updates[1]])["w"][0]) == 1.0  # nobody stepped: unchanged


def test_fednova_uses_the_clients_momentum():
    with pytest.raises(ValueError, match=r"momentum must be in \[0, 1\)"):
        build_method("fednova", {}, MethodContext(10, momentum=1.5))
    updates = [_update(0, 3, {"w": [2.0]}, steps=1), _update(1, 1, {"w": [0.0]}, steps=2)]
    method = build_method("fednova", {}, MethodContext(10, momentum=0.5))
    assert float(method.aggregate({"w": _f32([0.0])}, updates)["w"][0]) == pytest.approx(2.0625)  # as by hand


# --- FedAvgM ------------------------------------------------------------------------------------


def test_fedavgm_two_rounds_by_hand_with_a_checkpoint_between():
    method = build_method("fedavgm", {"server_momentum": 0.5, "server_lr": 2.0}, 10)
    # round 1: mean delta = 1/4 [5, -2] + 3/4 [1, -2] = [2, -2]; v = [2, -2]; w = [1, 2] + 2 [2, -2] = [5, -2]
    first = [_update(0, 1, {"w": [5.0, -2.0]}), _update(1, 3, {"w": [1.0, -2.0]})]
    w1 = method.aggregate({"w": _f32([1.0, 2.0])}, first)
    np.testing.assert_allclose(w1["w"], [5.0, -2.0])
    np.testing.assert_allclose(method.aggregator.state_dict()["velocity"]["w"], [2.0, -2.0])
    restored = build_method("fedavgm", {"server_momentum": 0.5, "server_lr": 2.0}, 10)
    restored.aggregator.load_state_dict(pickle.loads(pickle.dumps(method.aggregator.state_dict())))
    # round 2: mean delta [0, 4]; v = 0.5 [2, -2] + [0, 4] = [1, 3]; w = [5, -2] + 2 [1, 3] = [7, 4]
    w2 = restored.aggregate(w1, [_update(2, 1, {"w": [0.0, 4.0]})])
    np.testing.assert_allclose(w2["w"], [7.0, 4.0])
    np.testing.assert_allclose(restored.aggregator.state_dict()["velocity"]["w"], [1.0, 3.0])


def test_fedavgm_without_momentum_is_fedavg_exactly():
    updates = _random_updates(2)
    velocity = {"w": np.ones((3, 2), np.float32), "b": np.ones(2, np.float32)}  # any old velocity is forgotten
    new, v = fedavgm(GLOBAL, updates, velocity, 0.0, 1.0)
    _assert_bit_equal(new, fedavg(GLOBAL, updates))
    method = build_method("fedavgm", {"server_momentum": 0.0}, 10)
    _assert_bit_equal(method.aggregate(GLOBAL, updates), fedavg(GLOBAL, updates))


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"server_momentum": 1.5}, r"server_momentum: must be a number in \[0, 1\) \(got 1.5\)"),
        ({"server_momentum": 1.0}, r"server_momentum: must be a number in \[0, 1\)"),
        ({"server_momentum": -0.1}, r"server_momentum: must be a number in \[0, 1\)"),
        ({"server_momentum": True}, r"server_momentum: must be a number in \[0, 1\)"),
        ({"server_lr": 0.0}, r"server_lr: must be a number > 0 \(got 0.0\)"),
        ({"server_lr": float("inf")}, r"server_lr: must be a finite number > 0 \(got inf\)"),
        ({"server_lr": "1"}, r"server_lr: must be a number > 0"),
    ],
)
def test_fedavgm_validates_hyperparameters(params, message):
    with pytest.raises(ValueError, match=message):
        build_method("fedavgm", params, 10)


# --- q-FFL --------------------------------------------------------------------------------------


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
