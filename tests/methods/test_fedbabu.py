"""FedBABU: the head never moves (not on a client, not on the server: the global head after a round is the initial
one), the body trains and is FedAvg, its round is Freeze's bit for bit, and each client's model is fine-tuned
whole at evaluation for `finetune_epochs` (the declaration the engine's evaluation runs)."""

from __future__ import annotations

import numpy as np
import pytest

from raytune_fl.methods import METHODS, build_method
from raytune_fl.methods.base import Finetune
from raytune_fl.methods.fedbabu import FINETUNE_EPOCHS
from raytune_fl.testing import check_method
from tests.support.methods import initial_weights, two_client_worker

HEAD = ("classifier.weight", "classifier.bias")


def test_the_head_never_moves_and_the_global_head_stays_the_initial_one():
    worker = two_client_worker("fedbabu")
    w0 = initial_weights()
    updates = [worker.train(c, 1, w0) for c in (0, 1)]
    for u in updates:
        assert all(not u.delta[key].any() for key in HEAD)
        assert all(np.abs(u.delta[key]).max() > 0 for key in ("encoder.0.weight", "projector.0.weight"))
    w1 = worker.method.aggregate(w0, updates)
    for key in HEAD:
        assert np.array_equal(w1[key], w0[key]) and w1[key].dtype == w0[key].dtype
    # the body: FedAvg, the two equal clients' mean delta
    expected = (
        w0["encoder.0.weight"] + (updates[0].delta["encoder.0.weight"] + updates[1].delta["encoder.0.weight"]) / 2
    )
    np.testing.assert_allclose(w1["encoder.0.weight"], expected, rtol=1e-6, atol=1e-7)
    # a later round trains from that same initial head again
    again = worker.train(0, 2, w1)
    assert all(not again.delta[key].any() for key in HEAD)


def test_federated_training_is_freezes_bit_for_bit():
    w0 = initial_weights()
    ours = [two_client_worker("fedbabu").train(c, 1, w0) for c in (0, 1)]
    theirs = [two_client_worker("freeze").train(c, 1, w0) for c in (0, 1)]
    for a, b in zip(ours, theirs):
        assert all(np.array_equal(a.delta[key], b.delta[key]) for key in a.delta)
    merged, reference = (
        build_method("fedbabu", {}, 10).aggregate(w0, ours),
        build_method("freeze", {}, 10).aggregate(w0, theirs),
    )
    assert all(np.array_equal(merged[key], reference[key]) for key in merged)


def test_each_client_fine_tunes_the_whole_model_for_finetune_epochs():
    assert build_method("fedbabu", {}, 10).finetune == Finetune(epochs=5, trains="all")  # tau_f = 5, official ft_ep
    assert build_method("fedbabu", {"finetune_epochs": 2}, 10).finetune == Finetune(epochs=2)
    with pytest.raises(ValueError, match=r"^finetune_epochs: must be an integer >= 1 \(got 0\)$"):
        build_method("fedbabu", {FINETUNE_EPOCHS.name: 0}, 10)
    spec = METHODS.get("fedbabu")
    assert spec.personalises is True and spec.as_fedavg is None and not spec.sequential and not spec.per_sample
    method = build_method("fedbabu", {}, 10)
    assert method.personalise is None and [h.name for h in method.hooks] == ["freeze_classifier"]
    assert build_method("freeze", {}, 10).finetune is None


def test_fedbabu_passes_check_method():
    check_method("fedbabu", {"finetune_epochs": 1}, client_batch=1)
