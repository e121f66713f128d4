"""Personalised scores: the clients' own test parts (partition.test_fraction) carved by prepare_data and refused
where they leave nothing to train on; client_test_acc* and personal_test_acc* by hand on a two-client split and a
model whose predictions are known; fine-tuning at evaluation (engine/finetune.py) by hand; and real rounds where
fine-tuning changes the scored models but never the global ones."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from raytune_fl.config import ConfigError, DiagnosticsConfig, ExperimentConfig, parse_space
from raytune_fl.config.space import OBJECTIVES
from raytune_fl.data import train_val_split
from raytune_fl.data.datasets import ArrayDataset
from raytune_fl.engine.data import FederatedData, data_identity_of, prepare_data
from raytune_fl.engine.evaluation import Evaluator
from raytune_fl.engine.federation import Federation
from raytune_fl.engine.finetune import FinetuneRun, finetune_method
from raytune_fl.engine.steps import LocalSettings
from raytune_fl.methods.base import Finetune
from raytune_fl.metrics import (
    CLIENT_TEST_ACC,
    CLIENT_TEST_ACC_BOTTOM10,
    CLIENT_TEST_ACC_MEAN,
    CLIENT_TEST_ACC_WORST,
    PERSONAL_TEST_ACC,
    PERSONAL_TEST_ACC_BOTTOM10,
    PERSONAL_TEST_ACC_MEAN,
    PERSONAL_TEST_ACC_WORST,
    PERSONAL_VAL_ACC,
    TEST_ACC,
    VAL_ACC,
)
from raytune_fl.weights import read_weights

CLIENT_NAMES = (CLIENT_TEST_ACC, CLIENT_TEST_ACC_MEAN, CLIENT_TEST_ACC_WORST, CLIENT_TEST_ACC_BOTTOM10)
PERSONAL_NAMES = (PERSONAL_TEST_ACC, PERSONAL_TEST_ACC_MEAN, PERSONAL_TEST_ACC_WORST, PERSONAL_TEST_ACC_BOTTOM10)
BASE = {
    "dataset": "digits",
    "partition": {"kind": "dirichlet", "alpha": 0.5, "clients": 3, "min_size": 20, "seed": 2},
    "rounds": 2,
    "batch_size": 32,
    "resources": {"actors": 0},
}


def _experiment(**partition) -> ExperimentConfig:
    return ExperimentConfig.model_validate({**BASE, "partition": {**BASE["partition"], **partition}})


# ------------------------------------------------------------------------------------------------ the split


def test_prepare_data_carves_each_clients_test_part_and_leaves_the_old_split_without_it():
    plain, carved = prepare_data(_experiment()), prepare_data(_experiment(test_fraction=0.2))
    assert plain.test_parts == [] and all(part.size == 0 for part in plain.client_test_parts)
    for cid, share in enumerate(plain.client_parts):
        # without a test part: exactly the split the seed always gave
        train, val = train_val_split(share, 0.1, seed=2 * 100_003 + cid)
        assert np.array_equal(plain.train_parts[cid], train) and np.array_equal(plain.val_parts[cid], val)
        # with one: the same share and validation part, the test part out of training, round(0.2 n) of it
        assert np.array_equal(carved.client_parts[cid], share) and np.array_equal(carved.val_parts[cid], val)
        test = carved.test_parts[cid]
        assert len(test) == round(0.2 * len(share)) and set(test) <= set(train)
        assert not set(test) & set(carved.train_parts[cid])
    # the record says so only where there is a test part: a run without one keeps its identity
    assert "test_fraction" not in data_identity_of(_experiment(), plain).partition
    identity = data_identity_of(_experiment(test_fraction=0.2), carved)
    assert identity.partition["test_fraction"] == 0.2  # not-a-metric: the partition's setting
    assert identity.sizes["client_test_samples"] == sum(map(len, carved.test_parts))
    assert identity.digest != data_identity_of(_experiment(), plain).digest


def test_a_test_part_that_leaves_nothing_to_train_on_is_refused_naming_the_field():
    with pytest.raises(ValueError) as error:
        _experiment(val_fraction=0.5, test_fraction=0.5)
    assert "partition.test_fraction" in str(error.value).splitlines()[1]  # pydantic's first line is its count
    space = {"name": "s", "base": {**BASE, "partition": {"test_fraction": 0.95}}, "variants": {"a": {}}}
    with pytest.raises(ConfigError) as config_error:
        parse_space(space)
    assert "partition.test_fraction" in str(config_error.value).splitlines()[0]
    # a test part of 0.9 leaves each client 5 % of its share, under a full batch of 64 (drop_last): no step, and
    # the test part is to blame (with its samples back in training every client would step)
    experiment = _experiment(val_fraction=0.05, test_fraction=0.9).model_copy(
        update={"batch_size": 64, "drop_last": True}
    )
    with pytest.raises(ConfigError) as steps:
        prepare_data(experiment)
    first = str(steps.value).splitlines()[0]
    assert first.startswith("base.partition.test_fraction: ") and "would take no local step" in first
    assert "set base.partition.test_fraction < 0.9, or base.batch_size <= " in first


def test_the_clients_test_scores_never_steer_tuning():
    assert not {*CLIENT_NAMES, *PERSONAL_NAMES} & set(OBJECTIVES)


# ------------------------------------------------------------------------------------------------ by hand


class _Signs(torch.nn.Module):
    """logits = the two input values times `sign`: the class of the larger value, or of the smaller one under a
    negative sign (a client's own model, below)."""

    def __init__(self) -> None:
        super().__init__()
        self.sign = torch.nn.Parameter(torch.ones(2))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        z = x.flatten(1)
        return z * self.sign, z


def _two_clients() -> tuple[FederatedData, torch.nn.Module]:
    # the larger of the two values is the class the model predicts; labels make it right or wrong on purpose
    values = [[1, 0], [0, 1], [1, 0], [1, 0], [0, 1], [1, 0], [1, 0], [0, 1]]
    x = np.array(values, np.float32).reshape(8, 1, 1, 2)
    y = np.array([0, 1, 0, 0, 1, 1, 1, 1], np.int64)  # predicted: 0 1 0 0 1 0 0 1
    dataset = ArrayDataset("hand", x, y, x[:2].copy(), y[:2].copy(), 2)
    # client 0: train 0, 1; val 2; test 3, 4, 5 (right, right, wrong). client 1: train 6, 7; test 6 (wrong)
    data = FederatedData(
        dataset,
        [np.array([0, 1]), np.array([7])],
        [np.array([2]), np.zeros(0, np.int64)],
        [np.array([3, 4, 5]), np.array([6])],
    )
    return data, _Signs()


def test_the_global_models_scores_on_the_clients_own_test_parts_by_hand():
    data, model = _two_clients()
    off = DiagnosticsConfig(spectrum=False, client_accuracy=False)
    metrics = Evaluator(data, model, batch_size=4, diagnostics=off).evaluate(read_weights(model), None, {})
    # pooled 2 of 4; client 0 2/3, client 1 0/1: mean 1/3, worst 0, worst decile (1 of 2 clients) 0
    assert [metrics[name] for name in CLIENT_NAMES] == pytest.approx([0.5, 1 / 3, 0.0, 0.0])
    # every client uses the global model: its personal scores are these, and no personal_val_acc
    assert [metrics[name] for name in PERSONAL_NAMES] == [metrics[name] for name in CLIENT_NAMES]
    assert metrics[PERSONAL_VAL_ACC] == metrics[VAL_ACC]  # every client uses the global model
    # without a test split none of them is reported
    plain = FederatedData(data.dataset, data.train_parts, data.val_parts)
    metrics = Evaluator(plain, model, batch_size=4, diagnostics=off).evaluate(read_weights(model), None, {})
    assert not set(CLIENT_NAMES + PERSONAL_NAMES) & set(metrics)


def test_a_personalising_methods_clients_are_scored_with_their_own_models_by_hand():
    data, model = _two_clients()
    weights = read_weights(model)

    def personalise(global_weights, state):  # client 1's own model predicts the smaller value's class
        return {**global_weights, "sign": state["sign"]} if state else global_weights

    off = DiagnosticsConfig(spectrum=False, client_accuracy=False)
    evaluator = Evaluator(data, model, batch_size=4, diagnostics=off)
    metrics = evaluator.evaluate(weights, personalise, {1: {"sign": -np.ones(2, np.float32)}})
    assert [metrics[name] for name in CLIENT_NAMES] == pytest.approx([0.5, 1 / 3, 0.0, 0.0])
    # client 1 now right on its one test sample: pooled 3/4, mean (2/3 + 1) / 2 = 5/6, worst and bottom 2/3
    assert [metrics[name] for name in PERSONAL_NAMES] == pytest.approx([0.75, 5 / 6, 2 / 3, 2 / 3])
    assert metrics[PERSONAL_VAL_ACC] == 1.0  # client 0's one validation sample (2: [1, 0], label 0)
    assert np.array_equal(read_weights(model)["sign"], weights["sign"])  # the global model again


def _finetune_run(data: FederatedData, finetune: Finetune) -> FinetuneRun:
    settings = LocalSettings(epochs=1, batch_size=2, lr=0.1, momentum=0.0, weight_decay=0.0)
    x, y = torch.from_numpy(data.dataset.x_train), torch.from_numpy(data.dataset.y_train)
    return FinetuneRun(finetune, settings, 0, x, y, data.train_parts, 2, lambda images: images)


def test_one_step_of_fine_tuning_by_hand_and_the_global_model_restored():
    data, model = _two_clients()
    run = _finetune_run(data, Finetune(steps=1))
    # client 0's two training samples [1, 0] -> 0 and [0, 1] -> 1 at sign (1, 1): softmax of the logits
    # (1, 0) and (0, 1) is (e/(1+e), 1/(1+e)); d CE / d sign_j = mean over the batch of (p_j - onehot_j) x_j:
    # sign_0: ((e/(1+e) - 1) x 1 + 0) / 2 = -1/(2(1+e)); sign_1 the same by symmetry. lr 0.1: + 0.05/(1+e) each
    assert run.train(model, client_id=0, round_index=1) == 1
    step = 0.05 / (1 + np.e)
    assert model.sign.detach().numpy() == pytest.approx([1 + step, 1 + step])
    assert all(p.requires_grad for p in model.parameters())
    assert finetune_method(Finetune(epochs=2)).phases[0].epochs == 2 and not finetune_method(Finetune(steps=3)).terms
    # in the evaluator: scored fine-tuned, then the global weights back; the same numbers every time
    model = _Signs()
    weights = read_weights(model)
    off = DiagnosticsConfig(spectrum=False, client_accuracy=False)
    evaluator = Evaluator(data, model, batch_size=4, diagnostics=off, finetune=_finetune_run(data, Finetune(steps=1)))
    torch.manual_seed(5)
    before = torch.rand(3)
    first = evaluator.evaluate(weights, None, {}, round_index=2)
    assert np.array_equal(read_weights(model)["sign"], weights["sign"])
    assert first == evaluator.evaluate(weights, None, {}, round_index=2)
    torch.manual_seed(5)
    assert torch.equal(torch.rand(3), before)  # the global random state is left as it was
    assert PERSONAL_VAL_ACC in first and first[PERSONAL_TEST_ACC] == 0.5  # a tiny step turns no prediction


# ------------------------------------------------------------------------------------------------ real rounds


def _rounds(experiment: ExperimentConfig, method: str) -> list[dict]:
    rows: list = []
    Federation(experiment, method, {}).run(rows.append)
    return rows


def test_fine_tuning_changes_the_scored_models_but_never_the_global_ones(one_thread):
    experiment = _experiment(test_fraction=0.2)
    tuned = experiment.model_copy(
        update={"personalise": experiment.personalise.model_copy(update={"finetune_steps": 3})}
    )
    plain, finetuned = _rounds(experiment, "fedavg"), _rounds(tuned, "fedavg")
    for a, b in zip(plain, finetuned):
        assert all(0 <= a[name] <= 1 for name in CLIENT_NAMES + PERSONAL_NAMES)
        # the global model trains and scores exactly as without fine-tuning
        for name in (VAL_ACC, TEST_ACC, *CLIENT_NAMES):
            assert a[name] == b[name], name
        assert [a[name] for name in PERSONAL_NAMES] == [a[name] for name in CLIENT_NAMES]
        assert a[PERSONAL_VAL_ACC] == a[VAL_ACC]  # the model each client uses is the global one
        assert b[PERSONAL_VAL_ACC] != b[VAL_ACC] or b[PERSONAL_TEST_ACC] != a[PERSONAL_TEST_ACC]
    assert any(a[PERSONAL_TEST_ACC] != b[PERSONAL_TEST_ACC] for a, b in zip(plain, finetuned))
    # a method that personalises (FedBN: each client's own BatchNorm) scores its own models on the test parts too
    fedbn = _rounds(experiment, "fedbn")[-1]
    assert PERSONAL_VAL_ACC in fedbn and set(PERSONAL_NAMES) <= set(fedbn)
