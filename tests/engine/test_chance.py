"""Chance level (engine/chance.py) by hand, and the evaluator's `val_chance`, `test_chance` and `collapsed` on a
hand-made split scored by a model that predicts one class, and on real rounds that learned nothing or something."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from raytune_fl.config import DiagnosticsConfig, ExperimentConfig
from raytune_fl.data.datasets import ArrayDataset
from raytune_fl.engine.chance import at_chance, chance_bound, collapsed, pooled_bound, split_bound, trivial_rate
from raytune_fl.engine.data import FederatedData
from raytune_fl.engine.evaluation import Evaluator
from raytune_fl.engine.federation import Federation
from raytune_fl.metrics import COLLAPSED, TEST_ACC, TEST_CHANCE, VAL_ACC, VAL_CHANCE
from raytune_fl.weights import read_weights
from tests.support import tiny_space


def test_the_bound_of_a_small_label_vector_by_hand():
    # 10 labels, 4 of class 2, K = 4: b = max(1/4, 4/10) = 0.4; se = sqrt(0.4 x 0.6 / 10) = sqrt(0.024) = 0.154919
    labels = [2, 0, 2, 1, 2, 3, 0, 2, 1, 3]
    assert trivial_rate(labels, 4) == 0.4
    assert split_bound(labels, 4) == pytest.approx(0.4 + 2 * 0.1549193, abs=1e-6)  # 0.709839
    # balanced, K = 10, n = 100: b = 1/10 (no class above it); 0.1 + 2 sqrt(0.09 / 100) = 0.1 + 2 x 0.03 = 0.16
    assert split_bound(np.repeat(np.arange(10), 10), 10) == pytest.approx(0.16)
    # K larger than the classes present: 1/K is not the floor, the majority share is (2 of 3 labels)
    assert trivial_rate([5, 5, 1], 100) == pytest.approx(2 / 3)
    assert math.isnan(split_bound([], 10)) and math.isnan(chance_bound(0.5, 0))


def test_at_chance_is_at_or_under_the_bound_and_a_missing_split_is_no_verdict():
    assert at_chance(0.16, 0.16) and at_chance(0.1, 0.16) and not at_chance(0.1601, 0.16)
    assert not at_chance(math.nan, 0.16) and not at_chance(0.1, math.nan)
    assert collapsed([(0.9, 0.16), (0.12, 0.16)])  # any evaluated split at chance
    assert not collapsed([(math.nan, math.nan), (0.9, 0.16)])  # no validation split: the test split decides
    assert not collapsed([])


class _OneClass(torch.nn.Module):
    """Logits that ignore the input and favour class 1: what a model that learned nothing may predict."""

    def __init__(self, classes: int) -> None:
        super().__init__()
        self.bias = torch.nn.Parameter(torch.zeros(classes))
        with torch.no_grad():
            self.bias[1] = 1.0

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.bias.expand(x.shape[0], -1), x.flatten(1)


def test_the_evaluator_reports_each_splits_bound_and_flags_a_constant_prediction():
    # 3 classes; validation = train positions 0..5 (labels 1,1,1,0,2,0), test labels 1,0,2,2
    y_train = np.array([1, 1, 1, 0, 2, 0, 2, 2], dtype=np.int64)
    y_test = np.array([1, 0, 2, 2], dtype=np.int64)
    dataset = ArrayDataset(
        "hand", np.zeros((8, 1, 2, 2), np.float32), y_train, np.zeros((4, 1, 2, 2), np.float32), y_test, 3
    )
    data = FederatedData(dataset, [np.array([6]), np.array([7])], [np.array([0, 1, 2]), np.array([3, 4, 5])])
    model = _OneClass(3)
    off = DiagnosticsConfig(spectrum=False, client_accuracy=False)
    evaluator = Evaluator(data, model, batch_size=4, diagnostics=off)
    metrics = evaluator.evaluate(read_weights(model), None, {})
    # validation: b = max(1/3, 3/6) = 0.5, n = 6: 0.5 + 2 sqrt(0.25 / 6) = 0.5 + 0.408248 = 0.908248
    assert metrics[VAL_CHANCE] == pytest.approx(0.908248, abs=1e-6)
    # test: b = max(1/3, 2/4) = 0.5, n = 4: 0.5 + 2 sqrt(0.25 / 4) = 1.0
    assert metrics[TEST_CHANCE] == pytest.approx(1.0)
    # every sample called class 1: validation 3/6 right, test 1/4; both at chance
    assert (metrics[VAL_ACC], metrics[TEST_ACC]) == (0.5, 0.25)
    assert metrics[COLLAPSED] == 1.0 and isinstance(metrics[COLLAPSED], float)  # a number: logged with the scores


def test_the_pooled_bound_of_one_model_per_client_by_hand():
    # client 0: labels 1,1,1 (rate 1); client 1: 0,2,0 (rate max(1/3, 2/3) = 2/3); pooled (3 + 2) / 6 = 5/6, n = 6
    bound = 5 / 6 + 2 * math.sqrt(5 / 6 * (1 / 6) / 6)
    assert pooled_bound([[1, 1, 1], [0, 2, 0], []], 3) == pytest.approx(bound)
    assert math.isnan(pooled_bound([[], []], 3))


class _Linear(torch.nn.Module):
    """Logits W x of a one-hot input: W = identity reads the label off the input, all-ones in row 1 calls class 1."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(3, 3))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x.flatten(1) @ self.weight.T, x.flatten(1)


