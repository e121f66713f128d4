"""Variants against a reference, with a seed-noise verdict: paired differences (same seed, same split) and the
unpaired Welch fallback, their p-values, the sign-flip p, the family-level intervals and the minimum detectable
difference computed by hand."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from raytune_fl.report import comparison
from raytune_fl.report.comparison import differences

# Student's t quantiles t_{0.975, dof}, from a t-table
T975 = {2: 4.302653, 4: 2.776445}


def _results(
    cells: dict[tuple[str, str], list[float]],
    failed: tuple[str, str] | None = None,
    seeds: dict[str, list[int]] | None = None,
) -> pd.DataFrame:
    """One row per run; run i of a variant has seed i unless `seeds` gives that variant's seeds."""
    seeds = seeds or {}
    rows = [
        {"variant": v, "setting": s, "seed": seeds.get(v, range(len(accs)))[i], "status": "finished", "test_acc": acc}
        for (v, s), accs in cells.items()
        for i, acc in enumerate(accs)
    ]
    if failed:  # a run that did not finish: its accuracy must not count
        rows.append({"variant": failed[0], "setting": failed[1], "seed": 9, "status": "failed", "test_acc": 0.0})
    return pd.DataFrame(rows)


def _p_two_dof(t: float) -> float:
    """Two-sided p of Student's t with 2 degrees of freedom, closed form: 1 - |t| / sqrt(2 + t^2)."""
    return 1 - abs(t) / math.sqrt(2 + t * t)


def _p_four_dof(t: float) -> float:
    """Two-sided p of Student's t with 4 degrees of freedom, closed form: F(t) = 1/2 + 3/4 x (1 - x^2/3),
    x = t / sqrt(4 + t^2)."""
    x = abs(t) / math.sqrt(4 + t * t)
    return 2 * (1 - (0.5 + 0.75 * x * (1 - x * x / 3)))


# ---------------------------------------------------------------- paired: same seed on both sides


def test_paired_differences_of_one_two_and_three_points_are_inside_seed_noise_with_the_hand_computed_numbers():
    # pairs (seed 0, 1, 2): differences 1, 2, 3 points; mean 2, sd 1, t = 2 / (1 / sqrt 3) = 3.4641 with 2 dof:
    # p = 1 - 3.4641 / sqrt(14) = 0.0742; interval 2 ± 4.3027 / sqrt 3 = [-0.484, +4.484] points.
    # Wilcoxon over 3 positive differences: exactly 1 of the 2^3 sign patterns is as extreme each way, p = 2/8 = 0.25
    results = _results({("fedavg", "a"): [0.70, 0.75, 0.80], ("full", "a"): [0.71, 0.77, 0.83]})
    (found,) = differences(results, "fedavg")
    assert found.paired and found.test == "paired t" and found.n_pairs == 3
    assert found.delta == pytest.approx(0.02)
    assert found.p_value == pytest.approx(_p_two_dof(2 / (1 / math.sqrt(3))), rel=1e-6)
    assert found.p_value == pytest.approx(0.074180, abs=1e-6)
    assert (found.ci_low, found.ci_high) == pytest.approx((-0.00484138, 0.04484138), abs=1e-7)
    half = T975[2] * 0.01 / math.sqrt(3)
    assert (found.ci_low, found.ci_high) == pytest.approx((0.02 - half, 0.02 + half), abs=1e-7)
    assert found.wilcoxon_p == pytest.approx(0.25)
    assert not found.significant
    assert found.describe() == (
        "+2.00 points, not resolved: interval [-0.48, +4.48] (paired t p = 0.074, Holm p = 0.074, sign-flip p = 0.25, "
        "n = 3)"
    )
    assert found.permutation_p == pytest.approx(0.25)  # the same 2 of 8 sign vectors reach |mean| = 2
    assert found.correction == "holm" and found.family == 1 and found.p_adjusted == found.p_value  # a family of one


def test_wilcoxon_never_reaches_five_percent_with_three_pairs_but_does_with_six():
    # all differences positive: two-sided exact p = 2 / 2^n; 0.25 at n = 3, 2/64 = 0.03125 at n = 6
    assert comparison.wilcoxon_p(pd.Series([0.01, 0.02, 0.03])) == pytest.approx(0.25)
    assert comparison.wilcoxon_p(pd.Series([0.01, 0.02, 0.03, 0.04, 0.05, 0.06])) == pytest.approx(0.03125)
    assert comparison.wilcoxon_p(pd.Series([0.0, 0.0, 0.0])) == 1.0


