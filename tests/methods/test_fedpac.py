"""FedPAC: the maths by hand (client statistics and global centroids, the simplex QP against brute force over every
support set, the classifier mixing weights and the classifier combination), then through the platform (the local
loop's phases, the client's statistics and alignment term, the server's centroids and mixed classifiers, personalised
evaluation, and client and server state through a checkpoint)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from raytune_fl.aggregators.fedavg import fedavg
from raytune_fl.aggregators.fedpac import (
    ClientStatistics,
    client_statistics,
    global_centroids,
    mix_classifiers,
    mix_weights,
    simplex_qp,
)
from raytune_fl.config import ExperimentConfig
from raytune_fl.engine.local import LocalData, LocalSettings, train_local
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
from tests.support.resume_check import small_federation, straight_and_resumed, untimed

# ---- the maths by hand

# --- client statistics --------------------------------------------------------------------------------------

# d = 1, class 0 features {1, 3}, class 1 features {2}, n = 3:
#   p = (2/3, 1/3), mu = (2, 2), E_0 z^2 = (1 + 9) / 2 = 5, E_1 z^2 = 4
#   h = (2/3 * 2, 1/3 * 2) = (4/3, 2/3)
#   V = 1/3 * (2/3 * 5 - 4/9 * 4 + 1/3 * 4 - 1/9 * 4) = 1/3 * (30 - 16 + 12 - 4) / 9 = 22/27


def test_client_statistics_hand_check():
    stats = client_statistics(np.array([[1.0], [2.0], [3.0]]), np.array([0, 1, 0]), 2)
    assert isinstance(stats, ClientStatistics)
    np.testing.assert_allclose(stats.h, [[4 / 3], [2 / 3]], atol=1e-15)
    assert stats.v == pytest.approx(22 / 27, abs=1e-15)
    assert stats.v == pytest.approx(0.814815, abs=1e-6)
    np.testing.assert_allclose(stats.class_means, [[2.0], [2.0]], atol=1e-15)
    assert stats.class_counts.tolist() == [2, 1] and stats.class_counts.dtype == np.int64


# C = 3, d = 2, class 1 absent; class 0 features (1, 0), (3, 2), class 2 feature (0, 4); n = 3:
#   p = (2/3, 0, 1/3), mu_0 = (2, 1), mu_2 = (0, 4)
#   h = ((4/3, 2/3), (0, 0), (0, 4/3))
#   E_0 ||z||^2 = (1 + 13) / 2 = 7, ||mu_0||^2 = 5; E_2 ||z||^2 = 16 = ||mu_2||^2
#   V = 1/3 * (2/3 * 7 - 4/9 * 5 + 1/3 * 16 - 1/9 * 16) = 1/3 * (42 - 20 + 48 - 16) / 9 = 2


def test_client_statistics_absent_class_and_several_dimensions():
    z = np.array([[1, 0], [0, 4], [3, 2]], np.float32)
    stats = client_statistics(z, np.array([0, 2, 0]), 3)
    np.testing.assert_allclose(stats.h, [[4 / 3, 2 / 3], [0, 0], [0, 4 / 3]], atol=1e-15)
    assert stats.v == pytest.approx(2.0, abs=1e-14)
    np.testing.assert_allclose(stats.class_means, [[2, 1], [0, 0], [0, 4]], atol=1e-15)
    assert stats.class_counts.tolist() == [2, 0, 1]
    assert stats.h.dtype == np.float64 and stats.class_means.dtype == np.float64
    with pytest.raises(AttributeError):  # frozen
        stats.v = 0.0  # type: ignore[misc]


def test_client_statistics_refuses_bad_inputs():
    z = np.zeros((2, 3))
    with pytest.raises(ValueError, match=r"\[0, 2\)"):
        client_statistics(z, np.array([0, 2]), 2)
    with pytest.raises(ValueError, match=r"\[0, 2\)"):
        client_statistics(z, np.array([-1, 0]), 2)
    with pytest.raises(ValueError, match="zero samples"):
        client_statistics(np.zeros((0, 3)), np.zeros(0, np.int64), 2)
    with pytest.raises(ValueError, match="labels must be"):
        client_statistics(z, np.array([0, 1, 1]), 2)
    with pytest.raises(ValueError, match="integers"):
        client_statistics(z, np.array([0.0, 1.0]), 2)


# --- global centroids ---------------------------------------------------------------------------------------

# two clients, C = 3, d = 1: A means (1, NaN, 0) counts (1, 0, 0) (NaN: garbage in an absent row),
# B means (4, 7, 0) counts (2, 3, 0):
#   c_0 = (1 * 1 + 2 * 4) / 3 = 3, c_1 = (3 * 7) / 3 = 7, class 2 held by nobody: 0, not present


def test_global_centroids_count_weighted_by_hand():
    means = [np.array([[1.0], [np.nan], [0.0]]), np.array([[4.0], [7.0], [0.0]])]
    counts = [np.array([1, 0, 0]), np.array([2, 3, 0])]
    centroids, present = global_centroids(means, counts)
    np.testing.assert_allclose(centroids, [[3.0], [7.0], [0.0]], atol=1e-15)
    assert present.dtype == np.bool_ and present.tolist() == [True, True, False]


def test_global_centroids_from_client_statistics():
    # client 1: class 0 {(0, 2)}; client 2: class 0 {(3, 2), (3, 5)}, class 1 {(1, 1)}
    # c_0 = ((0, 2) + (3, 2) + (3, 5)) / 3 = (2, 3), c_1 = (1, 1)
    s1 = client_statistics(np.array([[0.0, 2.0]]), np.array([0]), 2)
    s2 = client_statistics(np.array([[3.0, 2.0], [1.0, 1.0], [3.0, 5.0]]), np.array([0, 1, 0]), 2)
    centroids, present = global_centroids([s1.class_means, s2.class_means], [s1.class_counts, s2.class_counts])
    np.testing.assert_allclose(centroids, [[2.0, 3.0], [1.0, 1.0]], atol=1e-15)
    assert present.all()
    with pytest.raises(ValueError):
        global_centroids([s1.class_means], [])


# --- the simplex QP -----------------------------------------------------------------------------------------


def _brute_force_minimum(p: np.ndarray) -> float:
    """min a^T P a over the simplex: every support set's equality-constrained minimiser, the feasible ones kept."""
    m = len(p)
    best = np.inf
    for k in range(1, m + 1):
        for support in itertools.combinations(range(m), k):
            idx = list(support)
            kkt = np.block([[p[np.ix_(idx, idx)], np.ones((k, 1))], [np.ones((1, k)), np.zeros((1, 1))]])
            rhs = np.r_[np.zeros(k), 1.0]
            sol = np.linalg.lstsq(kkt, rhs, rcond=None)[0]
            if not np.allclose(kkt @ sol, rhs, atol=1e-9) or sol[:k].min() < -1e-12:
                continue
            a = np.zeros(m)
            a[idx] = sol[:k]
            best = min(best, float(a @ p @ a))
    return best


