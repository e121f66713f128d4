"""FedGH (gradient harmonization): the projection of conflicting deltas by hand on tiny arrays, through the pure
function and through the registered method's ServerAggregator; FedAvg when nothing conflicts; the BatchNorm rule;
the official (FedLD code) variant by hand, its EMA history through a checkpoint."""

from __future__ import annotations

import numpy as np
import pytest

from raytune_fl.aggregators.fedavg import fedavg
from raytune_fl.aggregators.fedgh import fedgh, fedgh_official, harmonized_coefficients
from raytune_fl.engine.checkpoint import load_state, save_state
from raytune_fl.methods import METHODS, MethodContext, build_method
from raytune_fl.types import ClientUpdate


def _update(cid: int, n: int, delta: dict, buffers: dict | None = None, dtype=np.float64) -> ClientUpdate:
    return ClientUpdate(cid, n, 1, {k: np.asarray(v, dtype) for k, v in delta.items()}, buffers or {}, {})


def _vector_updates(deltas, sizes=None, ids=None) -> list[ClientUpdate]:
    sizes = sizes or [1] * len(deltas)
    ids = ids if ids is not None else range(len(deltas))
    return [_update(cid, n, {"w": d}) for cid, n, d in zip(ids, sizes, deltas)]


ZERO = {"w": np.zeros(2)}


# --- the worked check -------------------------------------------------------------------------------------

# Delta_1 = (1, 0), Delta_2 = (-1, 1), equal weights. <D1, D2> = -1 < 0: a conflict.
#   D1' = D1 - (-1 / ||D2||^2 = -1/2) D2 = (1, 0) + 1/2 (-1, 1) = (0.5, 0.5)
#   D2' = D2 - (-1 / ||D1||^2 = -1) D1 = (-1, 1) + (1, 0) = (0, 1)
#   mean = (0.25, 0.75)


def test_worked_check_through_the_aggregator_function():
    new = fedgh(ZERO, _vector_updates([(1, 0), (-1, 1)]))
    np.testing.assert_allclose(new["w"], [0.25, 0.75], atol=1e-12)


def test_worked_check_through_the_registered_method():
    # the same vectors split over two tensors: the inner products run over the whole flattened delta
    method = build_method("fedgh", {}, 10)
    weights = {"w": np.array([2.0], np.float32), "b": np.array([-1.0], np.float32)}
    updates = [
        _update(1, 5, {"w": [-1.0], "b": [1.0]}, dtype=np.float32),  # listed out of order: sorted by client id
        _update(0, 5, {"w": [1.0], "b": [0.0]}, dtype=np.float32),
    ]
    new = method.aggregate(weights, updates)
    np.testing.assert_allclose(new["w"], [2.25], rtol=1e-6)
    np.testing.assert_allclose(new["b"], [-0.25], rtol=1e-6)
    assert new["w"].dtype == np.float32
    assert method.terms == () and method.aggregator.state_dict() == {}


def test_sample_weights():
    # n = (1, 3): 1/4 (0.5, 0.5) + 3/4 (0, 1) = (0.125, 0.875)
    new = fedgh(ZERO, _vector_updates([(1, 0), (-1, 1)], sizes=[1, 3]))
    np.testing.assert_allclose(new["w"], [0.125, 0.875], atol=1e-12)


def test_exactly_opposite_deltas_of_equal_weight_give_no_update():
    # D2 = -D1: D1' = D1 - (-||D1||^2 / ||D1||^2) (-D1) = 0, and symmetrically D2' = 0
    weights = {"w": np.array([0.3, -0.7])}
    new = fedgh(weights, _vector_updates([(0.2, -0.4), (-0.2, 0.4)], sizes=[7, 7]))
    np.testing.assert_allclose(new["w"], weights["w"], atol=1e-15)


def test_no_conflict_is_fedavg_exactly():
    rng = np.random.default_rng(0)
    base = rng.uniform(0.1, 1.0, (3, 2)).astype(np.float32)  # positive entries: every inner product is > 0
    updates = [
        _update(cid, n, {"w": base * (cid + 1), "b": base[0]}, dtype=np.float32) for cid, n in enumerate([3, 9, 5])
    ]
    weights = {"w": rng.normal(size=(3, 2)).astype(np.float32), "b": np.zeros(2, np.float32)}
    new, expected = fedgh(weights, updates), fedavg(weights, updates)
    for key in weights:
        assert np.array_equal(new[key], expected[key]), key
    # orthogonal deltas do not conflict either
    assert np.array_equal(fedgh(ZERO, _vector_updates([(1, 0), (0, 1)]))["w"], [0.5, 0.5])


