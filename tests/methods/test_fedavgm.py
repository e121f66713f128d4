"""FedAvgM: two rounds of server momentum by hand through a checkpoint, FedAvg without momentum, refusals."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from raytune_fl.aggregators.fedavg import fedavg
from raytune_fl.aggregators.fedavgm import fedavgm
from raytune_fl.methods import build_method
from tests.support.methods import GLOBAL
from tests.support.methods import assert_bit_equal as _assert_bit_equal
from tests.support.methods import f32 as _f32
from tests.support.methods import random_updates as _random_updates
from tests.support.methods import update as _update


def test_fedavgm_two_rounds_by_hand_with_a_checkpoint_between():
    method = build_method("fedavgm", {"server_momentum": 0.5, "server_lr": 2.0}, 10)
    # round 1: mean delta = 1/4 [5, -2] + 3/4 [1, -2] = [2, -2]; v = [2, -2]; w = [1, 2] + 2 [2, -2] = [5, -2]
    first = [_update(0, 1, {"w": [5.0, -2.0]}), _update(1, 3, {"w": [1.0, -2.0]})]
    w1 = method.aggregate({"w": _f32([1.0, 2.0])}, first)
    np.testing.assert_allclose(w1["w"], [5.0, -2.0])
    np.testing.assert_allclose(method.aggregator.state_dict()["velocity"]["w"], [2.0, -2.0])
    restored = build_method("fedavgm", {"server_momentum": 0.5, "server_lr": 2.0}, 10)
    restored.aggregator.load_state_dict(pickle.loads(pickle.dumps(method.aggregator.state_dict())))
    # round 2: mean delta [0, 4]; v = 0.5 [2, -2] + [0, 4] = [1, 3]; w = [5, -2] + 2 [1, 3] = [7, 4]
    w2 = restored.aggregate(w1, [_update(2, 1, {"w": [0.0, 4.0]})])
    np.testing.assert_allclose(w2["w"], [7.0, 4.0])
    np.testing.assert_allclose(restored.aggregator.state_dict()["velocity"]["w"], [1.0, 3.0])


def test_fedavgm_without_momentum_is_fedavg_exactly():
    updates = _random_updates(2)
    velocity = {"w": np.ones((3, 2), np.float32), "b": np.ones(2, np.float32)}  # any old velocity is forgotten
    new, v = fedavgm(GLOBAL, updates, velocity, 0.0, 1.0)
    _assert_bit_equal(new, fedavg(GLOBAL, updates))
    method = build_method("fedavgm", {"server_momentum": 0.0}, 10)
    _assert_bit_equal(method.aggregate(GLOBAL, updates), fedavg(GLOBAL, updates))


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"server_momentum": 1.5}, r"server_momentum: must be a number in \[0, 1\) \(got 1.5\)"),
        ({"server_momentum": 1.0}, r"server_momentum: must be a number in \[0, 1\)"),
        ({"server_momentum": -0.1}, r"server_momentum: must be a number in \[0, 1\)"),
        ({"server_momentum": True}, r"server_momentum: must be a number in \[0, 1\)"),
        ({"server_lr": 0.0}, r"server_lr: must be a number > 0 \(got 0.0\)"),
        ({"server_lr": float("inf")}, r"server_lr: must be a finite number > 0 \(got inf\)"),
        ({"server_lr": "1"}, r"server_lr: must be a number > 0"),
    ],
)
def test_fedavgm_validates_hyperparameters(params, message):
    with pytest.raises(ValueError, match=message):
        build_method("fedavgm", params, 10)
