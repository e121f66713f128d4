"""FedAvg in two stages (aggregators/partial.py): workers' weighted sums, added and divided once, by hand; the same
model as one-stage FedAvg up to float summation; overlapping or missing sums refused."""

from __future__ import annotations

import numpy as np
import pytest

from raytune_fl.aggregators import fedavg
from raytune_fl.aggregators.fedavg import plain_mean_statistics
from raytune_fl.aggregators.partial import combine, fedavg_of_sums, partial_sum, round_sum, summed
from raytune_fl.engine.traffic import upload_bytes
from raytune_fl.types import ClientUpdate


def _update(cid: int, n: int, delta: dict, buffers: dict | None = None) -> ClientUpdate:
    return ClientUpdate(cid, n, 1, {k: np.asarray(v, np.float32) for k, v in delta.items()}, buffers or {}, {})


def test_a_partial_sum_is_the_sample_weighted_sum_by_hand():
    updates = [_update(2, 3, {"w": [3.0, 0.0], "bn.running_mean": [1.0]}), _update(0, 1, {"w": [-1.0, 4.0],
               "bn.running_mean": [3.0]})]  # fmt: skip
    part = partial_sum(updates)
    assert part.client_ids == (0, 2) and part.samples == 4
    np.testing.assert_array_equal(part.weighted["w"], [3 * 3.0 + 1 * -1.0, 3 * 0.0 + 1 * 4.0])  # [8, 4]
    assert part.weighted["w"].dtype == np.float64
    np.testing.assert_array_equal(part.plain["bn.running_mean"], [4.0])  # running statistics: a plain sum too
    assert set(part.plain) == {"bn.running_mean"}
    assert part.delta_bytes == 3 * 4  # one client's float32 delta: 3 numbers


def test_two_workers_sums_give_fedavg_by_hand_and_keep_the_lowest_clients_integer_buffers():
    g = {"w": np.array([1.0, 2.0], np.float32), "steps": np.array(5, np.int64)}
    a = summed([_update(1, 3, {"w": [3.0, 0.0]}, {"steps": np.array(9, np.int64)})])
    b = summed([_update(0, 1, {"w": [-1.0, 4.0]}, {"steps": np.array(7, np.int64)})])
    new = fedavg_of_sums(g, a + b, plain_statistics=False)
    # (3 * [3, 0] + 1 * [-1, 4]) / 4 = [2, 1]
    np.testing.assert_array_equal(new["w"], [3.0, 3.0])
    assert new["w"].dtype == np.float32 and int(new["steps"]) == 7
    assert all(u.delta == {} for u in a + b)


def test_sums_over_any_split_match_one_stage_fedavg_within_float_summation():
    rng = np.random.default_rng(0)
    updates = [
        _update(i, int(rng.integers(1, 60)), {"w": rng.normal(size=(4, 3)), "bn.running_var": rng.normal(size=3)})
        for i in range(7)
    ]
    g = {"w": rng.normal(size=(4, 3)).astype(np.float32), "bn.running_var": np.ones(3, np.float32)}
    one_stage = fedavg(g, updates)
    for split in ([0, 1, 2, 3, 4, 5, 6], [3, 0, 5], [6]):  # worker shares of any shape
        first = [u for u in updates if u.client_id in split]
        second = [u for u in updates if u.client_id not in split]
        messages = summed(first) + (summed(second) if second else [])
        np.testing.assert_allclose(fedavg_of_sums(g, messages, False)["w"], one_stage["w"], rtol=1e-6, atol=1e-6)
        expected = plain_mean_statistics(g, one_stage, updates)["bn.running_var"]
        np.testing.assert_allclose(fedavg_of_sums(g, messages, True)["bn.running_var"], expected, rtol=1e-6)


def test_upload_accounting_counts_a_summed_client_as_having_sent_its_delta():
    updates = [_update(i, 5, {"w": np.ones(6)}, {"steps": np.array(1, np.int64)}) for i in range(3)]
    assert [upload_bytes(u) for u in summed(updates)] == [upload_bytes(u) for u in updates] == [6 * 4 + 8] * 3


def test_overlapping_sums_and_a_round_with_a_client_outside_any_sum_are_refused():
    a = partial_sum([_update(0, 1, {"w": [1.0]}), _update(1, 1, {"w": [1.0]})])
    b = partial_sum([_update(1, 1, {"w": [1.0]})])
    with pytest.raises(ValueError, match=r"overlap: clients \[1\]"):
        combine([a, b])
    mixed = summed([_update(0, 1, {"w": [1.0]})]) + [_update(1, 1, {"w": [1.0]})]
    with pytest.raises(ValueError, match="client 1 sent its own delta"):
        round_sum(mixed)
