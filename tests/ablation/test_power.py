"""The minimum detectable difference of a corrected family of paired t-tests and the exact sign-flip test
(raytune_fl/ablation/power.py), checked against scipy's t quantiles and sign vectors counted by hand."""

from __future__ import annotations

import itertools
import math

import pandas as pd
import pytest
from scipy import stats

from raytune_fl.ablation import power
from raytune_fl.ablation.table import summarise, to_markdown


def test_the_reviewers_number_three_pairs_and_holm_over_twelve_call_nothing_under_d_z_8_9():
    # Holm's first step tests at 0.05 / 12: t_{1 - 0.05/24, 2} / sqrt(3)
    expected = stats.t.ppf(1 - 0.05 / 24, 2) / math.sqrt(3)
    assert power.detectable_dz(3, 12, "holm") == pytest.approx(expected, rel=1e-12)
    assert power.detectable_dz(3, 12) == pytest.approx(8.916, abs=1e-3)
    # BH at its strictest is the same level; no correction is the plain 95 % t
    assert power.detectable_dz(3, 12, "bh") == power.detectable_dz(3, 12, "holm")
    assert power.detectable_dz(3, 12, "none") == pytest.approx(4.302653 / math.sqrt(3), rel=1e-6)
    # 6 pairs and 12 tests: t_{1 - 0.05/24, 5} / sqrt(6) = 2.03
    assert power.detectable_dz(6, 12) == pytest.approx(stats.t.ppf(1 - 0.05 / 24, 5) / math.sqrt(6), rel=1e-12)
    assert math.isnan(power.detectable_dz(1, 12))
    with pytest.raises(ValueError, match="unknown correction 'bonferroni'"):
        power.detectable_dz(3, 2, "bonferroni")


def test_the_80_percent_power_version_adds_t_0_8():
    expected = (stats.t.ppf(1 - 0.05 / 24, 2) + stats.t.ppf(0.8, 2)) / math.sqrt(3)
    assert power.detectable_dz(3, 12, power=0.8) == pytest.approx(expected, rel=1e-12)
    assert power.detectable_difference(3, 12, 0.02, power=0.8) == pytest.approx(expected * 0.02, rel=1e-12)


def test_mdd_in_points_is_d_z_times_the_pooled_sd_of_the_pair_differences():
    # cells' sds 3 and 4 points: root-mean of variances sqrt((9 + 16) / 2) = 3.5355 points
    sd = power.pooled_sd([0.03**2, 0.04**2, math.nan])
    assert sd == pytest.approx(math.sqrt((0.0009 + 0.0016) / 2))
    dz = stats.t.ppf(1 - 0.05 / 24, 2) / math.sqrt(3)
    assert power.detectable_difference(3, 12, sd) == pytest.approx(dz * sd)
    assert power.sentence(3, 12, sd) == (
        f"minimum detectable difference at 3 pairs and a family of 12: {dz * sd * 100:.2f} points (d_z >= {dz:.2f})"
    )
    assert power.sentence(3, 12, sd) == (
        "minimum detectable difference at 3 pairs and a family of 12: 31.52 points (d_z >= 8.92)"
    )


def _by_hand(d: list[float]) -> float:
    observed = abs(sum(d))
    vectors = list(itertools.product((1, -1), repeat=len(d)))
    return sum(abs(sum(s * x for s, x in zip(signs, d))) >= observed - 1e-12 for signs in vectors) / len(vectors)


@pytest.mark.parametrize(
    "d, p",
    [
        ([0.01, 0.02, 0.03], 0.25),  # all one sign: only the observed and its negation, 2 / 8
        ([0.01, -0.02, 0.03], 0.75),  # sums 6, 4, 2, 0, 0, -2, -4, -6 (x 0.01): 6 of 8 reach |2|
        ([1, 2, 3, 4, 5, 6], 2 / 64),  # the floor 2 / 2^n at 6 pairs
        ([0.0, 0.0, 0.0], 1.0),
        ([0.5, -0.5], 1.0),  # mean 0: every vector reaches it
    ],
)
def test_sign_flip_p_by_hand(d, p):
    assert power.sign_flip_p(d) == pytest.approx(p)
    assert power.sign_flip_p(d) == pytest.approx(_by_hand(d))


def test_sign_flip_counts_ties_and_matches_enumeration_on_an_irregular_vector():
    d = [0.013, -0.004, 0.021, 0.008, -0.011, 0.017, 0.002]
    assert power.sign_flip_p(d) == pytest.approx(_by_hand(d))
    # observed |0.1 - 0.2 + 0.3 + 0.2| = 0.4; |sum| over the 16 vectors: 0 x2, 0.2 x6, 0.4 x4 (two of them
    # 0.4000000000000001 in floats: ties, counted), 0.6 x2, 0.8 x2. Reaching 0.4: 8 of 16
    d = [0.1, -0.2, 0.3, 0.2]
    assert power.sign_flip_p(d) == pytest.approx(_by_hand(d)) == pytest.approx(8 / 16)
    assert math.isnan(power.sign_flip_p([])) and math.isnan(power.sign_flip_p([0.1] * 25))


def test_the_ablation_table_states_its_family_s_mdd_from_the_cells_alone():
    # two variants, one setting, 3 runs each: sds 10 and 9.539 points; sd of a paired difference taken as
    # sqrt(2) x sqrt((0.01 + 0.0091) / 2) = 0.13820; m = 1, d_z* = t_{0.975, 2} / sqrt 3 = 2.4842: 34.33 points
    results = pd.DataFrame(
        {
            "variant": ["a"] * 3 + ["b"] * 3,
            "setting": ["s"] * 6,
            "status": ["finished"] * 6,
            "test_acc": [0.5, 0.6, 0.7, 0.55, 0.66, 0.74],
        }
    )
    sd = math.sqrt(2) * math.sqrt((0.1**2 + pd.Series([0.55, 0.66, 0.74]).std() ** 2) / 2)
    dz = stats.t.ppf(0.975, 2) / math.sqrt(3)
    assert dz * sd == pytest.approx(0.3433, abs=1e-4)
    last = to_markdown(summarise(results), seeds=3).splitlines()[-1]
    assert last.startswith("Minimum detectable difference at 3 pairs and a family of 1: 34.33 points (d_z >= 2.48)")
    assert "√2 × the cells' pooled sd" in last
    # three variants over two settings: a family of (3 - 1) x 2 = 4
    assert "a family of 4:" in power.table_line([0.1] * 6, [3] * 6, 3, 2)
    assert "not defined" in power.table_line([math.nan], [1], 2, 1)
