"""The FedAvg aggregator: the sample-weighted mean delta by hand, integer buffers, identical updates, order, and
an empty round refused."""

from __future__ import annotations

import numpy as np
import pytest

from raytune_fl.aggregators import fedavg, weighted_mean_delta
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