# --- three clients: pairs in client-id order, projections along the ORIGINAL deltas ------------------------

# D1 = (1, 0), D2 = (-1, 1), D3 = (1, -1). Original inner products: <D1,D2> = -1, <D1,D3> = 1, <D2,D3> = -2;
# ||D1||^2 = 1, ||D2||^2 = 2, ||D3||^2 = 2.
#   pair (1, 2) conflicts: D1' = (1, 0) + 1/2 (-1, 1) = (0.5, 0.5);  D2' = (-1, 1) + (1, 0) = (0, 1)
#   pair (1, 3) does not conflict (1 > 0)
#   pair (2, 3) conflicts: D2' = (0, 1) - <(0, 1), D3> / 2 * D3 = (0, 1) + 1/2 (1, -1) = (0.5, 0.5)
#                          D3' = (1, -1) - <(1, -1), D2> / 2 * D2 = (1, -1) + (-1, 1) = (0, 0)
#   equal weights: mean = ((0.5 + 0.5 + 0) / 3, (0.5 + 0.5 + 0) / 3) = (1/3, 1/3)
# Every projection against the untouched originals at once would give D2' = (-1, 1) + D1 + D3 = (1, 0) and
# the mean (0.5, 1/6): the visiting order matters.
#
# The same vectors under other client ids, D3 as client 0, D1 as client 1, D2 as client 2:
#   pair (0, 1) = (D3, D1): 1 > 0, no conflict
#   pair (0, 2) = (D3, D2): -2: D3' = (1, -1) + (-1, 1) = (0, 0);  D2' = (-1, 1) + (1, -1) = (0, 0)
#   pair (1, 2) = (D1, D2): -1 on the originals: D1' = (1, 0) - <(1, 0), D2> / 2 * D2 = (0.5, 0.5);
#                           D2' = (0, 0) - <(0, 0), D1> * D1 = (0, 0)
#   mean = (0.5 / 3, 0.5 / 3) = (1/6, 1/6)
THREE = [(1, 0), (-1, 1), (1, -1)]


def test_three_clients_in_client_id_order():
    new = fedgh(ZERO, _vector_updates(THREE))
    np.testing.assert_allclose(new["w"], [1 / 3, 1 / 3], atol=1e-12)
    shuffled = list(reversed(_vector_updates(THREE)))  # arrival order does not matter, client ids do
    np.testing.assert_allclose(fedgh(ZERO, shuffled)["w"], [1 / 3, 1 / 3], atol=1e-12)


def test_three_clients_other_ids_change_the_pair_order():
    new = fedgh(ZERO, _vector_updates(THREE, ids=[1, 2, 0]))
    np.testing.assert_allclose(new["w"], [1 / 6, 1 / 6], atol=1e-12)


def test_harmonized_coefficients_by_hand():
    # the three-client case above: D1' = D1 + 1/2 D2, D2' = D1 + D2 + 1/2 D3, D3' = D2 + D3
    g = np.array(THREE, np.float64)
    coeffs = harmonized_coefficients(g @ g.T)
    np.testing.assert_allclose(coeffs, [[1, 0.5, 0], [1, 1, 0.5], [0, 1, 1]], atol=1e-12)
    np.testing.assert_allclose(coeffs @ g, [[0.5, 0.5], [0.5, 0.5], [0, 0]], atol=1e-12)


def test_zero_delta_conflicts_with_nothing():
    new = fedgh(ZERO, _vector_updates([(0, 0), (1, 2)], sizes=[1, 1]))
    np.testing.assert_allclose(new["w"], [0.5, 1.0], atol=1e-12)


# --- BatchNorm buffers --------------------------------------------------------------------------------------