def _assert_on_simplex(a: np.ndarray, m: int) -> None:
    assert a.shape == (m,) and a.dtype == np.float64
    assert a.min() >= 0.0 and abs(a.sum() - 1.0) < 1e-12


def _random_cases():
    rng = np.random.default_rng(20230501)
    for m in range(2, 7):
        for _ in range(8):
            g = rng.normal(size=(m, m))
            yield "full rank", g.T @ g
            g = rng.normal(size=(rng.integers(1, m), m))  # rank < m: singular
            yield "singular", g.T @ g
            g = rng.normal(size=(m, m))
            g[:, rng.integers(1, m)] = g[:, 0]  # two identical points: identical rows (and columns) of P
            yield "identical rows", g.T @ g
            g = rng.normal(size=(3, m)) + 5.0  # points far from the origin: the optimum is interior to a face
            yield "shifted", g.T @ g


def test_simplex_qp_matches_brute_force_over_every_support():
    kinds = set()
    for kind, p in _random_cases():
        a = simplex_qp(p)
        _assert_on_simplex(a, len(p))
        assert a @ p @ a == pytest.approx(_brute_force_minimum(p), abs=1e-9), kind
        kinds.add(kind)
    assert kinds == {"full rank", "singular", "identical rows", "shifted"}


def test_simplex_qp_by_hand():
    # diagonal P: a_j proportional to 1 / P_jj; diag(1, 2) -> (2/3, 1/3); diag(1, 2, 4) -> (4, 2, 1) / 7
    np.testing.assert_allclose(simplex_qp(np.diag([1.0, 2.0])), [2 / 3, 1 / 3], atol=1e-15)
    np.testing.assert_allclose(simplex_qp(np.diag([1.0, 2.0, 4.0])), [4 / 7, 2 / 7, 1 / 7], atol=1e-15)
    # points (1, 0), (1, 0), (0, 1): identical rows; any split s between the first two, s^2 + (1 - s)^2 -> s = 1/2
    p = np.array([[1.0, 1.0, 0.0], [1.0, 1.0, 0.0], [0.0, 0.0, 1.0]])
    a = simplex_qp(p)
    _assert_on_simplex(a, 3)
    assert a[0] + a[1] == pytest.approx(0.5, abs=1e-15) and a[2] == pytest.approx(0.5, abs=1e-15)
    # points 1 and 3 on a line: the hull holds the origin, weights (3/4, 1/4) on the points (-1) and (3)
    np.testing.assert_allclose(simplex_qp(np.array([[1.0, -3.0], [-3.0, 9.0]])), [0.75, 0.25], atol=1e-15)
    # a point that dominates: (0) and (5) -> all weight on the origin
    np.testing.assert_allclose(simplex_qp(np.array([[0.0, 0.0], [0.0, 25.0]])), [1.0, 0.0], atol=0)


