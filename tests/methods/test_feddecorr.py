"""FedDecorr: hand-computed checks of raytune_fl.methods.losses.decorrelation, and the method's term."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from raytune_fl.methods import METHODS, Batch, build_method
from raytune_fl.methods.impl.feddecorr import Decorrelation
from raytune_fl.methods.losses import decorrelation

DT = torch.float64
EPS = 1e-8

# The worked check. z = [[1, 1], [2, 3], [3, 2]], n = 3, d = 2.
# Column 0 = (1, 2, 3), column 1 = (1, 3, 2): both have mean 2, deviations (-1, 0, 1) and (-1, 1, 0),
# sum of squares 2: unbiased var 2/2 = 1, population var 2/3. Pearson rho = [(-1)(-1) + 0*1 + 1*0] / 2 = 1/2.
#   official: zhat = deviations / sqrt(1 + eps), zhat^T zhat = [[2, 1], [1, 2]] / (1 + eps);
#     off-diagonal squares 1, 1 -> mean 1 -> / n = 1/3  (exactly 1/3 / (1 + eps)^2 with eps)
#   paper: K = zhat^T zhat / 3 = [[1, 1/2], [1/2, 1]] (times (2/3) / (2/3 + eps));
#     ||K||_F^2 = 1 + 1 + 1/4 + 1/4 = 2.5 -> / d^2 = 2.5 / 4 = 0.625
WORKED = [[1.0, 1.0], [2.0, 3.0], [3.0, 2.0]]


def test_worked_check_official():
    got = decorrelation(torch.tensor(WORKED, dtype=DT)).item()
    assert got == pytest.approx((1 / 3) / (1 + EPS) ** 2, abs=1e-15)
    assert got == pytest.approx(1 / 3, abs=1e-7)  # the reference value, eps aside


def test_worked_check_paper():
    got = decorrelation(torch.tensor(WORKED, dtype=DT), "paper").item()
    shrink = (2 / 3) / (2 / 3 + EPS)  # each K entry is scaled by var / (var + eps)
    assert got == pytest.approx(0.625 * shrink**2, abs=1e-15)
    assert got == pytest.approx(0.625, abs=1e-7)


# Decorrelated columns: z = [[1, 1], [1, -1], [-1, 1], [-1, -1]] (n = 4, zero means, orthogonal columns): rho = 0.
#   official: 0.   paper: K = I, ||I||_F^2 = 2 -> 2 / 4 = 1/2 = 1/d (the minimum: trace fixed at d).
# Collapsed columns: column 1 = column 0 = (1, 2, 3), rho = 1.
#   official: (zhat^T zhat)_01 = 2 (unbiased var 1), squared 4, mean 4, / 3 = 4/3 = (n-1)^2/n.
#   paper: K = [[1, 1], [1, 1]], ||K||_F^2 = 4 -> 4 / 4 = 1 (the maximum).
@pytest.mark.parametrize(
    ("z", "form", "expected"),
    [
        ([[1.0, 1.0], [1.0, -1.0], [-1.0, 1.0], [-1.0, -1.0]], "official", 0.0),
        ([[1.0, 1.0], [1.0, -1.0], [-1.0, 1.0], [-1.0, -1.0]], "paper", 0.5),
        ([[1.0, 1.0], [2.0, 2.0], [3.0, 3.0]], "official", 4 / 3),
        ([[1.0, 1.0], [2.0, 2.0], [3.0, 3.0]], "paper", 1.0),
    ],
)
def test_decorrelated_and_collapsed_columns(z, form, expected):
    assert decorrelation(torch.tensor(z, dtype=DT), form).item() == pytest.approx(expected, abs=1e-7)


def test_agrees_with_pearson_correlations_on_random_data():
    # official = ((n-1)^2 / n) * mean_{i != j} rho_ij^2 ;  paper = (d + sum_{i != j} rho_ij^2) / d^2
    rng = np.random.default_rng(0)
    n, d = 16, 5
    z = rng.normal(size=(n, d)) @ rng.normal(size=(d, d))  # correlated columns
    rho = np.corrcoef(z, rowvar=False)
    off = rho[~np.eye(d, dtype=bool)] ** 2
    zt = torch.tensor(z, dtype=DT)
    assert decorrelation(zt).item() == pytest.approx((n - 1) ** 2 / n * off.mean(), rel=1e-6)
    assert decorrelation(zt, "paper").item() == pytest.approx((d + off.sum()) / d**2, rel=1e-6)


@pytest.mark.parametrize("form", ["official", "paper"])
def test_invariant_to_shifting_and_scaling_each_column(form):
    z = torch.tensor(WORKED, dtype=DT)
    moved = z * torch.tensor([10.0, 0.5], dtype=DT) + torch.tensor([-3.0, 7.0], dtype=DT)
    assert decorrelation(moved, form).item() == pytest.approx(decorrelation(z, form).item(), abs=1e-7)


@pytest.mark.parametrize("form", ["official", "paper"])
def test_a_batch_of_one_gives_zero(form):
    assert decorrelation(torch.tensor([[1.0, 2.0, 3.0]], dtype=DT), form).item() == 0.0


def test_a_single_feature_has_no_correlations():
    z = torch.tensor([[1.0], [2.0], [4.0]], dtype=DT)
    assert decorrelation(z).item() == 0.0  # official: no off-diagonal entries
    assert decorrelation(z, "paper").item() == pytest.approx(1.0, abs=1e-7)  # K = [[1]]: 1 / 1^2


# A constant column standardises to zeros (0 / sqrt(eps)): it correlates with nothing.
# z = [[1, 5], [2, 5], [3, 5]]: official off-diagonal entries are 0 -> 0.
#   paper: K = [[1, 0], [0, 0]], ||K||_F^2 = 1 -> 1/4.
@pytest.mark.parametrize(("form", "expected"), [("official", 0.0), ("paper", 0.25)])
def test_a_constant_column_is_finite_with_finite_gradient(form, expected):
    z = torch.tensor([[1.0, 5.0], [2.0, 5.0], [3.0, 5.0]], dtype=DT, requires_grad=True)
    value = decorrelation(z, form)
    value.backward()
    assert value.item() == pytest.approx(expected, abs=1e-7)
    assert torch.isfinite(z.grad).all()


@pytest.mark.parametrize("form", ["official", "paper"])
def test_gradient_matches_finite_differences(form):
    z = torch.randn(6, 4, dtype=DT, generator=torch.Generator().manual_seed(1), requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: decorrelation(t, form), (z,))


def test_gradient_lowers_the_correlation():
    z = torch.tensor(WORKED, dtype=DT, requires_grad=True)
    decorrelation(z).backward()
    stepped = (z - 0.1 * z.grad).detach()
    assert decorrelation(stepped).item() < decorrelation(z.detach()).item()


def test_larger_eps_damps_a_nearly_constant_column():
    # column 1 varies by 1e-4 (unbiased var 1/3 * 1e-8, below eps = 1e-8): 1/sqrt(eps + var) is about 8.7e3 with
    # eps = 1e-8 and 3.2e2 with eps = 1e-5, and the column's apparent correlation shrinks with it: the largest
    # gradient entry goes from about 4.4e3 to about 6.7
    z = torch.tensor([[1.0, 0.0], [2.0, 0.0], [3.0, 1e-4]], dtype=DT, requires_grad=True)
    decorrelation(z, eps=1e-8).backward()
    sharp = z.grad.abs().max().item()
    z.grad = None
    decorrelation(z, eps=1e-5).backward()
    assert z.grad.abs().max().item() < sharp / 10


def test_refuses_bad_input():
    with pytest.raises(ValueError, match="2-D"):
        decorrelation(torch.zeros(3))
    with pytest.raises(ValueError, match="eps must be positive"):
        decorrelation(torch.zeros(3, 2), eps=0.0)
    with pytest.raises(ValueError, match="form must be"):
        decorrelation(torch.zeros(3, 2), "bogus")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="empty"):
        decorrelation(torch.zeros(0, 2))


# ---------------------------------------------------------------- the method
def test_spec_defaults_and_fedavg_setting():
    spec = METHODS.get("feddecorr")
    assert spec.defaults == {"beta": 0.1, "form": "official", "eps": 1e-8}
    assert spec.as_fedavg == {"beta": 0.0}
    assert build_method("feddecorr", {"beta": 0.0}, 10).terms == ()  # beta = 0: no term at all, FedAvg


def test_the_term_reads_z_and_is_logged_as_term_decorr():
    method = build_method("feddecorr", {"beta": 0.5, "form": "paper"}, 10)
    (term,) = method.terms
    assert isinstance(term, Decorrelation) and term.name == "decorr" and term.weight == 0.5
    z = torch.tensor(WORKED, dtype=DT)
    batch = Batch(torch.zeros(3, 1), torch.zeros(3, dtype=torch.long), torch.zeros(3, 10), z, torch.nn.Identity(), 10)
    assert term.loss(batch).item() == pytest.approx(0.625, abs=1e-7)


# --- stacked on FedProx, FedAvgM and MOON, as the paper runs it ---------------------------------------------


def _client_round(name: str, params: dict) -> dict:
    from raytune_fl.engine.local import LocalSettings
    from raytune_fl.engine.worker import ClientWorker, ModelSpec, WorkerSpec

    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(32, 1, 8, 8)).astype(np.float32), rng.integers(0, 10, 32).astype(np.int64)
    settings = LocalSettings(epochs=1, batch_size=16, lr=0.05, momentum=0.9, weight_decay=0.0)
    model = ModelSpec("simple_cnn", 1, 10, (8, 8))
    worker = ClientWorker(WorkerSpec(model, name, params, settings, seed=0), x, y, [np.arange(32)])
    torch.manual_seed(0)
    weights = {k: v.numpy().copy() for k, v in model.build().state_dict().items()}
    return worker.train(0, 1, weights).delta


@pytest.mark.parametrize("base", ["fedprox", "fedavgm", "moon"])
def test_a_stacked_method_has_both_sets_of_hyperparameters_and_both_terms(base):
    spec = METHODS.get(f"{base}_decorr")
    assert spec.defaults == {**METHODS.get(base).defaults, "beta": 0.1, "form": "official", "eps": 1e-8}
    method = build_method(f"{base}_decorr", {}, 10)
    assert [t.name for t in method.terms] == [t.name for t in build_method(base, {}, 10).terms] + ["decorr"]
    assert type(method.aggregator) is type(build_method(base, {}, 10).aggregator)
    assert spec.as_fedavg == {**METHODS.get(base).as_fedavg, "beta": 0.0}


def test_beta_zero_is_the_base_method_and_a_zero_base_term_is_feddecorr_bit_for_bit():
    for a, b in [
        (_client_round("fedprox_decorr", {"mu": 0.5, "beta": 0.0}), _client_round("fedprox", {"mu": 0.5})),
        (_client_round("fedprox_decorr", {"mu": 0.0, "beta": 0.3}), _client_round("feddecorr", {"beta": 0.3})),
    ]:
        assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)
    both = _client_round("fedprox_decorr", {"mu": 0.5, "beta": 0.3})
    assert not np.array_equal(both["classifier.weight"], _client_round("fedprox", {"mu": 0.5})["classifier.weight"])