def test_batchnorm_statistics_are_averaged_never_projected_and_num_batches_tracked_copied():
    weights = {
        "bn.weight": np.array([0.0, 0.0]),
        "bn.running_mean": np.array([0.5]),
        "bn.running_var": np.array([1.0]),
        "bn.num_batches_tracked": np.array(10, np.int64),
    }

    def update(cid, n, w, mean, var, tracked):
        buffers = {"bn.num_batches_tracked": np.array(tracked, np.int64)}
        return _update(cid, n, {"bn.weight": w, "bn.running_mean": [mean], "bn.running_var": [var]}, buffers)

    # the weights conflict as in the worked check (n = 1, 3: (0.125, 0.875)); the running statistics' deltas
    # conflict hugely (+4 against -4/3 on running_mean) but neither count in the inner products nor get
    # projected: running_mean 0.5 + 1/4 * 4 + 3/4 * (-4/3) = 0.5, running_var 1 + 1/4 * (-0.8) + 3/4 * 0.4 = 1.1.
    updates = [update(5, 3, [-1.0, 1.0], -4 / 3, 0.4, 14), update(2, 1, [1.0, 0.0], 4.0, -0.8, 12)]
    new = fedgh(weights, updates)
    np.testing.assert_allclose(new["bn.weight"], [0.125, 0.875], atol=1e-12)
    np.testing.assert_allclose(new["bn.running_mean"], [0.5], atol=1e-12)
    np.testing.assert_allclose(new["bn.running_var"], [1.1], atol=1e-12)
    assert new["bn.num_batches_tracked"] == 12 and new["bn.num_batches_tracked"].dtype == np.int64  # lowest id's


def test_registration():
    spec = METHODS.get("fedgh")
    assert list(spec.params) == ["fidelity"] and spec.as_fedavg is None
    with pytest.raises(ValueError, match="fidelity"):
        spec.resolve({"fidelity": "pcgrad"})


def test_refuses_zero_updates_and_zero_samples():
    with pytest.raises(ValueError, match="zero client updates"):
        fedgh(ZERO, [])
    with pytest.raises(ValueError, match="no samples"):
        fedgh(ZERO, _vector_updates([(1, 0)], sizes=[0]))


# --- the official variant (FedLD's code) ----------------------------------------------------------------------

# Round 2 with history h = (1, 0), M = 4, D0 = (2, 1), D1 = (-1, 1), D2 = (1, -2), D3 = (0, 1).
# Projections on h: 2, -1, 1, 0 -> ranked D0, D2, D3, D1: pairs (D0, D1) and (D2, D3).
#   (D0, D1): <,> = -1: D0' = (2, 1) + 1/2 (-1, 1) = (1.5, 1.5), D1' = (-1, 1) + 1/5 (2, 1) = (-0.6, 1.2);
#             sum (0.9, 2.7)
#   (D2, D3): <,> = -2: D2' = (1, -2) + 2 (0, 1) = (1, 0), D3' = (0, 1) + 2/5 (1, -2) = (0.4, 0.2); sum (1.4, 0.2)
#   two remain: <(0.9, 2.7), (1.4, 0.2)> = 1.8 > 0: sum (2.3, 2.9), / M = 4: step (0.575, 0.725)
#   history: 0.99 (1, 0) + 0.01 (0.575, 0.725) = (0.99575, 0.00725)
ROUND2 = [(2, 1), (-1, 1), (1, -2), (0, 1)]
STEP2 = [0.575, 0.725]
HISTORY2 = [0.99575, 0.00725]


def test_official_first_round_is_the_plain_mean_and_starts_the_history():
    weights = {
        "w": np.zeros(2),
        "bn.running_mean": np.zeros(1),
        "bn.num_batches_tracked": np.array(3, np.int64),
    }
    updates = [
        _update(cid, n, {"w": d, "bn.running_mean": [m]}, {"bn.num_batches_tracked": np.array(t, np.int64)})
        for cid, n, d, m, t in [(1, 9, (1, 0), 2.0, 8), (0, 1, (-1, 1), 0.0, 5)]
    ]
    new, history = fedgh_official(weights, updates, {}, 2)
    np.testing.assert_allclose(new["w"], [0.0, 0.5])  # unweighted, no projection in the first round
    np.testing.assert_allclose(new["bn.running_mean"], [1.0])  # per tensor, unweighted (the code's)
    assert new["bn.num_batches_tracked"] == 5
    np.testing.assert_allclose(history["w"], [0.0, 0.5])
    np.testing.assert_allclose(history["bn.running_mean"], [1.0])
    assert "bn.num_batches_tracked" not in history