def test_simplex_qp_trivial_and_bad_inputs():
    assert simplex_qp(np.array([[3.0]])).tolist() == [1.0]
    _assert_on_simplex(simplex_qp(np.zeros((4, 4))), 4)
    with pytest.raises(ValueError, match="square"):
        simplex_qp(np.zeros((2, 3)))
    with pytest.raises(ValueError, match="finite"):
        simplex_qp(np.array([[1.0, np.nan], [np.nan, 1.0]]))


def test_simplex_qp_fifty_points_meets_the_optimality_conditions_and_is_deterministic():
    # convex problem: a is optimal iff (P a)_j >= a^T P a for every j, with equality on the support
    rng = np.random.default_rng(7)
    g = rng.normal(size=(20, 50)) + 0.5  # rank 20: singular
    p = g.T @ g
    a = simplex_qp(p)
    _assert_on_simplex(a, 50)
    grad, value = p @ a, a @ p @ a
    assert grad.min() >= value - 1e-9 * np.trace(p)
    np.testing.assert_allclose(grad[a > 0], value, atol=1e-9 * np.trace(p))
    assert np.array_equal(simplex_qp(p.copy()), a)


# --- mixing weights -----------------------------------------------------------------------------------------

# two participants, reference i: P = [[V_i, 0], [0, V_j + delta]], delta = sum_k ||h_i[k] - h_j[k]||^2,
# a_i = (V_j + delta) / (V_i + V_j + delta). V = (0.4, 0.1), delta = 0.1:
#   row 0: a_0 = 0.2 / 0.6 = 1/3, a_1 = 2/3
#   row 1 (reference 1: P = [[0.4 + 0.1, 0], [0, 0.1]]): a_0 = 0.1 / 0.6 = 1/6, a_1 = 5/6