def test_a_large_common_seed_effect_hides_the_gain_from_welch_but_not_from_the_pairs():
    # seeds move both variants together (0.60, 0.70, 0.80): the variant is 2, 2.5 and 3 points above on each seed.
    # Welch sees two spreads of 10 points and calls it noise; the pairs: mean 2.5, sd 0.5, t = 2.5 / (0.5 / sqrt 3)
    # = 8.6603 with 2 dof: p = 1 - 8.6603 / sqrt(77) = 0.0131; interval 2.5 ± 4.3027 x 0.5 / sqrt 3 = [1.2579, 3.7421]
    reference, variant = [0.60, 0.70, 0.80], [0.62, 0.725, 0.83]
    results = _results({("fedavg", "a"): reference, ("full", "a"): variant})
    assert comparison.welch_p(pd.Series(variant), pd.Series(reference)) > 0.7  # t = 0.30: unpaired, pure noise
    (found,) = differences(results, "fedavg")
    assert found.paired and found.significant
    assert found.delta == pytest.approx(0.025)
    assert found.p_value == pytest.approx(_p_two_dof(8.660254), rel=1e-5)
    assert found.p_value == pytest.approx(0.013072, abs=1e-6)
    assert (found.ci_low, found.ci_high) == pytest.approx((0.0125793, 0.0374207), abs=1e-7)
    assert found.describe() == (
        "+2.50 points [+1.26, +3.74] (paired t p = 0.013, Holm p = 0.013, sign-flip p = 0.25, n = 3)"
    )


def test_runs_pair_on_seed_and_partition_seed_and_failed_runs_leave_their_pair():
    rows = []
    for seed in (0, 1):
        for split in (0, 1):
            base = 0.60 + 0.1 * seed + 0.05 * split  # both the seed and the split move both variants
            rows.append({"variant": "fedavg", "seed": seed, "partition_seed": split, "test_acc": base})
            rows.append(
                {"variant": "full", "seed": seed, "partition_seed": split, "test_acc": base + 0.01 * (1 + seed)}
            )
    rows.append({"variant": "full", "seed": 2, "partition_seed": 0, "test_acc": 0.99})  # no partner: left out
    rows.append({"variant": "fedavg", "seed": 2, "partition_seed": 1, "test_acc": 0.10})  # no partner either
    results = pd.DataFrame(rows).assign(setting="a", status="finished")
    results.loc[
        (results["variant"] == "full") & (results["seed"] == 1) & (results["partition_seed"] == 1), "status"
    ] = "failed"
    (found,) = differences(results, "fedavg")
    # pairs (0,0), (0,1), (1,0): differences 1, 1, 2 points; mean 4/3, sd 1/sqrt(3) = 0.57735, t = 4, 2 dof
    assert found.paired and found.n_pairs == 3 and (found.n, found.n_reference) == (4, 5)
    assert found.partition_seeds == 2
    assert found.delta == pytest.approx(0.04 / 3)
    assert found.p_value == pytest.approx(_p_two_dof(4.0), rel=1e-6)  # 1 - 4 / sqrt(18) = 0.0572
    half = T975[2] * (0.01 / math.sqrt(3)) / math.sqrt(3)
    assert (found.ci_low, found.ci_high) == pytest.approx((0.04 / 3 - half, 0.04 / 3 + half), abs=1e-7)
    footnote = comparison.to_markdown([found], "fedavg").splitlines()[-1]
    assert footnote.endswith("The noise: training seeds x partition seeds (the split varies).")


# ---------------------------------------------------------------- unpaired: Welch, and too few to judge


