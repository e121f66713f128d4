"""FedDyn: the worked checks by hand, through the local loop and the aggregator; the first round as FedProx; the
paper form; the alpha -> 0 limit; the BatchNorm rule; per-client and server state through a checkpoint."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from raytune_fl.aggregators.fedavg import fedavg
from raytune_fl.aggregators.feddyn import feddyn, track_latest
from raytune_fl.engine.checkpoint import load_state, save_state
from raytune_fl.engine.local import LocalData, LocalSettings, train_local
from raytune_fl.engine.worker import ClientWorker, ModelSpec, WorkerSpec
from raytune_fl.methods import METHODS, build_method
from raytune_fl.methods.base import Batch, ClientContext, ClientHook, LocalTerm, Method, MethodContext
from raytune_fl.types import ClientUpdate, Weights
from tests.support.resume_check import small_federation, straight_and_resumed, untimed

# --- the client check, through the real term and the one local loop ------------------------------------


class _Scalar(nn.Module):
    """One trainable parameter w; constant logits, so the cross-entropy adds no gradient."""

    def __init__(self, w: float) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.tensor([w]))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits = torch.zeros(x.shape[0], 2)
        return logits, logits


class _Objective(LocalTerm):
    """F(w) = (w - 1)^2 / 2, the worked check's local loss."""

    name = "objective"

    def loss(self, batch: Batch) -> torch.Tensor:
        return ((batch.model.w - 1.0) ** 2 / 2).sum()


class _Trace(ClientHook):
    """w before each optimiser step."""

    name = "trace"

    def __init__(self) -> None:
        self.ws: list[float] = []

    def after_backward(self, ctx: ClientContext) -> None:
        self.ws.append(float(ctx.model.w.detach()))


def _scalar_round(
    lam: float | None, params: dict | None = None, mean_size: float = 0.0
) -> tuple[list[float], dict, dict]:
    """Two SGD steps (lr 0.2, no momentum) of F + FedDyn's term (alpha 0.5) from w_t = 4, as the loop runs them."""
    context = MethodContext(2, lr=0.2, num_clients=2, mean_client_size=mean_size)
    feddyn_method = build_method("feddyn", {"alpha": 0.5, **(params or {})}, context)
    trace = _Trace()
    hooks = (*feddyn_method.hooks, trace)
    method = Method("feddyn", (_Objective(1.0), *feddyn_method.terms), feddyn_method.aggregator, hooks=hooks)
    model = _Scalar(4.0)
    x, y = torch.zeros(2, 1), torch.zeros(2, dtype=torch.long)  # one batch of two: one step per epoch
    state = {} if lam is None else {"feddyn": {"w": np.array([lam], np.float32)}}
    ctx = ClientContext(model, 0, 2, x, y, lr=0.2, state=state)
    settings = LocalSettings(epochs=2, batch_size=2, lr=0.2, momentum=0.0, weight_decay=0.0)
    result = train_local(model, method, LocalData(x, y, 2), settings, torch.Generator().manual_seed(0), ctx)
    assert result.steps == 2
    return [*trace.ws, float(model.w.detach())], result.state, result.metrics


def test_client_worked_check_through_the_local_loop():
    # F(w) = (w-1)^2/2, w_t = 4, alpha = 0.5, lr = 0.2, lambda_k = 0.4 (paper: g_k = -alpha lambda_k = -0.2).
    # gradient (w - 1) + alpha (w - w_t + lambda_k):
    #   step 1: w = 4:    3 + 0.5 (0 + 0.4) = 3.2        -> 4 - 0.64 = 3.36
    #   step 2: w = 3.36: 2.36 + 0.5 (-0.64 + 0.4) = 2.24 -> 3.36 - 0.448 = 2.912
    # lambda_k <- 0.4 + (2.912 - 4) = -0.688 (g_k = 0.344).
    # The logged term <w, lambda_k> + (w - w_t)^2 / 2: 1.6, then 1.344 + 0.2048 = 1.5488; mean 1.5744.
    ws, state, metrics = _scalar_round(0.4)
    assert ws == pytest.approx([4.0, 3.36, 2.912], abs=1e-6)
    assert set(state) == {"feddyn"} and set(state["feddyn"]) == {"w"}
    lam = state["feddyn"]["w"]
    assert isinstance(lam, np.ndarray) and lam.dtype == np.float32
    assert lam[0] == pytest.approx(-0.688, abs=1e-6)
    assert -0.5 * lam[0] == pytest.approx(0.344, abs=1e-6)  # the paper's g_k = -alpha lambda_k
    assert metrics["term_feddyn"] == pytest.approx((1.6 + 1.5488) / 2, abs=1e-6)