def test_mix_weights_two_clients_by_hand():
    h = np.array([[[0.0]], [[np.sqrt(0.1)]]])  # C = 1, d = 1
    np.testing.assert_allclose(mix_weights(np.array([0.4, 0.1]), h), [[1 / 3, 2 / 3], [1 / 6, 5 / 6]], atol=1e-12)
    # the same delta = 0.01 + 0.04 + 0.01 + 0.04 = 0.1 spread over C = 2 classes, d = 2
    h = np.array([np.zeros((2, 2)), [[0.1, 0.2], [0.1, 0.2]]])
    np.testing.assert_allclose(mix_weights(np.array([0.4, 0.1]), h), [[1 / 3, 2 / 3], [1 / 6, 5 / 6]], atol=1e-12)


# three participants, C = 1, d = 1, h = (0, 1, -1), V = (1, 1, 1):
#   reference 0: h_0 - h_j = (0, -1, 1); D = [[0, 0, 0], [0, 1, -1], [0, -1, 1]], P = [[1, 0, 0], [0, 2, -1],
#   [0, -1, 2]]. By symmetry a = (1 - 2t, t, t): (1 - 2t)^2 + 2t^2 is least at t = 1/3: (1/3, 1/3, 1/3)
#   (a diagonal-only D would give (1/2, 1/4, 1/4), a wrong sign on D's off-diagonal t = 1/5)
#   reference 1: h_1 - h_j = (1, 0, 2); P = [[2, 0, 2], [0, 1, 0], [2, 0, 5]]. On support {0, 1}: diag(2, 1) gives
#   (1/3, 2/3), lambda = 2/3, and (P a)_2 = 2/3 >= lambda: optimal, (1/3, 2/3, 0)
#   reference 2: the mirror image: (1/3, 0, 2/3)


def test_mix_weights_three_clients_by_hand():
    weights = mix_weights(np.ones(3), np.array([[[0.0]], [[1.0]], [[-1.0]]]))
    np.testing.assert_allclose(weights, [[1 / 3, 1 / 3, 1 / 3], [1 / 3, 2 / 3, 0], [1 / 3, 0, 2 / 3]], atol=1e-12)


def test_mix_weights_threshold_zeroes_and_renormalises():
    # equal h: D = 0, P = diag(V), a_j proportional to 1 / V_j.
    # V = (1, 1, 2000): (1, 1, 1/2000) / 2.0005, the last 0.00024994 < 1e-3 -> zeroed -> (1/2, 1/2, 0) exactly
    # (without renormalising: 0.49988 each)
    h = np.zeros((3, 2, 2))
    np.testing.assert_allclose(mix_weights(np.array([1.0, 1.0, 2000.0]), h), [[0.5, 0.5, 0.0]] * 3, atol=1e-15)
    # V = (1, 1, 400): the last 0.0025 / 2.0025 = 0.0012484 >= 1e-3 stays
    expected = [0.49937578027465668, 0.49937578027465668, 0.0012484394506866417]
    np.testing.assert_allclose(mix_weights(np.array([1.0, 1.0, 400.0]), h), [expected] * 3, rtol=1e-12)


def test_mix_weights_rows_are_distributions():
    rng = np.random.default_rng(3)
    weights = mix_weights(rng.uniform(0.01, 1.0, 7), rng.normal(size=(7, 3, 4)))
    assert weights.shape == (7, 7)
    assert weights.min() >= 0.0
    np.testing.assert_allclose(weights.sum(axis=1), 1.0, atol=1e-12)
    assert np.all((weights == 0.0) | (weights >= 1e-3))


def test_mix_weights_single_participant():
    assert mix_weights(np.array([0.3]), np.ones((1, 2, 3))).tolist() == [[1.0]]
    assert mix_weights(np.array([-0.3]), np.ones((1, 2, 3))).tolist() == [[1.0]]  # through the guard


