"""The accountant: hand-computed RDP on small cases, then the figures of Opacus's and dp-accounting's RDP accountants
for the same sampling rate, noise, steps, delta and orders (both libraries, to 1e-9 relative where both converge),
the PRV accountant against dp-accounting's PLD accountant, and the noise a target epsilon derives."""

from __future__ import annotations

import math

import pytest

from raytune_fl.privacy.accountant import (
    ORDERS,
    GaussianSteps,
    UnreachableEpsilon,
    epsilon,
    noise_for_epsilon,
    rdp_epsilon,
    step_rdp,
)

CASES = [  # (sampling rate, noise multiplier, steps, delta): central rounds and DP-SGD steps
    (1.0, 2.0, 20, 1e-5),
    (0.1, 1.0, 100, 1e-5),
    (0.01, 1.1, 10_000, 1e-5),
    (0.3, 0.8, 50, 1e-6),
    (0.05, 5.0, 1000, 1e-5),
]


def test_full_participation_is_the_gaussian_mechanisms_rdp_alpha_over_2_sigma_squared():
    assert step_rdp(2.0, 1.0, 7.0) == pytest.approx(7 / (2 * 4.0), rel=1e-12)


def test_order_two_by_hand_is_log_of_1_plus_q_squared_times_e_to_1_over_sigma_squared_minus_1():
    # A_2 = (1-q)^2 + 2 q (1-q) + q^2 e^(1/sigma^2) = 1 + q^2 (e^(1/sigma^2) - 1); RDP = log A_2 / (2 - 1)
    q, sigma = 0.2, 1.5
    assert step_rdp(sigma, q, 2.0) == pytest.approx(math.log1p(q * q * math.expm1(1 / sigma**2)), rel=1e-12)


def test_a_fractional_order_lies_between_its_integer_neighbours():
    # RDP is non-decreasing in the order: the fractional series must agree with the exact integer sums around it
    q, sigma = 0.05, 1.2
    assert step_rdp(sigma, q, 3.0) <= step_rdp(sigma, q, 3.5) <= step_rdp(sigma, q, 4.0)


def test_no_sampling_spends_nothing_and_no_noise_spends_everything():
    assert rdp_epsilon([GaussianSteps(1.0, 0.0, 100)], 1e-5) == 0.0
    assert rdp_epsilon([GaussianSteps(0.0, 0.1, 1)], 1e-5) == math.inf


def test_steps_compose_by_adding_rdp_so_two_events_equal_one_of_their_summed_steps():
    split = rdp_epsilon([GaussianSteps(1.0, 0.1, 30), GaussianSteps(1.0, 0.1, 70)], 1e-5)
    assert split == pytest.approx(rdp_epsilon([GaussianSteps(1.0, 0.1, 100)], 1e-5), rel=1e-12)


@pytest.mark.parametrize(("q", "sigma", "steps", "delta"), CASES)
def test_rdp_epsilon_equals_opacuss_for_the_same_orders(q, sigma, steps, delta):
    from opacus.accountants.analysis import rdp as opacus_rdp

    orders = list(ORDERS)
    rdp = opacus_rdp.compute_rdp(q=q, noise_multiplier=sigma, steps=steps, orders=orders)
    theirs, _ = opacus_rdp.get_privacy_spent(orders=orders, rdp=rdp, delta=delta)
    assert rdp_epsilon([GaussianSteps(sigma, q, steps)], delta) == pytest.approx(theirs, rel=1e-9)


@pytest.mark.parametrize(("q", "sigma", "steps", "delta"), CASES)
def test_rdp_epsilon_equals_dp_accountings_for_the_same_orders(q, sigma, steps, delta):
    import dp_accounting
    from dp_accounting import rdp

    # dp-accounting leaves out the fractional orders whose series it did not converge in 1000 terms (it logs a
    # warning); on the integer orders the two sums are the same maths
    orders = [order for order in ORDERS if float(order).is_integer()]
    accountant = rdp.RdpAccountant(orders)
    accountant.compose(dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)), steps)
    ours = rdp_epsilon([GaussianSteps(sigma, q, steps)], delta, orders=orders)
    assert ours == pytest.approx(accountant.get_epsilon(delta), rel=1e-9)


@pytest.mark.parametrize(("q", "sigma", "steps", "delta"), CASES[1:3])
def test_prv_is_opacuss_and_agrees_with_dp_accountings_pld_and_is_tighter_than_rdp(q, sigma, steps, delta):
    import dp_accounting
    from dp_accounting import pld

    prv = epsilon([GaussianSteps(sigma, q, steps)], delta, "prv")
    accountant = pld.PLDAccountant(value_discretization_interval=1e-3)
    accountant.compose(dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)), steps)
    assert prv == pytest.approx(accountant.get_epsilon(delta), rel=0.03)  # two numerical accountants, each ~1 %
    assert prv < rdp_epsilon([GaussianSteps(sigma, q, steps)], delta)


def test_the_derived_noise_spends_the_target_and_a_little_less_noise_would_exceed_it():
    sigma = noise_for_epsilon(8.0, 0.1, 100, 1e-5)
    assert rdp_epsilon([GaussianSteps(sigma, 0.1, 100)], 1e-5) <= 8.0
    assert rdp_epsilon([GaussianSteps(sigma * 0.995, 0.1, 100)], 1e-5) > 8.0


def test_an_unreachable_target_is_refused_with_its_figures():
    with pytest.raises(UnreachableEpsilon, match="target epsilon 1e-06"):
        noise_for_epsilon(1e-6, 1.0, 1000, 1e-5)
    with pytest.raises(UnreachableEpsilon, match="positive"):
        noise_for_epsilon(0.0, 0.1, 10, 1e-5)


def test_an_unknown_accountant_is_refused():
    with pytest.raises(ValueError, match="rdp, prv"):
        epsilon([GaussianSteps(1.0, 0.1, 1)], 1e-5, "moments")
