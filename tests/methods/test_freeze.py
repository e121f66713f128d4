"""Freeze: the classifier never trains on the client, and the server keeps the global classifier."""

from __future__ import annotations

import numpy as np
import torch

from raytune_fl.methods import METHODS, build_method
from raytune_fl.types import ClientUpdate
from tests.support.methods import initial_weights as _initial
from tests.support.methods import two_client_worker as _worker


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