def test_first_round_is_fedprox_with_mu_alpha_on_the_worked_check():
    # lambda_k = 0: gradient (w - 1) + 0.5 (w - 4), FedProx's with mu = 0.5: 3.4, then 2.98 (plain SGD: 2.92).
    # The logged term is 0 at the start (0, then 0.5 * 0.6^2 = 0.18: mean 0.09); lambda_k = 2.98 - 4 = -1.02.
    ws, state, metrics = _scalar_round(None)
    assert ws == pytest.approx([4.0, 3.4, 2.98], abs=1e-6)
    assert state["feddyn"]["w"][0] == pytest.approx(-1.02, abs=1e-6)
    assert metrics["term_feddyn"] == pytest.approx(0.09, abs=1e-6)


def test_adaptive_alpha_by_hand():
    # alpha_k = alpha * mean_n / n_k = 0.5 * 6 / 2 = 1.5 (this client holds 2 samples, the mean is 6):
    #   step 1: w = 4:    3 + 1.5 (0 + 0.4) = 3.6           -> 4 - 0.72 = 3.28
    #   step 2: w = 3.28: 2.28 + 1.5 (-0.72 + 0.4) = 1.8     -> 3.28 - 0.36 = 2.92
    ws, state, _ = _scalar_round(0.4, {"alpha_adaptive": True}, mean_size=6.0)
    assert ws == pytest.approx([4.0, 3.28, 2.92], abs=1e-6)
    assert state["feddyn"]["w"][0] == pytest.approx(0.4 + 2.92 - 4, abs=1e-6)
    with pytest.raises(ValueError, match="alpha_adaptive needs the clients' mean sample count"):
        build_method("feddyn", {"alpha_adaptive": True}, 10)


def test_gradient_clipping_option_by_hand():
    # clipped at 1: every step moves w by lr * 1 = 0.2 (the unclipped gradients, 3.2 and then 2.9, are > 1)
    ws, _, _ = _scalar_round(0.4, {"clip_grad_norm": 1.0})
    assert ws == pytest.approx([4.0, 3.8, 3.6], abs=1e-6)


# --- the first round through ClientWorker: FedProx with mu = alpha, bit for bit ----------------------------

MODEL = ModelSpec("simple_cnn", 1, 10, (8, 8))
SETTINGS = LocalSettings(epochs=1, batch_size=16, lr=0.05, momentum=0.9, weight_decay=1e-4)
SIZES = (32, 32, 32, 32)


def _worker(method: str, params: dict, sizes: tuple[int, ...] = SIZES) -> ClientWorker:
    rng = np.random.default_rng(0)
    total = sum(sizes)
    x = rng.normal(size=(total, 1, 8, 8)).astype(np.float32)
    y = rng.integers(0, 10, size=total).astype(np.int64)
    indices = np.split(np.arange(total), np.cumsum(sizes)[:-1])
    return ClientWorker(WorkerSpec(MODEL, method, params, SETTINGS, seed=0), x, y, indices)


def _initial() -> Weights:
    torch.manual_seed(0)
    return {k: v.numpy().copy() for k, v in MODEL.build().state_dict().items()}


def _assert_same(a: Weights, b: Weights) -> None:
    assert a.keys() == b.keys()
    for key in a:
        assert np.array_equal(a[key], b[key]), key