def test_official_pairs_highest_with_lowest_by_hand():
    new, history = fedgh_official(ZERO, _vector_updates(ROUND2), {"w": np.array([1.0, 0.0])}, 4)
    np.testing.assert_allclose(new["w"], STEP2, rtol=1e-6)
    np.testing.assert_allclose(history["w"], HISTORY2, rtol=1e-6)


def test_official_odd_count_and_final_pair_order():
    # three clients, h = (1, 0), M = 3: D0 = (2, 0), D1 = (-1, 1), D2 = (0, 5); projections 2, -1, 0:
    #   pair (D0, D1): <,> = -2: D0' = (2, 0) + (-1, 1) = (1, 1), D1' = (-1, 1) + 1/2 (2, 0) = (0, 1); sum (1, 2)
    #   D2 passes alone; two remain: <(1, 2), (0, 5)> = 10 > 0: (1, 7) / 3
    new, _ = fedgh_official(ZERO, _vector_updates([(2, 0), (-1, 1), (0, 5)]), {"w": np.array([1.0, 0.0])}, 3)
    np.testing.assert_allclose(new["w"], [1 / 3, 7 / 3], rtol=1e-6)
    # two clients go straight to the final pair, where the second is projected off the first's projected value:
    #   g0 = (1, 0), g1 = (-1, 1), <,> = -1: g0' = (1, 0) + 1/2 (-1, 1) = (0.5, 0.5),
    #   g1' = (-1, 1) + 1 / ||g0'||^2 (0.5, 0.5) = (-1, 1) + 2 (0.5, 0.5) = (0, 2); (0.5, 2.5) / 2 = (0.25, 1.25)
    #   (the paper's form gives (0.25, 0.75))
    new, _ = fedgh_official(ZERO, _vector_updates([(1, 0), (-1, 1)]), {"w": np.array([1.0, 0.0])}, 2)
    np.testing.assert_allclose(new["w"], [0.25, 1.25], rtol=1e-6)


def test_official_divides_by_all_clients_and_refuses_more_updates():
    new, _ = fedgh_official(ZERO, _vector_updates([(1, 0), (-1, 1)]), {"w": np.array([1.0, 0.0])}, 5)
    np.testing.assert_allclose(new["w"], [0.1, 0.5], rtol=1e-6)  # (0.5, 2.5) / 5
    with pytest.raises(ValueError, match="at most 1 clients"):
        fedgh_official(ZERO, _vector_updates([(1, 0), (-1, 1)]), {}, 1)


def test_official_history_through_the_method_and_a_checkpoint(tmp_path):
    context = MethodContext(num_classes=10, num_clients=4)
    live = build_method("fedgh", {"fidelity": "official"}, context)
    round1 = _vector_updates([(1, 0)] * 4, sizes=[1, 2, 3, 4])
    weights = live.aggregate(ZERO, round1)  # mean (1, 0); history (1, 0)
    np.testing.assert_allclose(weights["w"], [1.0, 0.0])
    np.testing.assert_allclose(live.aggregator.state_dict()["history"]["w"], [1.0, 0.0])
    save_state({"aggregator": live.aggregator.state_dict(), "weights": weights}, tmp_path)
    restored = build_method("fedgh", {"fidelity": "official"}, context)
    state = load_state(tmp_path)
    restored.aggregator.load_state_dict(state["aggregator"])
    for method in (live, restored):
        new = method.aggregate(state["weights"], _vector_updates(ROUND2))
        np.testing.assert_allclose(new["w"], np.add([1.0, 0.0], STEP2), rtol=1e-6)
        np.testing.assert_allclose(method.aggregator.state_dict()["history"]["w"], HISTORY2, rtol=1e-6)
    fresh = build_method("fedgh", {"fidelity": "official"}, context)  # no history: the first round's mean
    np.testing.assert_allclose(fresh.aggregate(ZERO, _vector_updates(ROUND2))["w"], [0.5, 0.25])