def test_a_personalising_method_is_judged_on_its_clients_own_models():
    # validation: client 0 ten samples of class 1, client 1 six of 0 and four of 2; inputs one-hot of the label
    y_train = np.array([1] * 10 + [0] * 6 + [2] * 4 + [0, 1], dtype=np.int64)
    x_train = np.eye(3, dtype=np.float32)[y_train].reshape(-1, 1, 1, 3)
    dataset = ArrayDataset("hand", x_train, y_train, x_train[:4], y_train[:4], 3)
    data = FederatedData(dataset, [np.array([20]), np.array([21])], [np.arange(10), np.arange(10, 20)])
    model = _Linear()
    evaluator = Evaluator(data, model, 8, DiagnosticsConfig(spectrum=False, client_accuracy=False))
    calls_one = {"weight": np.array([[0, 0, 0], [1, 1, 1], [0, 0, 0]], dtype=np.float32)}
    reads_label = {"weight": np.eye(3, dtype=np.float32)}
    # the global model calls class 1: 10/20 right, under its bound 0.5 + 2 sqrt(0.25 / 20) = 0.7236: collapsed
    plain = evaluator.evaluate(calls_one, None, {})
    assert plain[VAL_ACC] == 0.5 and plain[COLLAPSED] == 1.0
    # each client's own model reads the label: 20/20, above the pooled bound of per-client majorities,
    # (10 x 1 + 10 x 0.6) / 20 = 0.8 + 2 sqrt(0.8 x 0.2 / 20) = 0.9789: not collapsed, whatever the global model
    personal = evaluator.evaluate(calls_one, lambda weights, state: reads_label, {})
    assert evaluator.personal_val_chance == pytest.approx(0.8 + 2 * math.sqrt(0.16 / 20))
    assert personal["personal_val_acc"] == 1.0 and personal[COLLAPSED] == 0.0
    # the same global model with clients that each call their majority class: at the pooled bound, collapsed
    majority = {0: {"weight": calls_one["weight"]}, 1: {"weight": np.array([[1, 1, 1], [0] * 3, [0] * 3], np.float32)}}
    stuck = evaluator.evaluate(calls_one, lambda weights, state: state, majority)
    assert stuck["personal_val_acc"] == 0.8 and stuck[COLLAPSED] == 1.0


def _last_report(**changes) -> dict:
    experiment = ExperimentConfig.model_validate({**tiny_space()["base"], "resources": {"actors": 0}, **changes})
    rows: list = []
    Federation(experiment, "fedavg", {}).run(rows.append)
    return rows[-1]


def test_a_run_that_learned_nothing_ends_collapsed_and_one_that_learned_does_not(one_thread):
    # lr 1e-9: the model stays at its initialisation through the round (lr must be > 0)
    frozen = _last_report(rounds=1, optimizer={"lr": 1e-9})
    assert frozen[COLLAPSED] == 1.0
    assert at_chance(frozen[VAL_ACC], frozen[VAL_CHANCE]) or at_chance(frozen[TEST_ACC], frozen[TEST_CHANCE])
    # digits, 360 test images, 10 classes: the bound is a little above 0.1 + 2 sqrt(0.09 / 360) = 0.1316
    assert 0.1316 <= frozen[TEST_CHANCE] < 0.2
    learned = _last_report(rounds=2)  # two rounds of the default rate: about half the digits right
    assert learned[COLLAPSED] == 0.0 and learned[VAL_ACC] > learned[VAL_CHANCE]
    assert learned[VAL_CHANCE] == frozen[VAL_CHANCE]  # the labels' bound, whatever the model