def test_without_common_seeds_welch_judges_with_the_hand_computed_p_and_interval():
    # no seed in common: both sides 3 runs, variance 0.0004; SE = sqrt(2 x 0.0004 / 3) = 0.016330, t = 6.1237 with
    # Welch dof = 4: p = 0.0036; interval 0.10 ± 2.7764 x 0.016330 = [0.0547, 0.1453]
    results = _results(
        {("fedavg", "a"): [0.70, 0.72, 0.74], ("full", "a"): [0.80, 0.82, 0.84]},
        failed=("full", "a"),
        seeds={"full": [3, 4, 5]},
    )
    (found,) = differences(results, "fedavg")
    se = math.sqrt(2 * 0.0004 / 3)
    assert not found.paired and found.n_pairs == 0 and found.test == "Welch"
    assert found.delta == pytest.approx(0.10)
    assert found.p_value == pytest.approx(_p_four_dof(0.10 / se), rel=1e-9)  # 0.0036
    assert (found.ci_low, found.ci_high) == pytest.approx((0.10 - T975[4] * se, 0.10 + T975[4] * se), abs=1e-6)
    assert (found.n, found.n_reference) == (3, 3)  # the failed run is not counted
    assert found.significant and math.isnan(found.wilcoxon_p)
    assert found.describe() == "+10.00 points [+5.47, +14.53] (unpaired, Welch p = 0.0036, Holm p = 0.0036, n = 3 vs 3)"
    footnote = comparison.to_markdown([found], "fedavg").splitlines()[-1]
    assert (
        "unpaired (fewer than 2 runs share a seed): Welch's two-sided t-test" in footnote
        and "paired: runs" not in footnote
    )
    assert footnote.endswith("The noise: training seeds only (one split).")


def test_one_pair_between_sides_of_two_runs_falls_back_to_welch():
    # seeds 0, 1 against 1, 2: a single pair is no test; each side has 2 runs, so Welch on all four. Variances
    # 0.0008 both: SE = sqrt(0.0004 + 0.0004) = 0.028284, t = 0.10 / SE = 3.5355, Welch dof = 0.0008^2 /
    # (2 x 0.0004^2) = 2: p = 1 - 3.5355 / sqrt(14.5) = 0.0715; interval 0.10 ± 4.3027 x 0.028284
    results = _results({("fedavg", "a"): [0.70, 0.74], ("full", "a"): [0.80, 0.84]}, seeds={"full": [1, 2]})
    (found,) = differences(results, "fedavg")
    assert not found.paired and found.n_pairs == 1
    assert found.delta == pytest.approx(0.10)
    assert found.p_value == pytest.approx(_p_two_dof(0.10 / math.sqrt(0.0008)), rel=1e-6)
    assert found.p_value == pytest.approx(0.071523, abs=1e-6)
    assert (found.ci_low, found.ci_high) == pytest.approx((-0.021697, 0.221697), abs=1e-6)
    assert (
        found.describe()
        == "+10.00 points, not resolved: interval [-2.17, +22.17] (unpaired, Welch p = 0.072, Holm p = 0.072, "
        "n = 2 vs 2)"
    )


def test_a_gain_smaller_than_the_seeds_spread_is_called_inside_seed_noise():
    # unpaired: means 0.80 vs 0.79, variances 0.0025 and 0.0001: t = 0.01 / sqrt(0.0026 / 3) = 0.34
    results = _results(
        {("fedavg", "a"): [0.78, 0.79, 0.80], ("full", "a"): [0.75, 0.80, 0.85]}, seeds={"full": [5, 6, 7]}
    )
    (found,) = differences(results, "fedavg")
    assert found.delta == pytest.approx(0.01)
    assert 0.7 < found.p_value < 0.8
    assert not found.significant
    assert found.describe().startswith("+1.00 points, not resolved: interval [")
    assert "] (unpaired, Welch p = 0.7" in found.describe()


def test_one_seed_cannot_be_judged_and_no_spread_at_all_is_judged_by_the_means():
    one_seed = differences(_results({("fedavg", "a"): [0.7], ("full", "a"): [0.8]}), "fedavg")[0]
    assert math.isnan(one_seed.p_value) and not one_seed.significant and math.isnan(one_seed.ci_low)
    assert one_seed.describe() == "+10.00 points (too few seeds to judge)"
    same = differences(_results({("fedavg", "a"): [0.7, 0.7], ("full", "a"): [0.7, 0.7]}), "fedavg")[0]
    assert same.paired and same.p_value == 1.0
    assert same.describe() == (
        "+0.00 points, not resolved: interval [+0.00, +0.00] (paired t p = 1, Holm p = 1, sign-flip p = 1, n = 2)"
    )
    apart = differences(_results({("fedavg", "a"): [0.7, 0.7], ("full", "a"): [0.8, 0.8]}), "fedavg")[0]
    assert apart.p_value == 0.0 and apart.significant and (apart.ci_low, apart.ci_high) == pytest.approx((0.1, 0.1))
    unpaired = differences(
        _results({("fedavg", "a"): [0.7, 0.7], ("full", "a"): [0.8, 0.8]}, seeds={"full": [2, 3]}), "fedavg"
    )[0]
    assert not unpaired.paired and unpaired.p_value == 0.0 and unpaired.significant


