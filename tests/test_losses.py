"""Hand-computed checks for raytune_fl.methods.losses (values follow METHODS.md)."""

import math

import pytest
import torch

from raytune_fl.methods.losses import (
    classifier_variance,
    hyperspherical_energy,
    identity_spread,
    median_sq_distance,
    proximal,
    rbf_uniformity,
)

DT = torch.float64
SQRT2 = math.sqrt(2.0)


# ---------------------------------------------------------------- identity_spread
def test_identity_spread_values():
    # A column of I_D: one 1 and D-1 zeros, mean 1/D.
    # Unbiased var = [(1-1/D)^2 + (D-1)/D^2] / (D-1) = 1/D, so std = 1/sqrt(D).
    assert identity_spread(10, "std") == pytest.approx(0.31622776601683794, abs=1e-12)
    assert identity_spread(100, "std") == pytest.approx(0.1, abs=1e-12)
    for d in (2, 3, 10, 100):
        assert identity_spread(d, "var") == pytest.approx(1.0 / d, abs=1e-12)


# ---------------------------------------------------------------- classifier_variance
# logits [[0, 0], [ln 3, 0]] -> P = [[.5, .5], [.75, .25]]  (softmax: 3/(3+1) = .75).
# Column 0: (.5, .75), mean .625, unbiased var = 2 * .125^2 / 1 = 1/32, std = 1/(4 sqrt 2).
# Column 1: (.5, .25): same var and std.  D = 2: c_std = 1/sqrt 2, c_var = 1/2.
#   std: gap = 1/sqrt2 - 1/(4 sqrt2) = 3/(4 sqrt2) = 0.530330...   squared: 9/32
#   var: gap = 1/2 - 1/32 = 15/32                                  squared: 225/1024
TINY_LOGITS = [[0.0, 0.0], [math.log(3.0), 0.0]]


@pytest.mark.parametrize(
    ("statistic", "hinge", "expected"),
    [
        ("std", "linear", 3 / (4 * SQRT2)),
        ("std", "squared", 9 / 32),
        ("std", "none", 3 / (4 * SQRT2)),
        ("var", "linear", 15 / 32),
        ("var", "squared", 225 / 1024),
        ("var", "none", 15 / 32),
    ],
)
def test_classifier_variance_tiny(statistic, hinge, expected):
    logits = torch.tensor(TINY_LOGITS, dtype=DT)
    got = classifier_variance(logits, statistic=statistic, hinge=hinge)
    assert got.item() == pytest.approx(expected, abs=1e-12)


# D = 3, n = 2, confident distinct classes: P ~ [[1,0,0],[0,1,0]] (e^-100 is negligible).
# Columns 0,1 = (1,0): var 1/2, std 1/sqrt2 (above c); column 2 = (0,0): spread 0.
#   var (c = 1/3): gaps -1/6, -1/6, 1/3 -> linear 1/9, squared 1/27, none 0
#   std (c = 1/sqrt3): gaps 1/sqrt3-1/sqrt2 (x2), 1/sqrt3
#       -> linear 1/(3 sqrt3), squared 1/9, none (sqrt3 - sqrt2)/3
@pytest.mark.parametrize(
    ("statistic", "hinge", "expected"),
    [
        ("var", "linear", 1 / 9),
        ("var", "squared", 1 / 27),
        ("var", "none", 0.0),
        ("std", "linear", 1 / (3 * math.sqrt(3))),
        ("std", "squared", 1 / 9),
        ("std", "none", (math.sqrt(3) - SQRT2) / 3),
    ],
)
def test_classifier_variance_hinge_clamps_columns_above_c(statistic, hinge, expected):
    logits = torch.tensor([[100.0, 0.0, 0.0], [0.0, 100.0, 0.0]], dtype=DT)
    got = classifier_variance(logits, statistic=statistic, hinge=hinge)
    assert got.item() == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize("statistic", ["std", "var"])
def test_classifier_variance_zero_for_confident_distinct_classes(statistic):
    # D = 2: P = [[1,0],[0,1]] up to e^-40 (below float64 resolution next to 1). Each column is
    # (1,0): var 1/2 = c_var and std 1/sqrt2 = c_std. The batch reaches the target spread (the most a
    # D = 2 column can have), so the hinge gives exactly 0.
    logits = torch.tensor([[20.0, -20.0], [-20.0, 20.0]], dtype=DT)
    assert classifier_variance(logits, statistic=statistic).item() == pytest.approx(0.0, abs=1e-12)


