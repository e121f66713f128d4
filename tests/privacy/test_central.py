"""Client-level DP-FedAvg's maths by hand on tiny arrays: the flat L2 clip, the fixed-denominator mean, the noise's
measured standard deviation against noise_multiplier x clip_norm / (q N), and the estimator's unbiasedness over
Poisson-sampled cohorts (the sampling engine/synchronous.py draws)."""

from __future__ import annotations

import numpy as np
import pytest

from raytune_fl.engine.synchronous import sample_clients
from raytune_fl.privacy.central import clip, l2_norm, private_mean


def _delta(a, b):
    return {"w": np.array(a, dtype=np.float32), "b": np.array(b, dtype=np.float32)}


def test_the_norm_is_over_every_entry_flattened():
    assert l2_norm(_delta([[3.0, 0.0]], [4.0])) == pytest.approx(5.0)


def test_an_update_above_the_bound_is_scaled_onto_it_and_one_below_is_left_alone():
    clipped, norm = clip(_delta([[3.0, 0.0]], [4.0]), 1.0)
    assert norm == pytest.approx(5.0)
    np.testing.assert_allclose(clipped["w"], [[0.6, 0.0]])
    np.testing.assert_allclose(clipped["b"], [0.8])
    small, _ = clip(_delta([[0.3, 0.0]], [0.4]), 1.0)
    np.testing.assert_allclose(small["w"], [[0.3, 0.0]], rtol=1e-6)


def test_without_noise_the_mean_is_the_clipped_sum_over_the_expected_cohort_not_the_drawn_one():
    deltas = [_delta([[3.0, 0.0]], [4.0]), _delta([[0.0, 0.5]], [0.0])]  # norms 5 (clipped to 1) and 0.5
    mean, stats = private_mean(deltas[0], deltas, 1.0, 0.0, 4.0, np.random.default_rng(0))
    np.testing.assert_allclose(mean["w"], [[0.6 / 4, 0.5 / 4]], rtol=1e-6)  # 2 drawn, 4 expected
    np.testing.assert_allclose(mean["b"], [0.8 / 4], rtol=1e-6)
    assert mean["w"].dtype == np.float32
    assert stats.norms == pytest.approx((5.0, 0.5)) and stats.clipped == 1


def test_the_noise_has_std_noise_multiplier_times_clip_norm_over_the_expected_cohort():
    template = {"w": np.zeros((200, 100), dtype=np.float64)}
    mean, _ = private_mean(template, [], clip_norm=0.5, noise_multiplier=1.5, expected_clients=3.0,
                           rng=np.random.default_rng(1))  # fmt: skip
    # 20,000 draws: the sample std is within 2 % of 0.25 with overwhelming probability
    assert float(np.std(mean["w"])) == pytest.approx(1.5 * 0.5 / 3.0, rel=0.02)
    assert abs(float(np.mean(mean["w"]))) < 0.01


def test_a_seed_draws_the_same_noise():
    template = {"w": np.zeros(5), "b": np.zeros(2)}
    one, _ = private_mean(template, [], 1.0, 1.0, 2.0, np.random.default_rng([3, 1, 13]))
    two, _ = private_mean(template, [], 1.0, 1.0, 2.0, np.random.default_rng([3, 1, 13]))
    assert all(np.array_equal(one[k], two[k]) for k in one)


def test_over_poisson_cohorts_the_estimator_is_unbiased_for_the_mean_of_the_clipped_updates():
    rng = np.random.default_rng(0)
    clients, rate, bound = 8, 0.25, 1.0
    deltas = [{"w": rng.normal(size=3) * scale} for scale in np.linspace(0.2, 3.0, clients)]  # some above the bound
    target = np.mean([clip(d, bound)[0]["w"] for d in deltas], axis=0)
    rounds = 4000
    total = np.zeros(3)
    for r in range(1, rounds + 1):
        cohort = sample_clients(clients, rate, seed=5, round_index=r, poisson=True)
        noisy, _ = private_mean(deltas[0], [deltas[c] for c in cohort], bound, 1.0, rate * clients,
                                np.random.default_rng([5, r, 13]))  # fmt: skip
        total += noisy["w"]
    # per round the estimate's std is about sqrt(sigma^2 C^2 + ...) / 2 ~ 0.6: over 4000 rounds ~0.01
    np.testing.assert_allclose(total / rounds, target, atol=0.04)


def test_poisson_sampling_draws_each_client_at_the_rate_and_any_cohort_size_and_replays():
    counts = [len(sample_clients(20, 0.3, seed=1, round_index=r, poisson=True)) for r in range(1, 2001)]
    assert np.mean(counts) == pytest.approx(6.0, rel=0.03)
    assert np.var(counts) == pytest.approx(20 * 0.3 * 0.7, rel=0.15)  # binomial, not fixed-size
    assert 0 < min(counts) < 6 < max(counts)
    assert sample_clients(20, 0.3, 1, 7, poisson=True) == sample_clients(20, 0.3, 1, 7, poisson=True)
    assert sample_clients(20, 1.0, 1, 7, poisson=True) == list(range(20))