# ---------------------------------------------------------------- the table


def test_every_variant_in_every_setting_in_order_and_the_markdown_has_a_column_per_setting():
    found = differences(_page(), "fedavg")
    assert [(d.variant, d.setting) for d in found] == [
        ("full", "alpha=0.1"),
        ("freeze", "alpha=0.1"),
        ("full", "alpha=0.5"),
        ("freeze", "alpha=0.5"),
    ]
    lines = comparison.to_markdown(found, "fedavg").splitlines()
    assert lines[0] == "| variant − fedavg | alpha=0.1 | alpha=0.5 |"
    assert lines[1] == "|---|:---:|:---:|"
    # the family: raw p 0.074180, 1, 0.013072, 1 (m = 4). Holm, smallest first: 4 x 0.013072 = 0.052288,
    # max(0.052288, 3 x 0.074180 = 0.22254) = 0.22254, then 1 and 1. The alpha=0.5 gain (raw p 0.013) is no
    # longer called once the page's 4 comparisons are accounted for (adjusted 0.052 ≥ 0.05). Nothing is called,
    # so the intervals are at Holm's first step, 1 - 0.05/4 = 98.75 %: t_{0.99375, 2} = 8.860, half-widths
    # 8.860 x 1 / sqrt 3 = 5.12 and 8.860 x 0.5 / sqrt 3 = 2.56 points: both contain 0, as the verdicts say
    t = stats.t.ppf(1 - 0.05 / 8, 2)
    assert t == pytest.approx(8.860, abs=1e-3)
    assert found[0].ci_high * 100 == pytest.approx(2 + t / math.sqrt(3), abs=1e-9) and found[0].level == 0.9875
    assert lines[2] == (
        "| full | +2.00 points, not resolved: interval [-3.12, +7.12] (paired t p = 0.074, Holm p = 0.22, sign-flip "
        "p = 0.25, n = 3) | +2.50 points, not resolved: interval [-0.06, +5.06] (paired t p = 0.013, Holm p = 0.052, "
        "sign-flip p = 0.25, n = 3) |"
    )
    assert lines[3] == (
        "| freeze | +0.00 points, not resolved: interval [+0.00, +0.00] (paired t p = 1, Holm p = 1, sign-flip p = 1, "
        "n = 3) | +0.00 points, not resolved: interval [+0.00, +0.00] (paired t p = 1, Holm p = 1, sign-flip p = 1, "
        "n = 3) |"
    )
    assert lines[4] == ""
    assert lines[5].startswith(
        "Differences of mean final-round accuracy in points; in brackets the family's 98.75 % interval (1 − 0.05/4: "
        "the level of the step at which Holm's procedure stopped), which excludes 0 exactly where a difference is "
        "called; paired"
    )
    assert "its smallest p is 2 / 2^n: 0.25 with 3 pairs, 0.03125 with 6" in lines[5] and "Welch" not in lines[5]
    assert "p-values adjusted for 4 comparisons by Holm's step-down method" in lines[5]
    assert "adjusted p ≥ 0.05 is called not resolved." in lines[5]
    # the MDD: pooled sd of the 4 cells' pair differences sqrt((1 + 0 + 0.25 + 0) / 4) = 0.5590 points,
    # d_z* = 8.860 / sqrt 3 = 5.115, 5.115 x 0.5590 = 2.86 points
    assert "Minimum detectable difference at 3 pairs and a family of 4: 2.86 points (d_z >= 5.12)." in lines[5]
    assert "inside" not in lines[5] and "Collapsed" not in lines[5]
    assert lines[5].endswith("The noise: training seeds only (one split).")


