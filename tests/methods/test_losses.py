"""Hand-computed checks for raytune_fl.methods.losses (values follow docs/explanation/methods.md#local-objectives)."""

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


# ---------------------------------------------------------------- the official median over non-zero distances
# Computed without selecting the non-zero distances out (a boolean mask: a host sync at every GPU step): sorted, the
# zeros counted, the lower median gathered at an index on the device. These pin it to the hand-computed values and
# to the selecting form it replaced (`_median_by_selection`: the same value, and the same gradient bit for bit).
#
# TWINS: (0,0) twice, (1,0), (0,2). Pairs 01..23: 0, 1, 4, 1, 4, 5. Non-zero: 1, 1, 4, 4, 5 -> lower median 4 (pairs
# 03 and 13 tie); with the zero: 0, 1, 1, 4, 4, 5 -> lower median 1.
TWINS = [[0.0, 0.0], [0.0, 0.0], [1.0, 0.0], [0.0, 2.0]]


def _median_by_selection(z, detach):
    """The form before: select the positive distances, torch.median of those (0 if there are none)."""
    i, j = torch.triu_indices(z.shape[0], z.shape[0], offset=1, device=z.device)
    zz = z.detach() if detach else z
    sq = (zz[i] - zz[j]).pow(2).sum(dim=1)
    sq = sq[sq > 0]
    return z.new_zeros(()) if sq.numel() == 0 else sq.median()


def test_median_over_non_zero_distances_by_hand():
    z = torch.tensor(TWINS, dtype=DT)
    assert median_sq_distance(z, drop_zeros=True).item() == 4.0
    assert median_sq_distance(z).item() == 1.0  # the paper's: every pair, zeros included
    # an even count takes the lower middle value, as torch.median: points 0, 1, 3, 7 on a line give 1, 9, 49, 4, 36,
    # 16, sorted 1, 4, 9, 16, 36, 49 -> 9 (not 12.5)
    line = torch.tensor([[0.0], [1.0], [3.0], [7.0]], dtype=DT)
    assert median_sq_distance(line, drop_zeros=True).item() == 9.0
    # five points, two of them twice: pairs 0 (twice), 1 (x4), 4 (x4) -> non-zero 1,1,1,1,4,4,4,4 -> lower median 1
    five = torch.tensor([[0.0], [0.0], [1.0], [1.0], [2.0]], dtype=DT)
    assert median_sq_distance(five, drop_zeros=True).item() == 1.0


def test_median_over_non_zero_distances_of_coincident_rows_is_zero():
    for n in (2, 5):
        same = torch.full((n, 3), 0.25, dtype=DT, requires_grad=True)
        median = median_sq_distance(same, detach=False, drop_zeros=True)
        assert median.item() == 0.0 and median.shape == ()
        median.backward()
        assert torch.equal(same.grad, torch.zeros_like(same))
    # the official kernel on a collapsed batch: bandwidth 0, floored at 1e-12 -> every kernel value exp(0) = 1
    same = torch.ones(4, 3, requires_grad=True)
    loss = rbf_uniformity(same, scale=1.0, detach_median=False, drop_zero_distances=True)
    loss.backward()
    assert loss.item() == 1.0 and torch.isfinite(same.grad).all()


def test_gradient_of_the_kept_median_by_hand_and_as_before():
    # TWINS: the median 4 is shared by pairs 03 and 13, torch.median's gradient half to each. d||a-b||^2/da = 2(a-b):
    # p0 gets 2(p0-p3)/2 = (0,-2), p1 the same, p3 (0,2) from each pair, p2 nothing.
    z = torch.tensor(TWINS, dtype=DT, requires_grad=True)
    median_sq_distance(z, detach=False, drop_zeros=True).backward()
    assert torch.equal(z.grad, torch.tensor([[0.0, -2.0], [0.0, -2.0], [0.0, 0.0], [0.0, 4.0]], dtype=DT))
    generator = torch.Generator().manual_seed(0)
    cases = [torch.tensor(TWINS, dtype=DT), torch.tensor([[0.0], [0.0], [2.0], [2.0]])]  # four tied distances
    for _ in range(20):
        z = torch.randn(6, 3, generator=generator)
        z[3] = z[1]  # a coincident pair
        cases.append(z)
        cases.append(torch.round(z * 2) / 2)  # many tied distances
    for case in cases:
        ours, theirs = case.clone().requires_grad_(), case.clone().requires_grad_()
        value = median_sq_distance(ours, detach=False, drop_zeros=True)
        before = _median_by_selection(theirs, detach=False)
        assert torch.equal(value.detach(), before.detach())
        value.backward()
        before.backward()
        assert torch.equal(ours.grad, theirs.grad)


def test_official_rbf_uniformity_by_hand():
    # TWINS, official kernel exp(-d / sigma), sigma = the non-zero median 4:
    # (e^0 + 2 e^(-1/4) + 2 e^(-1) + e^(-5/4)) / 6, the median kept in the graph
    z = torch.tensor(TWINS, dtype=DT, requires_grad=True)
    loss = rbf_uniformity(z, scale=1.0, detach_median=False, drop_zero_distances=True)
    expected = (1.0 + 2 * math.exp(-0.25) + 2 * math.exp(-1.0) + math.exp(-1.25)) / 6
    assert loss.item() == pytest.approx(expected, abs=1e-15)
    # the gradient: the kernel's at a fixed sigma = 4, plus the median's path: d/dsigma of the mean is
    # sum_p d_p exp(-d_p/4) / (6 * 16), times the median's gradient (above)
    loss.backward()
    fixed = torch.tensor(TWINS, dtype=DT, requires_grad=True)
    rbf_uniformity(fixed, sigma=4.0, scale=1.0, drop_zero_distances=True).backward()
    distances = [0.0, 1.0, 4.0, 1.0, 4.0, 5.0]
    through_sigma = sum(d * math.exp(-d / 4) for d in distances) / (6 * 16)
    median_grad = torch.tensor([[0.0, -2.0], [0.0, -2.0], [0.0, 0.0], [0.0, 4.0]], dtype=DT)
    torch.testing.assert_close(z.grad, fixed.grad + through_sigma * median_grad, rtol=0, atol=1e-14)


def test_a_fixed_sigma_divides_as_before():
    # sigma as a cached 0-d tensor of the distances' dtype: bit for bit the divisor the loss always used, also for a
    # scale that is not a power of two (a float64 product rounded to float32 would differ in the last bit)
    from raytune_fl.methods.losses import _pairwise_sq_distances

    z = torch.randn(7, 5, generator=torch.Generator().manual_seed(1))  # float32
    sq = _pairwise_sq_distances(z)
    for sigma, scale in [(0.3, 1.4330958889402052), (1.7236885492520844, 3.515140939639728), (4.0, 2.0)]:
        before = torch.exp(-sq / (scale * torch.tensor(sigma, dtype=sq.dtype).clamp_min(1e-12))).mean()
        assert torch.equal(rbf_uniformity(z, sigma, scale=scale), before)
        assert torch.equal(rbf_uniformity(z, sigma, scale=scale), before)  # the second call: the cached divisor