def test_first_round_equals_fedprox_with_mu_alpha_bit_for_bit():
    w0 = _initial()
    dyn, prox = _worker("feddyn", {"alpha": 0.5}), _worker("fedprox", {"mu": 0.5})
    a, b = dyn.train(1, 1, w0), prox.train(1, 1, w0)
    _assert_same(a.delta, b.delta)
    assert a.metrics["term_feddyn"] == b.metrics["term_proximal"]
    trainable = [name for name, p in dyn.model.named_parameters() if p.requires_grad]
    lam = a.state["feddyn"]
    assert list(lam) == trainable  # parameters only: no running statistics, no num_batches_tracked
    assert all(lam[k].dtype == np.float32 for k in lam)
    _assert_same(lam, {k: a.delta[k] for k in trainable})  # lambda_k = 0 + Delta_k
    # a second round differs from FedProx's: the linear term <w, lambda_k> now pulls
    w1 = build_method("feddyn", {"alpha": 0.5}, MethodContext(10, num_clients=4)).aggregate(w0, [a])
    again, plain = dyn.train(1, 2, w1, state=a.state), prox.train(1, 2, w1)
    assert not np.array_equal(again.delta["classifier.weight"], plain.delta["classifier.weight"])


# --- the server ------------------------------------------------------------------------------------------


def _update(cid: int, n: int, delta: dict, buffers: dict | None = None, dtype=np.float32) -> ClientUpdate:
    return ClientUpdate(cid, n, 1, {k: np.asarray(v, dtype) for k, v in delta.items()}, buffers or {}, {})


def test_server_worked_check():
    # M = 2, both take part, w_t = 4, models 2.912 and 5.0 (deltas -1.088 and 1.0), D = 0 before:
    #   D = -0.088, w_{t+1} = 4 + (-0.044) + (-0.088 / 2) = 3.912.
    # Paper form, alpha = 0.5: h = -(0.5 / 2)(-0.088) = 0.022, w_{t+1} = mean model 3.956 - 0.022 / 0.5 = 3.912.
    updates = [_update(1, 7, {"w": [1.0]}, dtype=np.float64), _update(0, 3, {"w": [-1.088]}, dtype=np.float64)]
    new, drift = feddyn({"w": np.array([4.0])}, updates, {}, 2)
    assert new["w"][0] == pytest.approx(3.912, abs=1e-12)  # sample counts play no part: unweighted means
    assert drift["w"][0] == pytest.approx(-0.088, abs=1e-12)
    h = -(0.5 / 2) * (-1.088 + 1.0)
    assert (2.912 + 5.0) / 2 - h / 0.5 == pytest.approx(3.912, abs=1e-12)

    method = build_method("feddyn", {"alpha": 0.5}, MethodContext(10, num_clients=2))
    through = method.aggregate({"w": np.array([4.0], np.float32)}, updates)
    assert through["w"].dtype == np.float32 and through["w"][0] == pytest.approx(3.912, abs=1e-6)
    assert method.aggregator.state_dict()["D"]["w"][0] == pytest.approx(-0.088, abs=1e-12)
    with pytest.raises(ValueError, match="from at most 1 clients"):
        feddyn({"w": np.array([4.0])}, updates, {}, 1)


def test_stable_form_equals_the_paper_form_with_partial_participation():
    # Alg. 1 with h: h <- h - (alpha / M) sum_k Delta_k, w_{t+1} = mean_k w_k - h / alpha, over rounds where
    # different clients take part; the stable form never sees alpha.
    alpha, m = 0.05, 5
    rng = np.random.default_rng(3)
    stable = {"w": rng.normal(size=(3, 2)), "b": rng.normal(size=2)}
    paper = {k: v.copy() for k, v in stable.items()}
    h = {k: np.zeros_like(v) for k, v in stable.items()}
    drift: Weights = {}
    for clients in ([0, 1, 2, 3, 4], [1, 3], [4], [0, 2, 3]):
        deltas = [{k: rng.normal(scale=0.1, size=v.shape) for k, v in stable.items()} for _ in clients]
        updates = [_update(c, int(rng.integers(1, 50)), d, dtype=np.float64) for c, d in zip(clients, deltas)]
        for key in paper:
            mean_model = np.mean([paper[key] + d[key] for d in deltas], axis=0)
            h[key] = h[key] - (alpha / m) * np.sum([d[key] for d in deltas], axis=0)
            paper[key] = mean_model - h[key] / alpha
        stable, drift = feddyn(stable, updates, drift, m)
        for key in paper:
            np.testing.assert_allclose(stable[key], paper[key], rtol=1e-12, atol=1e-12)
            np.testing.assert_allclose(drift[key], -m * h[key] / alpha, rtol=1e-12, atol=1e-12)  # D = -M h / alpha