def test_mix_weights_eigenvalue_guard():
    h = np.zeros((2, 1, 1))  # D = 0: P = diag(V)
    # V = (-1, 0.5): eigenvalue -1 < 0 -> rebuilt from {0.5}: diag(0, 0.5) -> all weight on client 0, both rows
    # (row 1 is not e_1: the rebuilt P was used)
    np.testing.assert_allclose(mix_weights(np.array([-1.0, 0.5]), h), [[1.0, 0.0], [1.0, 0.0]], atol=1e-15)
    # V = (-1, 0.005): 0.005 < 0.01 is dropped too, nothing is left -> each client keeps its own classifier
    assert mix_weights(np.array([-1.0, 0.005]), h).tolist() == [[1.0, 0.0], [0.0, 1.0]]
    # no negative eigenvalue: no guard, even with every eigenvalue below 0.01 -> a_j proportional to 1 / V_j
    np.testing.assert_allclose(mix_weights(np.array([0.002, 0.006]), h), [[0.75, 0.25]] * 2, atol=1e-12)


def test_mix_weights_refuses_bad_inputs():
    with pytest.raises(ValueError):
        mix_weights(np.ones(2), np.zeros((3, 1, 1)))
    with pytest.raises(ValueError, match="finite"):
        mix_weights(np.array([1.0, np.nan]), np.zeros((2, 1, 1)))


# --- mixing classifiers -------------------------------------------------------------------------------------

# w_0 = [[1, 2]], b_0 = [1]; w_1 = [[3, -2]], b_1 = [0]
#   row (0.25, 0.75): w = (0.25 + 2.25, 0.5 - 1.5) = (2.5, -1), b = 0.25
#   row (1, 0): client 0's own


def test_mix_classifiers_by_hand():
    classifiers = [
        {"fc.weight": np.array([[1.0, 2.0]], np.float32), "fc.bias": np.array([1.0], np.float32)},
        {"fc.weight": np.array([[3.0, -2.0]], np.float32), "fc.bias": np.array([0.0], np.float32)},
    ]
    mixed = mix_classifiers(np.array([[0.25, 0.75], [1.0, 0.0]]), classifiers)
    assert len(mixed) == 2
    np.testing.assert_array_equal(mixed[0]["fc.weight"], [[2.5, -1.0]])
    np.testing.assert_array_equal(mixed[0]["fc.bias"], [0.25])
    assert mixed[0]["fc.weight"].dtype == np.float32 and mixed[0]["fc.bias"].dtype == np.float32
    for key in classifiers[0]:
        assert np.array_equal(mixed[1][key], classifiers[0][key])


def test_mix_classifiers_sums_in_float64_and_skips_zero_weights():
    # float32: 1e8 + 1 - 1e8 loses the 1 when summed in float32; float64 keeps it
    classifiers = [{"w": np.array([1e8], np.float32)}, {"w": np.array([1.0], np.float32)}]
    classifiers.append({"w": np.array([-1e8], np.float32)})
    assert mix_classifiers(np.array([[1.0, 1.0, 1.0]]), classifiers)[0]["w"].tolist() == [1.0]
    # a NaN classifier with weight 0 does not leak
    nan = [{"w": np.array([2.0])}, {"w": np.array([np.nan])}]
    assert mix_classifiers(np.array([[1.0, 0.0]]), nan)[0]["w"].tolist() == [2.0]
    with pytest.raises(ValueError, match="shape"):
        mix_classifiers(np.array([[0.5, 0.5]]), [{"w": np.zeros(2)}, {"w": np.zeros(3)}])
    with pytest.raises(ValueError, match="keys"):
        mix_classifiers(np.array([[0.5, 0.5]]), [{"w": np.zeros(2)}, {"v": np.zeros(2)}])


# ---- through the platform

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
    result = train_local(model, method, LocalData(x, y, 10), SETTINGS, torch.Generator().manual_seed(0))
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