def test_a_variant_without_finished_runs_shows_a_dash_and_an_unknown_reference_is_refused():
    results = _results({("fedavg", "a"): [0.7, 0.72]})
    results.loc[len(results)] = {"variant": "full", "setting": "a", "seed": 0, "status": "failed", "test_acc": 0.0}
    (found,) = differences(results, "fedavg")
    assert math.isnan(found.delta) and found.describe() == "– (no finished run)"
    with pytest.raises(ValueError, match="reference variant 'moon'"):
        differences(results, "moon")


# ---------------------------------------------------------------- the family: Holm and Benjamini–Hochberg


@pytest.mark.parametrize(
    "raw, holm",
    [
        # sorted 0.005, 0.01, 0.03, 0.04 (m = 4): x4 = 0.02, x3 = 0.03, x2 = 0.06, x1 = 0.04 -> raised to 0.06
        ([0.01, 0.04, 0.03, 0.005], [0.03, 0.06, 0.06, 0.02]),
        # sorted 0.01, 0.02, 0.5 (m = 3): x3 = 0.03, x2 = 0.04, x1 = 0.5
        ([0.02, 0.5, 0.01], [0.04, 0.5, 0.03]),
        # m = 2: 0.3 x 2 = 0.6, then 0.4 x 1 = 0.4 is raised to 0.6 (never below an earlier step)
        ([0.3, 0.4], [0.6, 0.6]),
        # 0.6 x 2 = 1.2 is capped at 1; 0.7 is raised to it
        ([0.6, 0.7], [1.0, 1.0]),
        # ties: 0.02 x 3 = 0.06, then 0.04 and 0.02 are raised to 0.06
        ([0.02, 0.02, 0.02], [0.06, 0.06, 0.06]),
    ],
)
def test_holm_by_hand(raw, holm):
    assert comparison.adjust_p(raw, "holm") == pytest.approx(holm, abs=1e-12)
    assert comparison.adjust_p(raw) == pytest.approx(holm, abs=1e-12)  # the default


@pytest.mark.parametrize(
    "raw, bh",
    [
        # sorted 0.005, 0.01, 0.03, 0.04 (m = 4), m p / rank: 0.02, 0.02, 0.04, 0.04; from the top, the running min
        ([0.01, 0.04, 0.03, 0.005], [0.02, 0.04, 0.04, 0.02]),
        # sorted 0.01, 0.02, 0.5 (m = 3): 0.03, 0.03, 0.5
        ([0.02, 0.5, 0.01], [0.03, 0.5, 0.03]),
        # sorted 0.01, 0.011, 0.02, 0.9 (m = 4): 0.04, 0.022, 0.026667, 0.9; step-up: 0.9, 0.026667, 0.022, and
        # the smallest comes down from 0.04 to 0.022 (never above a later one)
        ([0.01, 0.011, 0.02, 0.9], [0.022, 0.022, 0.08 / 3, 0.9]),
        # m = 2: 0.9 x 2 = 1.8, then the running min from the top 0.95 brings it to 0.95
        ([0.9, 0.95], [0.95, 0.95]),
    ],
)
def test_benjamini_hochberg_by_hand(raw, bh):
    assert comparison.adjust_p(raw, "bh") == pytest.approx(bh, abs=1e-12)


def test_nan_p_values_are_not_in_the_family_and_none_changes_nothing():
    # m = 2 (the NaN is a cell too small to judge): Holm 0.01 x 2 = 0.02, 0.04 x 1 = 0.04; BH 0.02, 0.04
    holm = comparison.adjust_p([0.01, math.nan, 0.04], "holm")
    assert holm[0] == pytest.approx(0.02) and math.isnan(holm[1]) and holm[2] == pytest.approx(0.04)
    bh = comparison.adjust_p([math.nan, 0.04, 0.01], "bh")
    assert math.isnan(bh[0]) and bh[1:] == pytest.approx([0.04, 0.02])
    unchanged = comparison.adjust_p([0.01, math.nan, 0.04], "none")
    assert unchanged[0] == 0.01 and math.isnan(unchanged[1]) and unchanged[2] == 0.04
    assert comparison.adjust_p([], "holm") == [] and all(math.isnan(p) for p in comparison.adjust_p([math.nan] * 2))
    with pytest.raises(ValueError, match="unknown correction 'bonferroni'"):
        comparison.adjust_p([0.1], "bonferroni")
    assert comparison.CORRECTIONS == ("holm", "bh", "none") and comparison.DEFAULT_CORRECTION == "holm"


