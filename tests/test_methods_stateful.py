"""MOON, Freeze and FedBN: hooks, per-client state and aggregators, checked by hand and through ClientWorker."""

from __future__ import annotations

import math
import pickle

import numpy as np
import pytest
import torch
from torch import nn

from raytune_fl.aggregators import fedavg
from raytune_fl.engine.local import LocalSettings
from raytune_fl.engine.worker import ClientWorker, ModelSpec, WorkerSpec
from raytune_fl.methods import METHODS, build_method
from raytune_fl.methods.base import Batch, ClientContext, ClientHook, Method, Stateless
from raytune_fl.methods.impl.fedbn import LocalBatchNorm, batchnorm_keys
from raytune_fl.methods.impl.moon import ModelContrastiveTerm, model_contrastive
from raytune_fl.types import ClientUpdate

MODEL = ModelSpec("simple_cnn", 1, 10, (8, 8))
SETTINGS = LocalSettings(epochs=1, batch_size=16, lr=0.05, momentum=0.9, weight_decay=0.0)
CLIENTS = 2  # 32 samples each: two local steps of 16


def _worker(method: str, params: dict | None = None) -> ClientWorker:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(32 * CLIENTS, 1, 8, 8)).astype(np.float32)
    y = rng.integers(0, 10, size=32 * CLIENTS).astype(np.int64)
    indices = np.array_split(np.arange(32 * CLIENTS), CLIENTS)
    return ClientWorker(WorkerSpec(MODEL, method, params or {}, SETTINGS, seed=0), x, y, indices)


def _initial() -> dict[str, np.ndarray]:
    torch.manual_seed(0)
    return {k: v.numpy().copy() for k, v in MODEL.build().state_dict().items()}


def _weights_of(model: nn.Module) -> dict[str, np.ndarray]:
    return {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}