def test_alpha_zero_limit_is_an_undamped_heavy_ball_step():
    # alpha -> 0 and full participation: w_{t+1} = w_t + mean Delta_t + sum_{s <= t} mean Delta_s.
    rng = np.random.default_rng(1)
    w = {"w": rng.normal(size=4)}
    method = build_method("feddyn", {"alpha": 0.0}, MethodContext(10, num_clients=3))
    assert method.terms == ()  # alpha = 0: no local term at all
    history = np.zeros(4)
    for _ in range(3):
        updates = [_update(c, 10 + c, {"w": rng.normal(scale=0.1, size=4)}, dtype=np.float64) for c in range(3)]
        mean = np.mean([u.delta["w"] for u in updates], axis=0)
        history = history + mean
        expected = w["w"] + mean + history
        w = method.aggregate(w, updates)
        np.testing.assert_allclose(w["w"], expected, rtol=1e-12, atol=1e-12)


def test_fedavg_only_with_alpha_zero_without_the_correction_and_equal_sample_counts():
    assert METHODS.get("feddyn").as_fedavg is None  # the conformance suite skips the FedAvg check: no setting
    w0 = _initial()
    params = {"alpha": 0.0, "server_correction": False}
    ours = [_worker("feddyn", params).train(c, 1, w0) for c in range(4)]
    theirs = [_worker("fedavg", {}).train(c, 1, w0) for c in range(4)]
    for a, b in zip(ours, theirs):  # client side: no term, FedAvg's training bit for bit
        _assert_same(a.delta, b.delta)
        assert a.state is None
    method = build_method("feddyn", params, MethodContext(10, num_clients=4))
    merged, expected = method.aggregate(w0, ours), fedavg(w0, theirs)  # equal counts: mean = weighted mean
    for key in w0:
        np.testing.assert_allclose(merged[key], expected[key], rtol=1e-6, atol=1e-7, err_msg=key)
    # unequal counts: the unweighted mean is not FedAvg's; with the correction, D/M moves it further
    uneven = [_update(0, 1, {"w": [0.4]}), _update(1, 3, {"w": [0.0]})]
    assert method.aggregate({"w": np.zeros(1, np.float32)}, uneven)["w"][0] == pytest.approx(0.2)
    assert fedavg({"w": np.zeros(1, np.float32)}, uneven)["w"][0] == pytest.approx(0.1)
    corrected = build_method("feddyn", {"alpha": 0.0}, MethodContext(10, num_clients=2))
    assert corrected.aggregate({"w": np.zeros(1, np.float32)}, uneven)["w"][0] == pytest.approx(0.4)  # 0.2 + 0.4/2


