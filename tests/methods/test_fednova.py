"""FedNova: effective steps and the normalised average by hand, FedAvg at equal steps, the clients' momentum."""

from __future__ import annotations

import numpy as np
import pytest

from raytune_fl.aggregators.fedavg import fedavg
from raytune_fl.aggregators.fednova import effective_steps, fednova
from raytune_fl.methods import build_method
from raytune_fl.methods.base import MethodContext
from tests.support.methods import GLOBAL
from tests.support.methods import assert_bit_equal as _assert_bit_equal
from tests.support.methods import f32 as _f32
from tests.support.methods import random_updates as _random_updates
from tests.support.methods import update as _update


def test_effective_steps():
    assert effective_steps(3, 0.0) == 3.0 and effective_steps(0, 0.9) == 0.0
    # rho = 0.5: 1, then + (1 - 0.25) / 0.5 = 2.5, then + (1 - 0.125) / 0.5 = 4.25
    assert [effective_steps(k, 0.5) for k in (1, 2, 3)] == pytest.approx([1.0, 2.5, 4.25])
    with pytest.raises(ValueError, match=r"momentum must be in \[0, 1\)"):
        effective_steps(1, 1.0)


def test_fednova_by_hand():
    w_t = {"w": _f32([1.0, 1.0]), "n": np.array(5, np.int64)}
    updates = [
        _update(0, 1, {"w": [3.0, -1.0]}, steps=1, buffers={"n": np.array(7, np.int64)}),
        _update(1, 1, {"w": [3.0, 3.0]}, steps=3, buffers={"n": np.array(9, np.int64)}),
    ]
    # rho = 0: a = [1, 3], p = [1/2, 1/2]; tau_eff = 2; mean delta/a = ([3, -1] + [1, 1]) / 2 = [2, 0]
    # w = [1, 1] + 2 * [2, 0] = [5, 1]   (FedAvg: [1, 1] + [3, 1] = [4, 2])
    new = fednova(w_t, updates, momentum=0.0)
    np.testing.assert_allclose(new["w"], [5.0, 1.0], rtol=1e-6)
    assert int(new["n"]) == 7  # integer buffers as FedAvg: the lowest client id's
    # rho = 0.5, steps [1, 2] -> a = [1, 2.5]; n = [3, 1] -> p = [3/4, 1/4]; tau_eff = 0.75 + 0.625 = 1.375
    # deltas [2], [0]: mean delta/a = 3/4 * 2 + 1/4 * 0 = 1.5; w = 0 + 1.375 * 1.5 = 2.0625 (FedAvg: 1.5)
    skewed = [_update(0, 3, {"w": [2.0]}, steps=1), _update(1, 1, {"w": [0.0]}, steps=2)]
    assert float(fednova({"w": _f32([0.0])}, skewed, momentum=0.5)["w"][0]) == pytest.approx(2.0625)


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_fednova_with_equal_steps_is_fedavg_exactly(momentum):
    updates = _random_updates(1, steps=[4] * 5)
    _assert_bit_equal(fednova(GLOBAL, updates, momentum), fedavg(GLOBAL, updates))
    uneven = _random_updates(1, steps=[1, 2, 3, 4, 5])
    assert not np.allclose(fednova(GLOBAL, uneven, momentum)["w"], fedavg(GLOBAL, uneven)["w"])


def test_fednova_client_without_steps_contributes_nothing():
    # client 1 took no step (a = 0): its terms in both sums are 0 (0/0 guarded), its p still counts
    updates = [_update(0, 1, {"w": [2.0]}, steps=2), _update(1, 1, {"w": [5.0]}, steps=0)]  # 5: ignored
    # with p = [1/2, 1/2]: tau_eff = 1/2 * 2 = 1; sum p delta/a = 1/2 * 1 = 0.5; w = 1 * 0.5 = 0.5
    assert float(fednova({"w": _f32([0.0])}, updates)["w"][0]) == pytest.approx(0.5)
    assert float(fednova({"w": _f32([1.0])}, [updates[1]])["w"][0]) == 1.0  # nobody stepped: unchanged


def test_fednova_uses_the_clients_momentum():
    with pytest.raises(ValueError, match=r"momentum must be in \[0, 1\)"):
        build_method("fednova", {}, MethodContext(10, momentum=1.5))
    updates = [_update(0, 3, {"w": [2.0]}, steps=1), _update(1, 1, {"w": [0.0]}, steps=2)]
    method = build_method("fednova", {}, MethodContext(10, momentum=0.5))
    assert float(method.aggregate({"w": _f32([0.0])}, updates)["w"][0]) == pytest.approx(2.0625)  # as by hand
