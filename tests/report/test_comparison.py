"""Variants against a reference, with a seed-noise verdict: paired differences (same seed, same split) and the
unpaired Welch fallback, their p-values and 95 % intervals computed by hand."""

from __future__ import annotations

import math

import pandas as pd
import pytest

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
    assert (
        found.describe()
        == "+2.00 points [-0.48, +4.48], inside seed noise (paired t p = 0.074, Wilcoxon p = 0.25, n = 3)"
    )


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
    assert found.describe() == "+2.50 points [+1.26, +3.74] (paired t p = 0.013, Wilcoxon p = 0.25, n = 3)"


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
    assert found.describe() == "+10.00 points [+5.47, +14.53] (unpaired, Welch p = 0.0036, n = 3 vs 3)"
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
        found.describe() == "+10.00 points [-2.17, +22.17], inside seed noise (unpaired, Welch p = 0.072, n = 2 vs 2)"
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
    assert found.describe().startswith("+1.00 points [")
    assert ", inside seed noise (unpaired, Welch p = 0.7" in found.describe()


def test_one_seed_cannot_be_judged_and_no_spread_at_all_is_judged_by_the_means():
    one_seed = differences(_results({("fedavg", "a"): [0.7], ("full", "a"): [0.8]}), "fedavg")[0]
    assert math.isnan(one_seed.p_value) and not one_seed.significant and math.isnan(one_seed.ci_low)
    assert one_seed.describe() == "+10.00 points (too few seeds to judge)"
    same = differences(_results({("fedavg", "a"): [0.7, 0.7], ("full", "a"): [0.7, 0.7]}), "fedavg")[0]
    assert same.paired and same.p_value == 1.0
    assert same.describe() == "+0.00 points [+0.00, +0.00], inside seed noise (paired t p = 1, Wilcoxon p = 1, n = 2)"
    apart = differences(_results({("fedavg", "a"): [0.7, 0.7], ("full", "a"): [0.8, 0.8]}), "fedavg")[0]
    assert apart.p_value == 0.0 and apart.significant and (apart.ci_low, apart.ci_high) == pytest.approx((0.1, 0.1))
    unpaired = differences(
        _results({("fedavg", "a"): [0.7, 0.7], ("full", "a"): [0.8, 0.8]}, seeds={"full": [2, 3]}), "fedavg"
    )[0]
    assert not unpaired.paired and unpaired.p_value == 0.0 and unpaired.significant


# ---------------------------------------------------------------- the table


def test_every_variant_in_every_setting_in_order_and_the_markdown_has_a_column_per_setting():
    cells = {
        ("fedavg", "alpha=0.1"): [0.70, 0.75, 0.80],
        ("full", "alpha=0.1"): [0.71, 0.77, 0.83],
        ("freeze", "alpha=0.1"): [0.70, 0.75, 0.80],
        ("fedavg", "alpha=0.5"): [0.60, 0.70, 0.80],
        ("full", "alpha=0.5"): [0.62, 0.725, 0.83],
        ("freeze", "alpha=0.5"): [0.60, 0.70, 0.80],
    }
    found = differences(_results(cells), "fedavg")
    assert [(d.variant, d.setting) for d in found] == [
        ("full", "alpha=0.1"),
        ("freeze", "alpha=0.1"),
        ("full", "alpha=0.5"),
        ("freeze", "alpha=0.5"),
    ]
    lines = comparison.to_markdown(found, "fedavg").splitlines()
    assert lines[0] == "| variant − fedavg | alpha=0.1 | alpha=0.5 |"
    assert lines[1] == "|---|:---:|:---:|"
    assert lines[2] == (
        "| full | +2.00 points [-0.48, +4.48], inside seed noise (paired t p = 0.074, Wilcoxon p = 0.25, n = 3) "
        "| +2.50 points [+1.26, +3.74] (paired t p = 0.013, Wilcoxon p = 0.25, n = 3) |"
    )
    assert lines[3] == (
        "| freeze | +0.00 points [+0.00, +0.00], inside seed noise (paired t p = 1, Wilcoxon p = 1, n = 3) "
        "| +0.00 points [+0.00, +0.00], inside seed noise (paired t p = 1, Wilcoxon p = 1, n = 3) |"
    )
    assert lines[4] == ""
    assert lines[5].startswith("Differences of mean final-round accuracy in points, 95 % interval in brackets; paired")
    assert "0.25 with 3 pairs; it cannot reach 0.05 under 6 pairs" in lines[5] and "Welch" not in lines[5]
    assert lines[5].endswith("The noise: training seeds only (one split).")


def test_a_variant_without_finished_runs_shows_a_dash_and_an_unknown_reference_is_refused():
    results = _results({("fedavg", "a"): [0.7, 0.72]})
    results.loc[len(results)] = {"variant": "full", "setting": "a", "seed": 0, "status": "failed", "test_acc": 0.0}
    (found,) = differences(results, "fedavg")
    assert math.isnan(found.delta) and found.describe() == "– (no finished run)"
    with pytest.raises(ValueError, match="reference variant 'moon'"):
        differences(results, "moon")