@pytest.mark.parametrize("statistic", ["std", "var"])
@pytest.mark.parametrize("hinge", ["linear", "squared", "none"])
def test_classifier_variance_finite_gradient_when_rows_identical(statistic, hinge):
    # All rows equal -> every column has spread 0; torch.std would give a NaN gradient here.
    logits = torch.tensor([[0.3, -1.2, 2.0]] * 4, requires_grad=True)
    loss = classifier_variance(logits, statistic=statistic, hinge=hinge)
    loss.backward()
    assert torch.isfinite(loss)
    assert torch.isfinite(logits.grad).all()
    c = identity_spread(3, statistic)  # spread 0 -> every gap equals c
    assert loss.item() == pytest.approx(c**2 if hinge == "squared" else c, abs=1e-6)


# ---------------------------------------------------------------- rbf_uniformity
# Points (0,0), (1,0), (0,2): squared distances d01 = 1, d02 = 4, d12 = 1 + 4 = 5; median 4.
POINTS = [[0.0, 0.0], [1.0, 0.0], [0.0, 2.0]]


def test_median_sq_distance():
    z = torch.tensor(POINTS, dtype=DT, requires_grad=True)
    m = median_sq_distance(z)
    assert m.item() == pytest.approx(4.0, abs=1e-12)
    assert not m.requires_grad


def test_rbf_uniformity_explicit_sigma():
    # sigma = 1: mean(exp(-1/2), exp(-4/2), exp(-5/2))
    z = torch.tensor(POINTS, dtype=DT)
    expected = (math.exp(-0.5) + math.exp(-2.0) + math.exp(-2.5)) / 3  # 0.274650...
    assert rbf_uniformity(z, sigma=1.0).item() == pytest.approx(expected, abs=1e-12)


def test_rbf_uniformity_median_sigma():
    # sigma = median = 4: mean(exp(-1/8), exp(-4/8), exp(-5/8))
    z = torch.tensor(POINTS, dtype=DT)
    expected = (math.exp(-1 / 8) + math.exp(-4 / 8) + math.exp(-5 / 8)) / 3  # 0.674763...
    assert rbf_uniformity(z).item() == pytest.approx(expected, abs=1e-12)


def test_rbf_uniformity_median_is_detached():
    # The gradient with the median bandwidth must equal the gradient with the constant sigma = 4.
    z1 = torch.tensor(POINTS, dtype=DT, requires_grad=True)
    z2 = torch.tensor(POINTS, dtype=DT, requires_grad=True)
    rbf_uniformity(z1, sigma="median").backward()
    rbf_uniformity(z2, sigma=4.0).backward()
    torch.testing.assert_close(z1.grad, z2.grad, rtol=0, atol=1e-12)
    assert z1.grad.abs().sum() > 0


def test_rbf_uniformity_finite_for_identical_points():
    # Two coincident rows: the gradient stays finite (no sqrt at 0).
    z = torch.tensor([[0.5, 0.5], [0.5, 0.5], [1.0, -1.0]], requires_grad=True)
    rbf_uniformity(z).backward()
    assert torch.isfinite(z.grad).all()
    # All rows identical: median sigma is 0 (clamped), every kernel value is exp(0) = 1.
    same = torch.ones(4, 3, requires_grad=True)
    loss = rbf_uniformity(same)
    loss.backward()
    assert loss.item() == pytest.approx(1.0, abs=1e-6)
    assert torch.isfinite(same.grad).all()