def test_adjusted_p_keep_the_order_of_the_raw_p_never_fall_below_them_and_stay_at_most_one():
    raw = list(np.random.default_rng(0).uniform(0, 0.3, 12))
    order = np.argsort(raw)
    for method in ("holm", "bh"):
        adjusted = np.array(comparison.adjust_p(raw, method))
        assert np.all(np.diff(adjusted[order]) >= 0)  # monotone in the raw p
        assert np.all(adjusted >= np.array(raw)) and np.all(adjusted <= 1.0)
    assert np.all(np.array(comparison.adjust_p(raw, "holm")) >= np.array(comparison.adjust_p(raw, "bh")))


RANDOM_P = list(np.random.default_rng(1).uniform(0, 0.2, 15)) + [0.5, 0.9, 1.0]


def test_benjamini_hochberg_agrees_with_scipy():
    from scipy.stats import false_discovery_control

    raw = RANDOM_P
    assert comparison.adjust_p(raw, "bh") == pytest.approx(list(false_discovery_control(raw, method="bh")), rel=1e-12)


def test_holm_and_benjamini_hochberg_agree_with_statsmodels_where_installed():
    multitest = pytest.importorskip("statsmodels.stats.multitest")
    raw = RANDOM_P
    for method, theirs in (("holm", "holm"), ("bh", "fdr_bh")):
        expected = multitest.multipletests(raw, method=theirs)[1]
        assert comparison.adjust_p(raw, method) == pytest.approx(list(expected), rel=1e-12)


def _page() -> pd.DataFrame:
    # full: paired p 0.074180 at alpha=0.1 and 0.013072 at alpha=0.5; freeze: p 1 in both
    return _results(
        {
            ("fedavg", "alpha=0.1"): [0.70, 0.75, 0.80],
            ("full", "alpha=0.1"): [0.71, 0.77, 0.83],
            ("freeze", "alpha=0.1"): [0.70, 0.75, 0.80],
            ("fedavg", "alpha=0.5"): [0.60, 0.70, 0.80],
            ("full", "alpha=0.5"): [0.62, 0.725, 0.83],
            ("freeze", "alpha=0.5"): [0.60, 0.70, 0.80],
        }
    )


def test_differences_applies_holm_over_the_whole_page_and_a_raw_call_flips():
    raw = differences(_page(), "fedavg", correction="none")
    holm = differences(_page(), "fedavg")
    gain_raw, gain = raw[2], holm[2]  # full at alpha=0.5
    assert (gain.variant, gain.setting) == ("full", "alpha=0.5")
    assert gain_raw.significant and gain_raw.p_value == pytest.approx(0.013072, abs=1e-6)
    # Holm over m = 4: 4 x 0.013072 = 0.052288 ≥ 0.05: the same p is no longer a call
    assert not gain.significant and gain.p_adjusted == pytest.approx(4 * 0.013072, abs=4e-6)
    assert gain.p_value == gain_raw.p_value and gain.correction == "holm" and gain.family == 4
    assert gain.describe() == (
        "+2.50 points, not resolved: interval [-0.06, +5.06] (paired t p = 0.013, Holm p = 0.052, sign-flip p = 0.25, "
        "n = 3)"
    )
    # uncorrected, the 95 % interval is the verdict's level: it excludes 0 and the cell is called
    assert gain_raw.describe() == "+2.50 points [+1.26, +3.74] (paired t p = 0.013, sign-flip p = 0.25, n = 3)"
    # BH over the same 4: sorted 0.013072, 0.074180, 1, 1 -> 4 x 0.013072 / 1 = 0.052288, 4 x 0.07418 / 2 = 0.14836
    bh = differences(_page(), "fedavg", correction="bh")
    assert bh[2].p_adjusted == pytest.approx(0.052288, abs=4e-6) and bh[0].p_adjusted == pytest.approx(
        0.14836, abs=1e-5
    )
    assert "BH p = 0.052" in bh[2].describe() and not bh[2].significant


