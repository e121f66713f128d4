"""FedBN: each client keeps its own BatchNorm entries across partial rounds, refuses another model's, and the
server is stateless (as Freeze's, checked here too)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from raytune_fl.methods import METHODS, build_method
from raytune_fl.methods.base import ClientContext, ClientHook, Method, Stateless
from raytune_fl.methods.impl.fedbn import LocalBatchNorm, batchnorm_keys
from raytune_fl.weights import read_weights as _weights_of
from tests.support.methods import MODEL
from tests.support.methods import assert_bit_equal as _assert_same
from tests.support.methods import initial_weights as _initial
from tests.support.methods import through_pickle as _through_pickle
from tests.support.methods import two_client_worker as _worker


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
