"""Methods on the one loop and the FedAvg aggregator, checked by hand on tiny tensors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from raytune_fl.aggregators import fedavg, weighted_mean_delta
from raytune_fl.engine.local import LocalSettings, train_local
from raytune_fl.methods import METHODS, build_method
from raytune_fl.methods.base import ClientContext
from raytune_fl.methods.impl.fedprox import ProximalTerm
from raytune_fl.models import build_model
from raytune_fl.types import ClientUpdate


def _update(cid: int, n: int, delta: dict, buffers: dict | None = None) -> ClientUpdate:
    return ClientUpdate(cid, n, 1, {k: np.asarray(v, np.float32) for k, v in delta.items()}, buffers or {}, {})


def test_fedavg_weights_by_sample_count():
    global_w = {"w": np.array([1.0, 2.0], np.float32), "steps": np.array(5, np.int64)}
    updates = [
        _update(1, 3, {"w": [3.0, 0.0]}, {"steps": np.array(9, np.int64)}),
        _update(0, 1, {"w": [-1.0, 4.0]}, {"steps": np.array(7, np.int64)}),
    ]
    # mean delta = 3/4 * [3, 0] + 1/4 * [-1, 4] = [2, 1]
    np.testing.assert_allclose(weighted_mean_delta(updates)["w"], [2.0, 1.0])
    new = fedavg(global_w, updates)
    np.testing.assert_allclose(new["w"], [3.0, 3.0])
    assert new["w"].dtype == np.float32
    assert int(new["steps"]) == 7  # integer buffers: the lowest client id's, not an average


def test_fedavg_of_identical_updates_is_that_update_and_order_free():
    global_w = {"w": np.array([0.5], np.float32)}
    same = [_update(i, n, {"w": [0.25]}) for i, n in enumerate([5, 1, 9])]
    np.testing.assert_allclose(fedavg(global_w, same)["w"], [0.75])
    rng = np.random.default_rng(0)
    mixed = [_update(i, int(rng.integers(1, 50)), {"w": rng.normal(size=3)}) for i in range(6)]
    g = {"w": np.zeros(3, np.float32)}
    assert np.array_equal(fedavg(g, mixed)["w"], fedavg(g, mixed[::-1])["w"])  # bit-identical: sorted by client


def test_fedavg_rejects_empty():
    with pytest.raises(ValueError, match="zero client updates"):
        fedavg({"w": np.zeros(1)}, [])


def test_unknown_hyperparameter_lists_known():
    with pytest.raises(ValueError, match="no hyperparameter gamma; its hyperparameters: mu, lambda, sigma"):
        build_method("feduv", {"gamma": 1.0}, 10)


@pytest.mark.parametrize(
    ("method", "names"), [("feduv", ["variance", "uniformity"]), ("univarfl", ["variance", "energy"])]
)
def test_lambda_defaults_to_a_quarter_of_the_classes(method, names):
    built = build_method(method, {}, 10)
    assert [t.name for t in built.terms] == names
    assert built.terms[0].weight == 2.5 and built.terms[1].weight == 0.5


def test_zero_weights_switch_terms_off():
    assert build_method("univarfl", {"mu": 0.0}, 10).terms[0].name == "variance"
    assert [t.name for t in build_method("univarfl", {"lambda": 0.0}, 10).terms] == ["energy"]
    assert build_method("feduv", {"mu": 0.0, "lambda": 0.0}, 10).terms == ()
    assert build_method("fedprox", {"mu": 0.0}, 10).terms == ()


def test_proximal_term_is_anchored_at_round_start():
    model = torch.nn.Linear(2, 1)
    term = ProximalTerm(weight=0.5)
    term.on_round_start(ClientContext(model, 0, 1, torch.zeros(1), torch.zeros(1), lr=0.1))
    with torch.no_grad():
        model.weight.add_(torch.tensor([[1.0, -2.0]]))
        model.bias.add_(torch.tensor([3.0]))
    batch = type("B", (), {"model": model})()
    assert term.loss(batch).item() == pytest.approx(0.5 * (1 + 4 + 9))


def _data(n=40, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 1, 8, 8, generator=g), torch.randint(0, 10, (n,), generator=g)


SETTINGS = LocalSettings(epochs=1, batch_size=16, lr=0.05, momentum=0.9, weight_decay=0.0)


def _train(method_name: str, params: dict, n=40):
    torch.manual_seed(0)
    model = build_model("simple_cnn", 1, 10, (8, 8))
    x, y = _data(n)
    result = train_local(
        model, build_method(method_name, params, 10), x, y, SETTINGS, torch.Generator().manual_seed(1), 10
    )
    return model, result


@pytest.mark.parametrize("name", METHODS.names())
def test_every_method_trains_with_finite_losses(name):
    model, result = _train(name, {})
    phases = build_method(name, {}, 10).phases  # FedPAC: a classifier epoch before the body's
    assert result.steps == 3 * sum(1 if p.epochs is None else p.epochs for p in phases)  # 40 samples: 16 + 16 + 8
    assert all(np.isfinite(v) for v in result.metrics.values())
    terms = {k for k in result.metrics if k.startswith("term_")}
    assert terms == {f"term_{t.name}" for t in build_method(name, {}, 10).terms}


@pytest.mark.parametrize(
    ("name", "zero"),
    [("fedprox", {"mu": 0.0}), ("feduv", {"mu": 0.0, "lambda": 0.0}), ("univarfl", {"mu": 0.0, "lambda": 0.0})],
)
def test_zero_coefficients_give_exactly_fedavgs_update(name, zero):
    reference, _ = _train("fedavg", {})
    model, _ = _train(name, zero)
    for (key, a), b in zip(reference.state_dict().items(), model.state_dict().values()):
        assert torch.equal(a, b), key


def test_a_regularizer_changes_the_update():
    reference, _ = _train("fedavg", {})
    model, result = _train("univarfl", {"mu": 1.0, "lambda": 2.5})
    assert result.metrics["loss"] > result.metrics["ce"]  # terms are added with positive weights
    assert not torch.equal(reference.classifier.weight, model.classifier.weight)


def test_a_size_one_final_batch_is_skipped():
    _, result = _train("fedavg", {}, n=33)  # 16 + 16 + 1: the single sample cannot feed BatchNorm
    assert result.steps == 2
