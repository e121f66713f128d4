"""FedPAC through the platform: the local loop's phases, the client's statistics and alignment term, the server's
centroids and mixed classifiers, personalised evaluation, and client and server state through a checkpoint.
The QP and the statistics are checked by hand in tests/test_fedpac_math.py."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from raytune_fl.aggregators.fedavg import fedavg
from raytune_fl.aggregators.fedpac import client_statistics
from raytune_fl.config import ExperimentConfig
from raytune_fl.engine.local import LocalSettings, train_local
from raytune_fl.engine.worker import ClientWorker, ModelSpec, WorkerSpec
from raytune_fl.methods import METHODS, build_method
from raytune_fl.methods.base import Batch, LocalTerm, Method, Phase, Stateless
from raytune_fl.methods.impl.fedpac import (
    NAME,
    CentroidAlignment,
    Centroids,
    ClassifierMixServer,
    PersonalClassifier,
    PrototypeReport,
    representations,
    with_own_classifier,
)
from raytune_fl.types import ClientUpdate
from raytune_fl.weights import load_weights, read_weights
from tests.resume_check import small_federation, straight_and_resumed, untimed

MODEL = ModelSpec("simple_cnn", 1, 10, (8, 8))
SETTINGS = LocalSettings(epochs=1, batch_size=16, lr=0.05, momentum=0.9, weight_decay=1e-4)


def _data(n: int = 32, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    rng = np.random.default_rng(seed)
    x = torch.from_numpy(rng.normal(size=(n, 1, 8, 8)).astype(np.float32))
    y = torch.from_numpy(rng.integers(0, 4, n).astype(np.int64))
    return x, y


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return MODEL.build()


def _changed(before: dict, after: dict) -> set[str]:
    return {k for k in before if not np.array_equal(before[k], after[k])}


# --- the local loop's phases ------------------------------------------------------------------------------


class _Constant(LocalTerm):
    """A term of value 2, so its logged mean shows over which steps it was averaged."""

    name = "two"

    def loss(self, batch: Batch) -> torch.Tensor:
        return batch.z.sum() * 0 + 2.0


def _train(phases: tuple[Phase, ...], terms: tuple[LocalTerm, ...] = ()) -> tuple[dict, dict, object]:
    model = _model()
    before = read_weights(model)
    x, y = _data()
    method = Method("phased", terms, Stateless(fedavg), phases=phases)
    result = train_local(model, method, x, y, SETTINGS, torch.Generator().manual_seed(0), 10)
    assert all(p.requires_grad for p in model.parameters())  # every phase gives back what it froze
    assert model.training
    return before, read_weights(model), result


def test_a_classifier_phase_trains_the_classifier_only_and_keeps_the_bodys_statistics():
    before, after, result = _train((Phase("classifier", epochs=2, lr=0.1, terms=False, body_eval=True),))
    assert _changed(before, after) == {"classifier.weight", "classifier.bias"}
    assert result.steps == 4  # 32 samples, batch 16, two epochs


def test_without_eval_mode_the_frozen_bodys_batchnorm_statistics_move():
    before, after, _ = _train((Phase("classifier", epochs=1),))
    moved = _changed(before, after) - {"classifier.weight", "classifier.bias"}
    assert moved and all("running" in k or "num_batches" in k for k in moved)


def test_a_body_phase_leaves_the_classifier_untouched():
    before, after, _ = _train((Phase("body"),))
    changed = _changed(before, after)
    assert "classifier.weight" not in changed and "classifier.bias" not in changed
    assert "encoder.0.weight" in changed and "projector.0.weight" in changed


def test_phases_run_in_order_and_a_term_is_averaged_over_the_steps_it_was_on():
    _, _, result = _train((Phase("classifier", epochs=1, terms=False), Phase("body", epochs=2)), (_Constant(0.5),))
    assert result.steps == 2 + 4
    assert result.metrics["term_two"] == 2.0  # over the 4 body steps only, not diluted by the classifier's 2
    # loss = ce (+ 0.5 * 2 in the body phase): the mean over all 6 steps is the mean ce + 4/6
    assert result.metrics["loss"] == pytest.approx(result.metrics["ce"] + 1.0 * 4 / 6)


def test_a_phase_with_the_run_settings_is_the_one_phase_loop_bit_for_bit():
    _, one, result_one = _train((Phase(),))
    _, default, result_default = _train(Method("m", (), Stateless(fedavg)).phases)
    assert not _changed(one, default) and result_one.metrics == result_default.metrics


def test_an_unknown_phase_part_is_refused():
    with pytest.raises(ValueError, match="phase trains 'head': must be one of all, classifier, body"):
        Phase("head")


# --- the client side ----------------------------------------------------------------------------------------


def test_the_alignment_term_by_hand_in_both_forms():
    z = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    y = torch.tensor([0, 1])
    source = PersonalClassifier(2)
    source.targets = torch.tensor([[0.0, 0.0], [1.0, 1.0]])
    batch = Batch(z, y, z, z, torch.nn.Identity(), 2)
    # squared distances: sample 0: 1 + 4 = 5; sample 1: 4 + 9 = 13
    assert CentroidAlignment(1.0, "official", source).loss(batch).item() == pytest.approx(18 / 4)
    assert CentroidAlignment(1.0, "paper", source).loss(batch).item() == pytest.approx(18 / 2)
    source.targets = None  # round 1: no centroids, no term
    assert CentroidAlignment(1.0, "official", source).loss(batch).item() == 0.0


def _worker(params: dict) -> ClientWorker:
    x, y = _data(64)
    return ClientWorker(
        WorkerSpec(MODEL, NAME, params, SETTINGS, seed=0), x.numpy(), y.numpy(), [np.arange(32), np.arange(32, 64)]
    )


def test_a_client_reports_statistics_of_the_received_body_and_class_means_of_the_trained_one():
    worker = _worker({})
    weights = read_weights(_model())
    update = worker.train(0, 1, weights)
    report: PrototypeReport = update.extras[NAME]
    x, y = _data(64)
    received = _model()
    expected = client_statistics(representations(received, x[:32]).double().numpy(), y[:32].numpy(), 10)
    np.testing.assert_allclose(report.h, expected.h, rtol=1e-6)
    assert report.v == pytest.approx(expected.v, rel=1e-6)
    trained = _model()
    load_weights(trained, {**{k: weights[k] + d for k, d in update.delta.items()}, **update.buffers})
    after = client_statistics(representations(trained, x[:32]).double().numpy(), y[:32].numpy(), 10)
    np.testing.assert_allclose(report.class_means, after.class_means, rtol=1e-5, atol=1e-6)
    assert report.class_counts.tolist() == np.bincount(y[:32].numpy(), minlength=10).tolist()
    assert update.num_steps == 4  # one classifier epoch, then one body epoch: 2 + 2 steps
    assert update.metrics["term_align"] == 0.0  # round 1: no global centroids yet


def test_a_returning_client_trains_from_its_own_classifier_and_aligns_to_the_broadcast_centroids():
    worker = _worker({"classifier_epochs": 0, "lambda": 1.0})
    weights = read_weights(_model())
    own = {"classifier.weight": np.zeros_like(weights["classifier.weight"]), "classifier.bias": np.ones(10, np.float32)}
    centroids = Centroids(np.zeros((10, 256)), np.ones(10, bool))
    plain = worker.train(0, 2, weights)
    personal = worker.train(0, 2, weights, {NAME: centroids}, {NAME: {"classifier": own}})
    assert personal.metrics["term_align"] > 0 and plain.metrics["term_align"] == 0.0
    # with its own classifier the first step's logits are constant: its delta differs from the plain client's
    assert not np.allclose(personal.delta["classifier.weight"], plain.delta["classifier.weight"])
    with_classifier = with_own_classifier(weights, {NAME: {"classifier": own}})
    assert np.array_equal(with_classifier["classifier.bias"], own["classifier.bias"])
    assert with_own_classifier(weights, {}) is weights


# --- the server side ------------------------------------------------------------------------------------------


def _update(cid: int, n: int, w: float, v: float, h: float, means: list[float], counts: list[int]) -> ClientUpdate:
    delta = {"body": np.full(2, w, np.float32), "classifier.weight": np.full((2, 1), w, np.float32)}
    report = PrototypeReport(v, np.array([[h], [0.0]]), np.array([[m] for m in means]), np.array(counts))
    return ClientUpdate(cid, n, 1, delta, {}, {}, extras={NAME: report})


def test_the_server_averages_mixes_classifiers_and_broadcasts_count_weighted_centroids():
    server = ClassifierMixServer(mix=True)
    glob = {"body": np.zeros(2, np.float32), "classifier.weight": np.zeros((2, 1), np.float32)}
    # client 0: V = 0.4, h = 0; client 1: V = 0.1, h = sqrt(0.1): delta = 0.1, so client 0 mixes (1/3, 2/3)
    updates = [
        _update(0, 10, 1.0, 0.4, 0.0, [1.0, 5.0], [3, 1]),
        _update(1, 30, 4.0, 0.1, 0.1**0.5, [3.0, 0.0], [1, 0]),
    ]
    new = server.aggregate(glob, updates)
    np.testing.assert_allclose(new["body"], [(10 * 1 + 30 * 4) / 40] * 2, rtol=1e-6)
    np.testing.assert_allclose(new["classifier.weight"], np.full((2, 1), 3.25), rtol=1e-6)  # the global one: FedAvg
    mixed = server.client_states()
    np.testing.assert_allclose(mixed[0][NAME]["classifier"]["classifier.weight"], np.full((2, 1), 1 / 3 + 8 / 3))
    # client 1 by the same formula: a_1 = (V_0 + delta) / (V_0 + V_1 + delta) = 0.5 / 0.6
    a1 = 0.5 / 0.6
    np.testing.assert_allclose(mixed[1][NAME]["classifier"]["classifier.weight"], np.full((2, 1), a1 * 4 + (1 - a1)))
    assert server.client_states() == {}  # handed over once
    # row 0 keeps 1/3 of its own, row 1 keeps 5/6 (1 - 0.1/0.6): the diagonal's mean; V's mean (0.4 + 0.1) / 2
    assert server.metrics() == pytest.approx({"mix_self_weight": (1 / 3 + 5 / 6) / 2, "mix_v_mean": 0.25})
    broadcast = server.payload()[NAME]
    np.testing.assert_allclose(broadcast.centroids, [[(3 * 1 + 1 * 3) / 4], [5.0]])
    assert broadcast.present.tolist() == [True, True]
    restored = ClassifierMixServer(mix=True)
    restored.load_state_dict(server.state_dict())
    assert np.array_equal(restored.payload()[NAME].centroids, broadcast.centroids)


def test_without_mixing_every_client_keeps_the_global_classifier():
    server = ClassifierMixServer(mix=False)
    glob = {"body": np.zeros(2, np.float32), "classifier.weight": np.zeros((2, 1), np.float32)}
    server.aggregate(glob, [_update(0, 10, 1.0, 0.4, 0.0, [1.0, 5.0], [3, 1])])
    assert server.client_states() == {} and build_method(NAME, {"mix": False}, 10).personalise is None


def test_defaults_and_the_fedavg_limit_declared():
    spec = METHODS.get(NAME)
    assert spec.defaults == {
        "lambda": 1.0,
        "form": "official",
        "classifier_epochs": 1,
        "classifier_lr": 0.1,
        "mix": True,
    }
    assert spec.as_fedavg == {"lambda": 0.0, "classifier_epochs": 0, "mix": False}
    phases = build_method(NAME, {}, 10).phases
    assert [(p.trains, p.epochs, p.lr, p.terms, p.body_eval) for p in phases] == [
        ("classifier", 1, 0.1, False, True),
        ("body", None, None, True, False),
    ]


# --- the round driver: personalised metrics, state through a checkpoint -----------------------------------------


def _experiment() -> ExperimentConfig:
    return small_federation(
        2, participation=0.67
    )  # two of three clients a round: a non-participant keeps its classifier


def test_a_restored_federation_continues_exactly_with_mixed_classifiers_and_centroids(tmp_path):
    straight, rest, resumed = straight_and_resumed(_experiment(), NAME, {}, tmp_path)
    assert [r["round"] for r in rest] == [2]
    assert untimed(rest) == untimed(straight[1:])
    assert all("personal_val_acc" in r for r in straight)
    assert resumed.method.aggregator.centroids is not None
    states = resumed.client_states
    assert states and all(
        set(s[NAME]["classifier"]) == {"classifier.weight", "classifier.bias"} for s in states.values()
    )
    # a personal classifier is not the global one
    assert any(
        not np.allclose(s[NAME]["classifier"]["classifier.weight"], resumed.weights["classifier.weight"])
        for s in states.values()
    )