def test_a_cell_too_small_to_judge_is_outside_the_family_and_two_lists_pool_into_one():
    page = pd.concat(
        [_page(), _results({("fedavg", "alpha=1.0"): [0.7], ("full", "alpha=1.0"): [0.8]})], ignore_index=True
    )
    found = differences(page, "fedavg")
    assert len(found) == 6 and {d.family for d in found} == {4}  # the one-run cells do not count
    assert math.isnan(found[4].p_adjusted) and found[4].describe() == "+10.00 points (too few seeds to judge)"
    # pooled with a second page's 4 judged cells: one family of 8, Holm's smallest multiplier now 8
    pooled = comparison.corrected(found + differences(_page(), "fedavg", correction="none"), "holm")
    assert {d.family for d in pooled} == {8}
    assert pooled[2].p_adjusted == pytest.approx(min(1.0, 8 * 0.013072), abs=1e-5)


def test_a_difference_built_by_hand_is_judged_on_its_raw_p():
    by_hand = comparison.Difference("full", "a", 0.02, 0.01, 3, 3, 0.005, 0.035, True, 3, 0.25)
    assert by_hand.correction == "none" and by_hand.family == 0 and math.isnan(by_hand.p_adjusted)
    assert by_hand.significant
    assert by_hand.describe() == "+2.00 points [+0.50, +3.50] (paired t p = 0.01, sign-flip p = –, n = 3)"
    adjusted = comparison.corrected([by_hand, by_hand], "holm")[0]  # 2 x 0.01
    assert adjusted.p_adjusted == pytest.approx(0.02) and adjusted.significant
    unpaired = comparison.Difference("full", "a", 0.1, 0.04, 3, 3, 0.01, 0.19, se=0.04, dof=4)
    (held,) = comparison.corrected([unpaired, comparison.Difference("x", "a", 0.0, 0.5, 3, 3, -0.1, 0.1)], "bh")[:1]
    # BH over 0.04 and 0.5: 2 x 0.04 / 1 = 0.08, 0.5: the 0.04 is no longer a call. None called: the interval is
    # redrawn at BH's strictest level 1 - 0.05/2 = 97.5 %: 0.10 ± t_{0.9875, 4} x 0.04 = 0.10 ± 3.4954 x 0.04
    half = stats.t.ppf(0.9875, 4) * 0.04
    assert half == pytest.approx(0.139816, abs=1e-6) and held.level == 0.975
    assert (
        held.describe()
        == "+10.00 points, not resolved: interval [-3.98, +23.98] (unpaired, Welch p = 0.04, BH p = 0.08, n = 3 vs 3)"
    )


def test_the_footnote_names_the_correction_its_family_and_the_metric():
    holm = comparison.to_markdown(differences(_page(), "fedavg"), "fedavg").splitlines()[-1]
    assert (
        "p-values adjusted for 4 comparisons by Holm's step-down method (bounds the chance of any false call among "
        "them): the verdict is on the adjusted p (Holm p), the raw p is shown beside it; adjusted p ≥ 0.05 is called "
        "not resolved. Minimum detectable difference"
    ) in holm and holm.endswith("The noise: training seeds only (one split).")
    bh = comparison.footnote(differences(_page(), "fedavg", correction="bh"))
    assert "by the Benjamini–Hochberg method (bounds the expected share of false calls, the false discovery rate)" in bh
    none = comparison.footnote(differences(_page(), "fedavg", correction="none"))
    assert "no correction for multiple comparisons: the verdict is on the raw p; p ≥ 0.05 is called" in none
    last5 = comparison.to_markdown(
        differences(_page(), "fedavg"), "fedavg", metric_label="mean test accuracy of the last 5 rounds"
    )
    assert last5.splitlines()[-1].startswith(
        "Differences of mean test accuracy of the last 5 rounds (averaged over runs) in points; in brackets"
    )
    assert comparison.footnote([]).startswith("Differences of mean final-round accuracy in points")


# ---------------------------------------------------------------- intervals that agree with the corrected verdict


def _hand(variant: str, p: float, delta: float = 0.05, se: float = 0.01, dof: float = 5) -> comparison.Difference:
    return comparison.Difference(variant, "a", delta, p, 6, 6, math.nan, math.nan, True, 6, se=se, dof=dof)