def test_batchnorm_statistics_are_averaged_never_corrected_and_num_batches_tracked_copied():
    w0 = {
        "bn.weight": np.array([1.0], np.float32),
        "bn.running_mean": np.array([0.5], np.float32),
        "bn.running_var": np.array([1.0], np.float32),
        "bn.num_batches_tracked": np.array(10, np.int64),
    }

    def client(cid, n, weight, mean, var, tracked):
        buffers = {"bn.num_batches_tracked": np.array(tracked, np.int64)}
        return _update(cid, n, {"bn.weight": [weight], "bn.running_mean": [mean], "bn.running_var": [var]}, buffers)

    # M = 2, listed out of order. bn.weight: deltas 0.3 and 0.1: mean 0.2, D = 0.4, 1 + 0.2 + 0.4/2 = 1.4.
    # running_mean: 1/4 * 4 + 3/4 * 0 = 1 (sample-weighted), 0.5 + 1 = 1.5 (with D/M it would be 1.5 + 2 + ...);
    # running_var: 1/4 * (-0.8) = -0.2, 0.8. num_batches_tracked: the lowest id's, 12.
    method = build_method("feddyn", {}, MethodContext(10, num_clients=2))
    new = method.aggregate(w0, [client(2, 3, 0.1, 0.0, 0.0, 13), client(1, 1, 0.3, 4.0, -0.8, 12)])
    np.testing.assert_allclose(new["bn.weight"], [1.4], rtol=1e-6)
    np.testing.assert_allclose(new["bn.running_mean"], [1.5], rtol=1e-6)
    np.testing.assert_allclose(new["bn.running_var"], [0.8], rtol=1e-6)
    assert new["bn.num_batches_tracked"].dtype == np.int64 and int(new["bn.num_batches_tracked"]) == 12
    assert set(method.aggregator.state_dict()["D"]) == {"bn.weight"}  # no drift for statistics or integers


# --- state ---------------------------------------------------------------------------------------------------


def _play(worker: ClientWorker, method: Method, weights: Weights, rounds, states: dict, first: int = 1) -> Weights:
    for offset, clients in enumerate(rounds):
        updates = [worker.train(c, first + offset, weights, state=states.get(c)) for c in clients]
        for u in updates:
            states[u.client_id] = u.state
        weights = method.aggregate(weights, updates)
    return weights


def test_client_and_server_state_survive_a_checkpoint_and_the_next_round_is_identical(tmp_path):
    params = {"alpha": 0.1}
    context = MethodContext(10, SETTINGS.lr, SETTINGS.momentum, num_clients=4)
    live, states = build_method("feddyn", params, context), {}
    weights = _play(_worker("feddyn", params), live, _initial(), ([0, 1, 2], [1, 3]), states)
    assert set(states) == {0, 1, 2, 3}  # client 3 took part once, client 1 twice
    # the server's D is the sum of every client's lambda_k (float32 clients, float64 server: to rounding)
    drift = live.aggregator.state_dict()["D"]
    for key, value in drift.items():
        np.testing.assert_allclose(value, sum(s["feddyn"][key] for s in states.values()), rtol=1e-4, atol=1e-6)
    save_state({"client_states": states, "aggregator": live.aggregator.state_dict(), "weights": weights}, tmp_path)
    loaded = load_state(tmp_path)
    restored = build_method("feddyn", params, context)
    restored.aggregator.load_state_dict(loaded["aggregator"])
    for key, value in drift.items():
        back = restored.aggregator.drift[key]
        assert back.dtype == value.dtype == np.float64 and np.array_equal(back, value), key
    for cid, state in states.items():
        for key, value in state["feddyn"].items():
            back = loaded["client_states"][cid]["feddyn"][key]
            assert back.dtype == np.float32 and np.array_equal(back, value), (cid, key)

    straight = _play(_worker("feddyn", params), live, weights, ([0, 3],), states, first=3)
    resumed = _play(_worker("feddyn", params), restored, loaded["weights"], ([0, 3],), loaded["client_states"], 3)
    _assert_same(straight, resumed)
    _assert_same(live.aggregator.state_dict()["D"], restored.aggregator.state_dict()["D"])
    forgetful = _play(_worker("feddyn", params), build_method("feddyn", params, context), weights, ([0, 3],), {}, 3)
    assert not np.array_equal(forgetful["classifier.weight"], straight["classifier.weight"])  # the state matters


