"""FedLD (margin control + principal gradient) and FedUV's `fidelity` option, checked by hand on tiny tensors."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from raytune_fl.aggregators import fedavg
from raytune_fl.aggregators.principal import kept_directions, principal_coefficients, principal_gradient
from raytune_fl.engine.local import LocalData, LocalSettings, train_local
from raytune_fl.methods import METHODS, build_method
from raytune_fl.methods.base import Batch, Stateless
from raytune_fl.methods.impl.fedld import PrincipalGradient
from raytune_fl.methods.losses import margin_control, median_sq_distance, rbf_uniformity
from raytune_fl.models import build_model
from raytune_fl.types import ClientUpdate

DT = torch.float64


def _update(cid: int, n: int, delta: dict, buffers: dict | None = None) -> ClientUpdate:
    return ClientUpdate(cid, n, 1, {k: np.asarray(v, np.float32) for k, v in delta.items()}, buffers or {}, {})


def _zeros_like(deltas: dict) -> dict:
    return {k: np.zeros(np.shape(v), np.float32) for k, v in deltas.items()}


def _step(new: dict, old: dict) -> dict:
    return {k: new[k].astype(np.float64) - old[k] for k in old}


# ---------------------------------------------------------------- margin control
def test_margin_paper_is_the_batch_mean_of_log1p_squared_logit_norms():
    # rows (3, 4) and (0, 0): ||.||^2 = 25 and 0 -> mean(log 26, log 1) = log(26) / 2
    logits = torch.tensor([[3.0, 4.0], [0.0, 0.0]], dtype=DT)
    assert margin_control(logits).item() == pytest.approx(math.log(26.0) / 2, abs=1e-12)
    assert margin_control(logits, "paper").item() == pytest.approx(math.log(26.0) / 2, abs=1e-12)


def test_margin_official_is_log1p_of_the_squared_frobenius_norm_of_softmax():
    # logits [[0, 0], [ln 3, 0]] -> P = [[.5, .5], [.75, .25]]
    # ||P||_F^2 = .25 + .25 + .5625 + .0625 = 1.125 -> log(2.125)
    logits = torch.tensor([[0.0, 0.0], [math.log(3.0), 0.0]], dtype=DT)
    assert margin_control(logits, "official").item() == pytest.approx(math.log(2.125), abs=1e-12)
    # the paper form on the same logits: ||.||^2 = 0 and ln(3)^2 -> log(1 + ln(3)^2) / 2
    assert margin_control(logits).item() == pytest.approx(math.log1p(math.log(3.0) ** 2) / 2, abs=1e-12)


def test_margin_rejects_an_unknown_form():
    with pytest.raises(ValueError, match="form must be 'paper' or 'official'"):
        margin_control(torch.zeros(2, 3), "offical")


def test_fedld_margin_term_uses_its_fidelity_and_weight():
    logits = torch.tensor([[0.0, 0.0], [math.log(3.0), 0.0]], dtype=DT)
    batch = Batch(torch.zeros(2, 1), torch.zeros(2, dtype=torch.long), logits, torch.zeros(2, 1), None, 2)
    paper, official = build_method("fedld", {}, 2), build_method("fedld", {"fidelity": "official"}, 2)
    assert [t.name for t in paper.terms] == ["margin"] and paper.terms[0].weight == 0.03
    assert paper.terms[0].loss(batch).item() == pytest.approx(math.log1p(math.log(3.0) ** 2) / 2, abs=1e-12)
    assert official.terms[0].loss(batch).item() == pytest.approx(math.log(2.125), abs=1e-12)


# ---------------------------------------------------------------- principal gradient: hand cases
def test_kept_directions():
    assert [kept_directions(m, 0.8) for m in (1, 2, 3, 5, 10)] == [1, 1, 2, 4, 8]
    assert kept_directions(100, 0.29) == 29  # 0.29 * 100 = 28.999999999999996 in floats
    assert kept_directions(4, 1.0) == 4


@pytest.mark.parametrize("fidelity", ["paper", "official"])
def test_one_client_moves_by_its_own_update(fidelity):
    # m = 1: L = max(1, floor(0.8)) = 1, v = g, g' = g, weight lambda/lambda = 1 -> g^rev = g
    g = {"w": np.array([1.0, 2.0], np.float32)}
    new = principal_gradient(g, [_update(4, 7, {"w": [0.5, -1.5]})], fidelity=fidelity)
    np.testing.assert_allclose(new["w"], [1.5, 0.5], atol=1e-6)


def test_two_clients_keep_one_direction():
    # g1 = (2, 1), g2 = (2, -1): G^T G = [[5, 3], [3, 5]], /m = [[2.5, 1.5], [1.5, 2.5]]
    # eigenvalues 4 (e = (1, 1)/sqrt2) and 1 (e = (1, -1)/sqrt2); m = 2 -> L = floor(1.6) = 1
    # v_1 = (g1 + g2)/sqrt2 = (2 sqrt2, 0); each g'_i = (2, 0), ||g_i|| = sqrt5
    # g_i^rev = sqrt5/2 * (4/4) * (2, 0) = (sqrt5, 0) for both, whatever the weights
    g = {"w": np.zeros(2, np.float32)}
    ups = [_update(0, 1, {"w": [2.0, 1.0]}), _update(1, 3, {"w": [2.0, -1.0]})]
    np.testing.assert_allclose(principal_gradient(g, ups)["w"], [math.sqrt(5), 0.0], atol=1e-6)
    # fraction 1.0 keeps v_2 = (g1 - g2)/sqrt2 = (0, sqrt2) too; the kept eigenvalues sum to 5:
    #   g1^rev = sqrt5 * [4/5 * (1, 0) + 1/5 * (0, 1)],  g2^rev = sqrt5 * [4/5 * (1, 0) - 1/5 * (0, 1)]
    #   weights 1/4, 3/4: sqrt5 * (4/5, 1/4 * 1/5 - 3/4 * 1/5) = sqrt5 * (0.8, -0.1)
    np.testing.assert_allclose(principal_gradient(g, ups, fraction=1.0)["w"], [0.8 * 5**0.5, -0.1 * 5**0.5], atol=1e-6)


@pytest.mark.parametrize("fidelity", ["paper", "official"])
@pytest.mark.parametrize("fraction", [0.4, 0.8, 1.0])
def test_identical_updates_give_that_update(fidelity, fraction):
    # three times g = (1, 2, 2): G^T G / 3 = 3 * ones(3, 3), eigenvalues 9, 0, 0; only v_1 = 3 g / sqrt3
    # carries weight (9 / 9 = 1, both denominators) and g' = g, so each g^rev = g and the mean is g
    g = {"w": np.array([0.0, 1.0, -1.0], np.float32)}
    ups = [_update(c, n, {"w": [1.0, 2.0, 2.0]}) for c, n in [(0, 5), (1, 1), (2, 9)]]
    agg = PrincipalGradient(fraction, fidelity)
    agg.rounds = 1  # past the official variant's plain-mean first round
    np.testing.assert_allclose(agg.aggregate(g, ups)["w"], [1.0, 3.0, 1.0], atol=1e-6)


# Orthogonal updates g1 = (3, 0, 0), g2 = (0, 4, 0): G^T G / 2 = diag(4.5, 8).
# Directions by eigenvalue: v_1 = g2's direction (lambda 8), v_2 = g1's (lambda 4.5). Each g_i lies on
# its own direction and has zero projection on the other, so g_i^rev = ||g_i|| * share * its direction.
#   fraction 1.0 (L = 2, denominator 12.5): g1^rev = 3 * 4.5/12.5 = 1.08 along e_x, g2^rev = 4 * 8/12.5 = 2.56 e_y
#   fraction 0.5 (L = 1, paper denominator 8): g1^rev = 0 (no projection on v_1), g2^rev = 4 * 8/8 = 4 e_y
#   fraction 0.5, official denominator 12.5 (all m eigenvalues): g2^rev = 2.56 e_y
ORTHO = [({"w": [3.0, 0.0, 0.0]}), ({"w": [0.0, 4.0, 0.0]})]


@pytest.mark.parametrize(
    ("fraction", "sizes", "expected"),
    [
        (1.0, (1, 1), [0.54, 1.28, 0.0]),  # (1.08, 2.56) / 2
        (1.0, (1, 3), [0.27, 1.92, 0.0]),  # 1.08/4, 2.56 * 3/4
        (0.5, (1, 1), [0.0, 2.0, 0.0]),  # 4 / 2
        (0.5, (1, 3), [0.0, 3.0, 0.0]),  # 4 * 3/4
    ],
)
def test_orthogonal_updates_by_hand(fraction, sizes, expected):
    g = {"w": np.zeros(3, np.float32)}
    ups = [_update(c, n, d) for c, (n, d) in enumerate(zip(sizes, ORTHO))]
    np.testing.assert_allclose(principal_gradient(g, ups, fraction=fraction)["w"], expected, atol=1e-6)


def test_official_denominator_sums_all_eigenvalues():
    # per docs/explanation/methods.md#principal-gradient: lambda_1 / (lambda_1 + lambda_2) = 8 / 12.5,
    # unweighted mean: 4 * 0.64 / 2 = 1.28
    a = principal_coefficients(np.diag([9.0, 16.0]), np.array([0.5, 0.5]), 0.5, "all")
    np.testing.assert_allclose(a @ np.array([[3.0, 0, 0], [0, 4.0, 0]]), [0.0, 1.28, 0.0], atol=1e-12)


def test_zero_updates_change_nothing_and_a_zero_client_adds_nothing():
    g = {"w": np.array([1.0, -2.0], np.float32), "b": np.array(0.5, np.float32)}
    zeros = [_update(c, n, {"w": [0.0, 0.0], "b": 0.0}) for c, n in [(0, 2), (1, 5)]]
    for fidelity in ("paper", "official"):
        for first in (True, False):
            new = principal_gradient(g, zeros, fidelity=fidelity, first_round=first)
            assert all(np.array_equal(new[k], g[k]) for k in g)
    # g1 = (3, 0), g2 = 0: G^T G / 2 = diag(4.5, 0); v_1 = g1, g1^rev = g1, g2^rev = 0 (zero norm skipped);
    # equal weights: (1.5, 0), FedAvg's value here too
    ups = [_update(0, 1, {"w": [3.0, 0.0], "b": 0.0}), _update(1, 1, {"w": [0.0, 0.0], "b": 0.0})]
    np.testing.assert_allclose(principal_gradient(g, ups)["w"], [2.5, -2.0], atol=1e-6)


def test_paper_flattens_the_model_but_averages_running_statistics():
    # Flattened (w, b): g1 = (3, 0 | 0), g2 = (0, 0 | 4) are the orthogonal case across two tensors;
    # fraction 1.0, weights 1/4, 3/4: 1.08/4 = 0.27 on w[0], 2.56 * 3/4 = 1.92 on b.
    # bn.running_var (1 vs 5) is FedAvg's weighted mean 1/4 + 15/4 = 4 and does not enter the directions;
    # the integer buffer comes from the lowest client id.
    g = {
        "w": np.zeros(2, np.float32),
        "b": np.zeros(1, np.float32),
        "bn.running_var": np.ones(1, np.float32),
        "bn.num_batches_tracked": np.array(0, np.int64),
    }
    ups = [
        _update(1, 3, {"w": [0.0, 0.0], "b": [4.0], "bn.running_var": [5.0]}, {"bn.num_batches_tracked": np.array(9)}),
        _update(0, 1, {"w": [3.0, 0.0], "b": [0.0], "bn.running_var": [1.0]}, {"bn.num_batches_tracked": np.array(7)}),
    ]
    new = principal_gradient(g, ups, fraction=1.0)
    np.testing.assert_allclose(new["w"], [0.27, 0.0], atol=1e-6)
    np.testing.assert_allclose(new["b"], [1.92], atol=1e-6)
    np.testing.assert_allclose(new["bn.running_var"], [5.0], atol=1e-6)
    assert int(new["bn.num_batches_tracked"]) == 7
    assert new["w"].dtype == np.float32 and new["bn.num_batches_tracked"].dtype == np.int64


def test_official_is_per_tensor_unweighted_with_a_plain_first_round():
    # w: the orthogonal pair; bn.running_mean: the same pair (running statistics count in the official code);
    # s (0-d) and c (1 element): always a plain mean. Client sizes 1 and 3 are ignored (unweighted).
    g = {k: np.zeros(3, np.float32) for k in ("w", "bn.running_mean")}
    g |= {"s": np.array(1.0, np.float32), "c": np.array([0.0], np.float32)}
    ups = [
        _update(0, 1, {"w": [3.0, 0.0, 0.0], "bn.running_mean": [3.0, 0.0, 0.0], "s": 2.0, "c": [6.0]}),
        _update(1, 3, {"w": [0.0, 4.0, 0.0], "bn.running_mean": [0.0, 4.0, 0.0], "s": -1.0, "c": [0.0]}),
    ]
    agg = PrincipalGradient(fraction=0.5, fidelity="official")
    first = _step(agg.aggregate(g, ups), g)  # round 1: plain unweighted mean everywhere
    for key, want in [("w", [1.5, 2, 0]), ("bn.running_mean", [1.5, 2, 0]), ("s", 0.5), ("c", [3.0])]:
        np.testing.assert_allclose(first[key], want, atol=1e-6)
    second = _step(agg.aggregate(g, ups), g)  # round 2: per tensor, L = 1, 4 * (8 / 12.5) / 2 = 1.28
    for key, want in [("w", [0, 1.28, 0]), ("bn.running_mean", [0, 1.28, 0]), ("s", 0.5), ("c", [3.0])]:
        np.testing.assert_allclose(second[key], want, atol=1e-6)
    # per tensor vs flattened: client 0 = (w (3, 0), b 0), client 1 = (w 0, b 4); official: w alone has
    # one non-zero client -> (3, 0) / 2 = (1.5, 0); b has one element -> plain mean 2
    g2 = {"w": np.zeros(2, np.float32), "b": np.zeros(1, np.float32)}
    ups2 = [_update(0, 1, {"w": [3.0, 0.0], "b": [0.0]}), _update(1, 1, {"w": [0.0, 0.0], "b": [4.0]})]
    new = principal_gradient(g2, ups2, fraction=1.0, fidelity="official")
    np.testing.assert_allclose(new["w"], [1.5, 0.0], atol=1e-6)
    np.testing.assert_allclose(new["b"], [2.0], atol=1e-6)


# ---------------------------------------------------------------- principal gradient vs a literal reference
def _literal(rows: np.ndarray, p: np.ndarray, fraction: float, denominator: str) -> np.ndarray:
    """docs/explanation/methods.md#principal-gradient steps 1-5 in d-space, written out as stated (no coefficient
    tricks)."""
    G = rows.T  # d x m
    m = G.shape[1]
    lam, E = np.linalg.eigh(G.T @ G / m)
    lam, E = lam[::-1], E[:, ::-1]
    V = G @ E
    V = V * np.where(V.T @ G.mean(axis=1) < 0, -1.0, 1.0)
    L = max(1, math.floor(fraction * m))
    total = lam[:L].sum() if denominator == "kept" else lam.sum()
    out = np.zeros(G.shape[0])
    for i in range(m):
        g = G[:, i]
        rev = sum(
            np.linalg.norm(g) / np.linalg.norm(proj) * lam[l] / total * proj
            for l in range(L)  # noqa: E741
            for proj in [(g @ V[:, l]) / (V[:, l] @ V[:, l]) * V[:, l]]
        )
        out += p[i] * rev
    return out


def test_matches_a_literal_implementation_on_random_updates():
    rng = np.random.default_rng(0)
    sizes = [3, 10, 1, 7, 4]
    deltas = [{"w": rng.normal(size=(3, 4)), "b": rng.normal(size=4)} for _ in sizes]
    g = {"w": rng.normal(size=(3, 4)).astype(np.float32), "b": np.zeros(4, np.float32)}
    ups = [_update(c, n, d) for c, (n, d) in enumerate(zip(sizes, deltas))]
    rows = {k: np.stack([np.asarray(u.delta[k], np.float64).ravel() for u in ups]) for k in g}
    # paper: one flattened vector, weights n_i / n, L = floor(0.8 * 5) = 4 kept eigenvalues in the denominator
    flat = _literal(np.hstack([rows["w"], rows["b"]]), np.array(sizes) / sum(sizes), 0.8, "kept")
    new = _step(principal_gradient(g, ups[::-1]), g)  # arrival order does not matter
    np.testing.assert_allclose(np.concatenate([new["w"].ravel(), new["b"]]), flat, atol=1e-5)
    # official: each tensor alone, unweighted, all five eigenvalues in the denominator
    new = _step(principal_gradient(g, ups, fidelity="official"), g)
    for key in g:
        want = _literal(rows[key], np.full(5, 0.2), 0.8, "all")
        np.testing.assert_allclose(new[key].ravel(), want, atol=1e-5)


# ---------------------------------------------------------------- the method
SETTINGS = LocalSettings(epochs=1, batch_size=16, lr=0.05, momentum=0.9, weight_decay=0.0)


def _train(name: str, params: dict) -> torch.nn.Module:
    torch.manual_seed(0)
    model = build_model("simple_cnn", 1, 10, (8, 8))
    gen = torch.Generator().manual_seed(0)
    x, y = torch.randn(40, 1, 8, 8, generator=gen), torch.randint(0, 10, (40,), generator=gen)
    train_local(model, build_method(name, params, 10), LocalData(x, y, 10), SETTINGS, torch.Generator().manual_seed(1))
    return model


def test_no_margin_and_no_principal_is_fedavg():
    assert METHODS.get("fedld").as_fedavg == {"lambda": 0.0, "principal": False}
    method = build_method("fedld", {"lambda": 0.0, "principal": False}, 10)
    assert method.terms == () and isinstance(method.aggregator, Stateless)
    reference, model = _train("fedavg", {}), _train("fedld", {"lambda": 0.0, "principal": False})
    for (key, a), b in zip(reference.state_dict().items(), model.state_dict().values()):
        assert torch.equal(a, b), key
    g = {"w": np.array([1.0, 2.0], np.float32)}
    ups = [_update(1, 3, {"w": [3.0, 0.0]}), _update(0, 1, {"w": [-1.0, 4.0]})]
    assert np.array_equal(method.aggregate(g, ups)["w"], fedavg(g, ups)["w"])


def test_the_four_ablation_variants():
    for lam in (0.0, 0.03):
        for principal in (False, True):
            method = build_method("fedld", {"lambda": lam, "principal": principal}, 10)
            assert [t.name for t in method.terms] == (["margin"] if lam else [])
            assert isinstance(method.aggregator, PrincipalGradient if principal else Stateless)


def test_aggregator_state_round_trips():
    g = {"w": np.zeros(3, np.float32)}
    ups = [_update(c, n, d) for c, (n, d) in enumerate(zip((1, 3), ORTHO))]
    live = build_method("fedld", {"fidelity": "official", "fraction": 0.5}, 10).aggregator
    np.testing.assert_allclose(live.aggregate(g, ups)["w"], [1.5, 2.0, 0.0], atol=1e-6)  # first round: plain mean
    assert live.state_dict() == {"rounds": 1}
    copy = build_method("fedld", {"fidelity": "official", "fraction": 0.5}, 10).aggregator
    copy.load_state_dict(live.state_dict())
    np.testing.assert_allclose(copy.aggregate(g, ups)["w"], [0.0, 1.28, 0.0], atol=1e-6)  # no longer the first
    assert np.array_equal(copy.aggregate(g, ups)["w"], live.aggregate(g, ups)["w"])


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"fidelity": "offical"}, "fidelity: must be one of 'paper', 'official' (got 'offical')"),
        ({"fraction": 0}, "fraction: must be a number in (0, 1] (got 0)"),
        ({"fraction": 1.5}, "fraction: must be a number in (0, 1] (got 1.5)"),
        ({"fraction": True}, "fraction: must be a number in (0, 1] (got True)"),
        ({"principal": "yes"}, "principal: must be true or false (got 'yes')"),
        ({"lambda": -0.1}, "lambda: must be a number >= 0 (got -0.1)"),
    ],
)
def test_fedld_bad_values_name_the_field(params, message):
    with pytest.raises(ValueError) as info:
        build_method("fedld", params, 10)
    assert str(info.value) == message


def test_principal_gradient_checks_its_arguments():
    g, ups = {"w": np.zeros(1, np.float32)}, [_update(0, 1, {"w": [1.0]})]
    with pytest.raises(ValueError, match="zero client updates"):
        principal_gradient(g, [])
    with pytest.raises(ValueError, match=r"fraction: must be a number in \(0, 1\]"):
        principal_gradient(g, ups, fraction=0.0)
    with pytest.raises(ValueError, match="fidelity: must be one of"):
        principal_gradient(g, ups, fidelity="both")


# ---------------------------------------------------------------- FedUV fidelity
# Points (0,0), (1,0), (0,2): squared distances 1, 4, 5 (no zeros), median 4 either way.
POINTS = [[0.0, 0.0], [1.0, 0.0], [0.0, 2.0]]
OFFICIAL = {"scale": 1.0, "detach_median": False, "drop_zero_distances": True}


def test_official_kernel_has_no_factor_two():
    z = torch.tensor(POINTS, dtype=DT)
    paper = (math.exp(-1 / 8) + math.exp(-4 / 8) + math.exp(-5 / 8)) / 3  # exp(-d / (2 * 4))
    official = (math.exp(-1 / 4) + math.exp(-4 / 4) + math.exp(-5 / 4)) / 3  # exp(-d / 4) = 0.4796...
    assert rbf_uniformity(z).item() == pytest.approx(paper, abs=1e-12)
    assert rbf_uniformity(z, **OFFICIAL).item() == pytest.approx(official, abs=1e-12)


def test_official_median_drops_zero_distances():
    # A 3-point batch cannot tell the medians apart (a coincident pair gives {0, a, a}: median a either
    # way), so add a fourth point: (0,0) twice, (1,0), (0,2) -> distances 0, 1, 4, 1, 4, 5.
    #   all pairs: sorted 0, 1, 1, 4, 4, 5 -> lower median 1;  non-zero: 1, 1, 4, 4, 5 -> median 4
    z = torch.tensor([[0.0, 0.0], [0.0, 0.0], [1.0, 0.0], [0.0, 2.0]], dtype=DT)
    assert median_sq_distance(z).item() == 1.0
    assert median_sq_distance(z, drop_zeros=True).item() == 4.0
    # paper: mean exp(-d / 2), official: mean exp(-d / 4), over the six pairs (the zero pair counts as exp(0))
    paper = (1 + 2 * math.exp(-0.5) + 2 * math.exp(-2) + math.exp(-2.5)) / 6
    official = (1 + 2 * math.exp(-0.25) + 2 * math.exp(-1) + math.exp(-1.25)) / 6
    assert rbf_uniformity(z).item() == pytest.approx(paper, abs=1e-12)
    assert rbf_uniformity(z, **OFFICIAL).item() == pytest.approx(official, abs=1e-12)
    assert median_sq_distance(torch.ones(3, 2), drop_zeros=True).item() == 0.0  # nothing left: 0, then floored


def test_official_median_carries_gradient_and_the_paper_one_does_not():
    # The median is d02 = ||z0 - z2||^2, so d median / dz = (2(z0 - z2), 0, 2(z2 - z0)) = ((0,-4), (0,0), (0,4)).
    z = torch.tensor(POINTS, dtype=DT, requires_grad=True)
    assert not median_sq_distance(z).requires_grad
    median = median_sq_distance(z, detach=False, drop_zeros=True)
    median.backward()
    torch.testing.assert_close(z.grad, torch.tensor([[0.0, -4.0], [0.0, 0.0], [0.0, 4.0]], dtype=DT))
    # L(z, sigma) = mean exp(-d / sigma); with sigma = median(z): dL/dz = dL/dz|sigma=4 + dL/dsigma * dmedian/dz,
    # dL/dsigma = (1/3) * sum_d exp(-d/4) * d / 16 = (e^-1/4 * 1 + e^-1 * 4 + e^-5/4 * 5) / 48
    official = torch.tensor(POINTS, dtype=DT, requires_grad=True)
    rbf_uniformity(official, **OFFICIAL).backward()
    fixed = torch.tensor(POINTS, dtype=DT, requires_grad=True)
    rbf_uniformity(fixed, sigma=4.0, scale=1.0).backward()
    dsigma = (math.exp(-0.25) + 4 * math.exp(-1) + 5 * math.exp(-1.25)) / 48
    torch.testing.assert_close(official.grad, fixed.grad + dsigma * z.grad, rtol=0, atol=1e-12)
    assert not torch.allclose(official.grad, fixed.grad)
    # paper: the detached median's gradient equals the constant sigma's
    paper, fixed = (torch.tensor(POINTS, dtype=DT, requires_grad=True) for _ in range(2))
    rbf_uniformity(paper).backward()
    rbf_uniformity(fixed, sigma=4.0).backward()
    torch.testing.assert_close(paper.grad, fixed.grad, rtol=0, atol=1e-12)


def test_feduv_fidelity_sets_lambda_and_the_kernel():
    assert build_method("feduv", {}, 100).terms[0].weight == 25.0  # D/4
    official = build_method("feduv", {"fidelity": "official"}, 100)
    assert official.terms[0].weight == 2.5
    assert build_method("feduv", {"fidelity": "official", "lambda": 1.0}, 100).terms[0].weight == 1.0
    assert build_method("univarfl", {}, 100).terms[0].weight == 25.0  # no fidelity key: the paper's D/4
    assert METHODS.get("feduv").describe({})["lambda"] == "D/4 (paper) or 2.5 (official)"
    z = torch.tensor(POINTS, dtype=DT)
    batch = Batch(z, torch.zeros(3, dtype=torch.long), torch.zeros(3, 2, dtype=DT), z, None, 2)
    want = (math.exp(-1 / 4) + math.exp(-1) + math.exp(-5 / 4)) / 3
    assert official.terms[1].loss(batch).item() == pytest.approx(want, abs=1e-12)
    paper = build_method("feduv", {}, 100)
    assert paper.terms[1].loss(batch).item() == pytest.approx(rbf_uniformity(z).item(), abs=1e-15)


def test_feduv_bad_fidelity_names_the_field():
    with pytest.raises(ValueError) as info:
        build_method("feduv", {"fidelity": "offical"}, 10)
    assert str(info.value) == "fidelity: must be one of 'paper', 'official' (got 'offical')"