def test_gram_distances_match_explicit_differences_and_stay_deterministic():
    from raytune_fl.methods.losses import _pairwise_sq_distances

    z = torch.randn(64, 256, generator=torch.Generator().manual_seed(0)) * 0.3 + 0.5
    explicit, gram = _pairwise_sq_distances(z, exact=True), _pairwise_sq_distances(z)
    assert gram.shape == (64 * 63 // 2,)
    torch.testing.assert_close(gram, explicit, rtol=1e-5, atol=1e-5)  # float32 rounding, not a formula change
    grads = []
    for _ in range(3):  # the explicit form's backward accumulates in a thread-dependent order; this one does not
        leaf = z.clone().requires_grad_()
        torch.exp(-_pairwise_sq_distances(leaf)).mean().backward()
        grads.append(leaf.grad)
    assert all(torch.equal(grads[0], g) for g in grads[1:])
    # dropping zero distances needs exact zeros for coinciding rows: the explicit form gives them
    twins = torch.tensor([[0.1, 0.7, 0.3], [0.1, 0.7, 0.3], [1.0, -1.0, 0.5]])
    assert _pairwise_sq_distances(twins, exact=True)[0].item() == 0.0
    assert median_sq_distance(twins, drop_zeros=True).item() == pytest.approx(0.81 + 2.89 + 0.04, rel=1e-6)


# ---------------------------------------------------------------- hyperspherical_energy
# Unit vectors a = (1,0), b = (0,1), c = (-1,0); eps = 0.01.
#   a.b = 0 -> 1/1.01;  a.c = -1 -> 1/2.01;  b.c = 0 -> 1/1.01.
#   Ordered pairs i != j count each twice: S = 2 * (2/1.01 + 1/2.01) = 4.955420...
#   no diagonal: S / 9 = 0.550602...;  with diagonal add 3 * (1/0.01) / 9 = 100/3.
HE_EXPECTED = 2 * (2 / 1.01 + 1 / 2.01) / 9


def test_hyperspherical_energy_hand_case():
    z = torch.tensor([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]], dtype=DT)
    assert hyperspherical_energy(z, eps=0.01).item() == pytest.approx(HE_EXPECTED, abs=1e-12)
    with_diag = hyperspherical_energy(z, eps=0.01, include_diagonal=True).item()
    assert with_diag == pytest.approx(HE_EXPECTED + 3 * (1 / 0.01) / 9, abs=1e-10)


def test_hyperspherical_energy_scale_invariant():
    z = torch.tensor([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]], dtype=DT)
    scaled = z * torch.tensor([[2.0], [0.5], [7.0]], dtype=DT)  # per-row positive scaling
    assert hyperspherical_energy(scaled).item() == pytest.approx(HE_EXPECTED, abs=1e-12)
    g = torch.randn(5, 4, dtype=DT, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(hyperspherical_energy(3.0 * g), hyperspherical_energy(g), rtol=0, atol=1e-12)


# ---------------------------------------------------------------- proximal
def test_proximal_value_and_anchor_detached():
    # 0.5 * (1^2 + 2^2 + (3-1)^2) = 0.5 * 9 = 4.5
    params = [torch.tensor([1.0, 2.0], requires_grad=True), torch.tensor([[3.0]], requires_grad=True)]
    anchors = [torch.zeros(2, requires_grad=True), torch.ones(1, 1, requires_grad=True)]
    loss = proximal(params, anchors)
    loss.backward()
    assert loss.item() == pytest.approx(4.5, abs=1e-12)
    torch.testing.assert_close(params[0].grad, torch.tensor([1.0, 2.0]), rtol=0, atol=1e-12)
    assert all(a.grad is None for a in anchors)


@pytest.mark.parametrize(("mu", "expected"), [(0.5, [3.4, 2.98]), (0.0, [3.4, 2.92])])
def test_proximal_worked_sgd_check(mu, expected):
    # F(w) = (w-1)^2/2, w_t = 4, lr = 0.2; gradient of F + mu*prox is (w-1) + mu*(w-4).
    #   step 1: w = 4   -> grad 3                 -> 4 - 0.6 = 3.4 (same for plain SGD)
    #   step 2: mu=0.5: grad 2.4 + 0.5*(-0.6) = 2.1 -> 3.4 - 0.42 = 2.98
    #           plain:  grad 2.4                    -> 3.4 - 0.48 = 2.92
    w = torch.nn.Parameter(torch.tensor(4.0, dtype=DT))
    w_t = torch.tensor(4.0, dtype=DT)
    opt = torch.optim.SGD([w], lr=0.2)
    for want in expected:
        opt.zero_grad()
        loss = (w - 1) ** 2 / 2 + mu * proximal([w], [w_t])
        loss.backward()
        opt.step()
        assert w.item() == pytest.approx(want, abs=1e-12)


# ---------------------------------------------------------------- batch size guard
@pytest.mark.parametrize(
    "fn",
    [classifier_variance, rbf_uniformity, hyperspherical_energy, median_sq_distance],
)
def test_batch_of_one_raises(fn):
    with pytest.raises(ValueError, match="at least 2"):
        fn(torch.randn(1, 3))
