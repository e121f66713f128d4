"""Checks that span the regularised methods (FedProx, FedUV, UniVarFL), so in no one method's file: the terms
zero weights switch off, the derived lambda, zero weights as FedAvg's update bit for bit, a non-zero one not."""

from __future__ import annotations

import pytest
import torch

from raytune_fl.methods import build_method
from tests.support.methods import train_one_round as _train


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