def _assert_same(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> None:
    assert a.keys() == b.keys()
    for key in a:
        assert np.array_equal(a[key], b[key]), key


def _through_pickle(state):  # what Ray does to the state between rounds
    return pickle.loads(pickle.dumps(state))


# ---------------------------------------------------------------- MOON


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


# ---------------------------------------------------------------- Freeze


def test_freeze_never_trains_the_classifier():
    worker = _worker("freeze")
    w0 = _initial()
    update = worker.train(0, 1, w0)
    trained = worker.model.state_dict()
    for key in ("classifier.weight", "classifier.bias"):
        assert torch.equal(trained[key], torch.from_numpy(w0[key])), key
        assert not update.delta[key].any()
    for key in ("encoder.0.weight", "projector.0.weight", "projector.3.weight"):
        assert np.abs(update.delta[key]).max() > 0, key
    assert all(p.requires_grad for p in worker.model.parameters())  # the hook hands the model back unfrozen
    assert METHODS.get("freeze").as_fedavg is None


def test_freeze_aggregator_keeps_the_global_classifier():
    global_w = {
        "projector.0.weight": np.array([1.0, 2.0], np.float32),
        "classifier.weight": np.array([[0.5, -0.5]], np.float32),
        "classifier.bias": np.array([0.25], np.float32),
    }

    def update(cid: int, n: int, projector: list[float]) -> ClientUpdate:
        delta = {
            "projector.0.weight": np.array(projector, np.float32),
            "classifier.weight": np.array([[1.0, 1.0]], np.float32),  # a client that did train it
            "classifier.bias": np.array([-3.0], np.float32),
        }
        return ClientUpdate(cid, n, 1, delta, {}, {})

    new = build_method("freeze", {}, 10).aggregate(global_w, [update(1, 3, [-2.0, 4.0]), update(0, 1, [2.0, 0.0])])
    # projector: FedAvg, 1/4 * [2, 0] + 3/4 * [-2, 4] = [-1, 3], so [1, 2] + [-1, 3] = [0, 5]
    np.testing.assert_allclose(new["projector.0.weight"], [0.0, 5.0])
    assert np.array_equal(new["classifier.weight"], global_w["classifier.weight"])
    assert np.array_equal(new["classifier.bias"], global_w["classifier.bias"])


# ---------------------------------------------------------------- FedBN


class _StartRecorder(ClientHook):
    """Runs after local_bn: what the model looks like when the optimiser is about to be built."""

    name = "recorder"

    def __init__(self) -> None:
        self.starts: dict[tuple[int, int], dict[str, np.ndarray]] = {}

    def on_round_start(self, ctx: ClientContext) -> None:
        self.starts[(ctx.client_id, ctx.round_index)] = _weights_of(ctx.model)


def test_fedbn_clients_keep_their_own_batchnorm_across_partial_rounds():
    worker = _worker("fedbn")
    recorder = _StartRecorder()
    assert [h.name for h in worker.method.hooks] == ["local_bn"]
    worker.method = Method("fedbn", (), worker.method.aggregator, hooks=(*worker.method.hooks, recorder))
    bn = set(batchnorm_keys(worker.model))
    assert len(bn) == 10 * 5  # 8 BatchNorm2d + 2 BatchNorm1d, five entries each
    assert {"encoder.1.running_mean", "encoder.1.num_batches_tracked", "projector.4.weight"} <= bn
    assert "classifier.weight" not in bn and "encoder.0.weight" not in bn

    states: dict[int, dict] = {}  # what the server keeps, by client id
    kept: dict[int, dict[int, dict]] = {}  # the server's states after each round
    weights = {0: _initial()}
    for round_index, clients in ((1, [0, 1]), (2, [0]), (3, [1])):
        w = weights[round_index - 1]
        updates = [worker.train(c, round_index, w, state=states.get(c)) for c in clients]
        for u in updates:
            assert set(u.state) == {"local_bn"} and set(u.state["local_bn"]) == bn
            states[u.client_id] = _through_pickle(u.state)
        weights[round_index] = worker.method.aggregate(w, updates)
        kept[round_index] = dict(states)

    w0, w1, w2 = weights[0], weights[1], weights[2]
    round1 = {c: kept[1][c]["local_bn"] for c in (0, 1)}
    _assert_same(recorder.starts[(0, 1)], w0)  # first round: the global model as sent
    _assert_same(recorder.starts[(1, 1)], w0)
    for (client, round_index), w in {(0, 2): w1, (1, 3): w2}.items():
        start = recorder.starts[(client, round_index)]
        for key in start:
            expected = round1[client][key] if key in bn else w[key]
            assert np.array_equal(start[key], expected), (client, round_index, key)
    # client 1 in round 3 really starts from its own round-1 entries, not the global ones
    assert not np.array_equal(recorder.starts[(1, 3)]["encoder.1.running_mean"], w2["encoder.1.running_mean"])
    assert int(recorder.starts[(1, 3)]["encoder.1.num_batches_tracked"]) == 2  # its own two steps
    assert int(w2["encoder.1.num_batches_tracked"]) == 4  # the global's: client 0's four
    # the global BN entries are the clients' average (equal sample counts), only for server-side evaluation
    np.testing.assert_allclose(
        w1["encoder.1.running_var"], (round1[0]["encoder.1.running_var"] + round1[1]["encoder.1.running_var"]) / 2
    )


def test_fedbn_rejects_state_of_another_model():
    model = MODEL.build()
    ctx = ClientContext(model, 0, 2, torch.zeros(1), torch.zeros(1), lr=0.1, state={"local_bn": {"bn.weight": 0}})
    with pytest.raises(ValueError, match="fedbn: stored BatchNorm entries"):
        LocalBatchNorm().on_round_start(ctx)


def test_fedbn_and_freeze_are_stateless_on_the_server():
    for name in ("fedbn", "freeze"):
        assert isinstance(build_method(name, {}, 10).aggregator, Stateless)
    assert METHODS.get("fedbn").as_fedavg == {}