def test_holm_intervals_are_at_the_level_where_holm_stopped_and_exclude_0_exactly_where_it_calls():
    # m = 4, raw p 0.001, 0.015, 0.02, 0.3. Holm: 4 x 0.001 = 0.004 < 0.05 called; 3 x 0.015 = 0.045 < 0.05 called;
    # 2 x 0.02 = 0.04 < 0.05 called; 0.3 not. k = 3: the intervals are at 1 - 0.05 / (4 - 3) = 95 %. Bonferroni's
    # 98.75 % would have printed an interval around 0 for the called p = 0.02 cell (0.02 > 0.0125)
    cells = [_hand("a", 0.001), _hand("b", 0.015), _hand("c", 0.02), _hand("d", 0.3)]
    found = comparison.corrected(cells, "holm")
    assert [d.significant for d in found] == [True, True, True, False]
    assert comparison.family_alpha(found) == pytest.approx(0.05) and {d.level for d in found} == {0.95}
    half = stats.t.ppf(0.975, 5) * 0.01
    assert (found[0].ci_low, found[0].ci_high) == pytest.approx((0.05 - half, 0.05 + half))
    # nothing called (2 x 0.03 = 0.06): Bonferroni's level 1 - 0.05 / 2; two called of 4 (0.001, 0.01, 0.3, 0.4):
    # 1 - 0.05 / (4 - 2)
    none_called = comparison.corrected([_hand("a", 0.03), _hand("b", 0.3)], "holm")
    assert comparison.family_alpha(none_called) == pytest.approx(0.025)
    two = comparison.corrected([_hand("a", 0.001), _hand("b", 0.01), _hand("c", 0.3), _hand("d", 0.4)], "holm")
    assert [d.significant for d in two] == [True, True, False, False]
    assert comparison.family_alpha(two) == pytest.approx(0.025)
    assert "97.5 % interval (1 − 0.05/2: the level of the step at which Holm's procedure stopped)" in (
        comparison.footnote(two)
    )


def test_bh_intervals_are_at_the_false_coverage_level_of_the_called():
    # BH over 0.001, 0.02, 0.03, 0.3 (m = 4): 4 x 0.03 / 3 = 0.04 < 0.05, so the first 3 are called (k = 3);
    # the level is 1 - 3 x 0.05 / 4 = 96.25 %; with none called, 1 - 0.05 / 4
    found = comparison.corrected([_hand("a", 0.001), _hand("b", 0.02), _hand("c", 0.03), _hand("d", 0.3)], "bh")
    assert [d.significant for d in found] == [True, True, True, False]
    assert comparison.family_alpha(found) == pytest.approx(3 * 0.05 / 4)
    assert comparison.family_alpha(comparison.corrected([_hand("a", 0.2), _hand("b", 0.3)], "bh")) == 0.025
    assert comparison.family_alpha(comparison.corrected([_hand("a", 0.2)], "none")) == 0.05


def test_on_every_committed_page_an_interval_excludes_0_exactly_where_the_cell_is_called():
    from raytune_fl.report import results_page
    from tests.support import REPO

    checked = 0
    for folder in results_page.page_folders(REPO / "docs" / "results"):
        record, runs, _ = results_page.read(folder)
        runs = results_page.classify(record, runs)
        for metric in results_page.metrics_present(record, runs):
            for d in results_page.family(record, runs, metric):
                if not math.isnan(d.p_value):
                    assert d.significant == (d.ci_low > 0 or d.ci_high < 0), (folder.name, metric, d)
                    checked += 1
    assert checked >= 80


def test_the_sign_flip_p_sits_on_the_paired_difference_and_collapsed_runs_are_counted_out():
    # differences +3, -1, +2 points: of the 8 sign vectors, |sum| >= 4 for (+3, -1, +2) = 4, (+3, +1, +2) = 6 and
    # their negations: p = 4 / 8 = 0.5
    results = _results({("fedavg", "a"): [0.70, 0.75, 0.80], ("full", "a"): [0.73, 0.74, 0.82]})
    (found,) = differences(results, "fedavg")
    assert found.permutation_p == pytest.approx(0.5)
    assert found.sd_pairs == pytest.approx(np.std([0.03, -0.01, 0.02], ddof=1))
    results.loc[results.index[-1], "status"] = "collapsed"
    assert comparison.collapsed_runs(results) == (1, 6)
    (without,) = differences(results, "fedavg")  # the collapsed run's pair leaves
    assert without.n_pairs == 2 and without.n == 2
    assert "Collapsed runs are out of the statistics (1 of 6)." in comparison.to_markdown(
        [without], "fedavg", collapsed=comparison.collapsed_runs(results)
    )