def test_a_restored_federation_continues_exactly(tmp_path):
    experiment = small_federation(2, participation=0.67)  # two of three clients a round: stale lambda_k count through D
    params = {"alpha": 0.1}
    straight, rest, resumed = straight_and_resumed(experiment, "feddyn", params, tmp_path)
    assert resumed.client_states and resumed.method.aggregator.drift
    assert [r["round"] for r in rest] == [2]
    assert untimed(rest) == untimed(straight[1:])


# --- hyperparameters ----------------------------------------------------------------------------------------


def test_defaults_and_refusals():
    assert METHODS.get("feddyn").defaults == {
        "alpha": 0.01,
        "alpha_adaptive": False,
        "clip_grad_norm": 0.0,
        "avg_model": False,
        "server_correction": True,
    }
    with pytest.raises(ValueError, match=r"alpha: must be a number >= 0 \(got -0.1\)"):
        build_method("feddyn", {"alpha": -0.1}, 10)
    with pytest.raises(ValueError, match="server_correction: must be true or false"):
        build_method("feddyn", {"server_correction": 0}, 10)
    term = build_method("feddyn", {}, 10).terms[0]
    model = _Scalar(1.0)
    ctx = ClientContext(model, 0, 2, torch.zeros(2, 1), torch.zeros(2), lr=0.1, state={"feddyn": {"v": np.zeros(1)}})
    with pytest.raises(ValueError, match="feddyn: the stored lambda_k"):
        term.on_round_start(ctx)


# --- the official "avg" model and the diagnostics ------------------------------------------------------------


def _delta(cid: int, value: float) -> ClientUpdate:
    return ClientUpdate(cid, 10, 1, {"w": np.array([value], np.float32)}, {}, {})


def test_the_mean_of_every_clients_latest_model_by_hand():
    # M = 3, initial model 0. Round 1 from global 0: client 0 sends +1 (its model 1); the others still count as 0:
    # avg 1/3. Round 2 from global 5: client 0 sends -1 (model 4), client 2 sends +3 (model 8): (4 + 0 + 8) / 3 = 4.
    initial = {"w": np.array([0.0], np.float32)}
    total = {"w": np.array([0.0])}
    total, latest = track_latest(total, {}, initial, initial, [_delta(0, 1.0)])
    assert total["w"][0] == pytest.approx(1.0) and latest[0]["w"][0] == pytest.approx(1.0)
    glob = {"w": np.array([5.0], np.float32)}
    total, latest = track_latest(total, latest, initial, glob, [_delta(2, 3.0), _delta(0, -1.0)])
    assert total["w"][0] == pytest.approx(12.0) and sorted(latest) == [0, 2]
    server = build_method("feddyn", {"avg_model": True}, MethodContext(10, num_clients=3)).aggregator
    server.aggregate(initial, [_delta(0, 1.0)])
    assert server.extra_models()["avg"]["w"][0] == pytest.approx(1 / 3)
    server.aggregate(glob, [_delta(0, -1.0), _delta(2, 3.0)])
    assert server.extra_models()["avg"]["w"][0] == pytest.approx(4.0)
    assert server.extra_models()["avg"]["w"].dtype == np.float32
    # D = 1 + (-1 + 3) = 3 on the one trainable entry: ||D / M|| = 1
    assert server.metrics() == {"drift_norm": pytest.approx(1.0)}
    assert build_method("feddyn", {}, MethodContext(10, num_clients=3)).aggregator.extra_models() == {}


def test_avg_model_is_scored_each_round_and_survives_a_checkpoint(tmp_path):
    experiment = small_federation(2, participation=0.67)
    params = {"alpha": 0.1, "avg_model": True}
    straight, rest, resumed = straight_and_resumed(experiment, "feddyn", params, tmp_path)
    assert untimed(rest) == untimed(straight[1:])
    for row in straight:
        assert {"avg_val_acc", "avg_val_loss", "avg_test_acc", "avg_test_loss", "drift_norm"} <= set(row)
        assert row["avg_val_acc"] != row["val_acc"] or row["avg_val_loss"] != row["val_loss"]  # another model
    assert len(resumed.method.aggregator.latest) >= 2
