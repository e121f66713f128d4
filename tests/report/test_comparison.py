"""Variants against a reference, with a seed-noise verdict: differences and Welch p-values computed by hand."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from raytune_fl.report import comparison
from raytune_fl.report.comparison import differences


def _results(cells: dict[tuple[str, str], list[float]], failed: tuple[str, str] | None = None) -> pd.DataFrame:
    rows = [
        {"variant": v, "setting": s, "seed": i, "status": "finished", "test_acc": acc}
        for (v, s), accs in cells.items()
        for i, acc in enumerate(accs)
    ]
    if failed:  # a run that did not finish: its accuracy must not count
        rows.append({"variant": failed[0], "setting": failed[1], "seed": 9, "status": "failed", "test_acc": 0.0})
    return pd.DataFrame(rows)


def _welch_p_four_dof(t: float) -> float:
    """Two-sided p of Student's t with 4 degrees of freedom, closed form: F(t) = 1/2 + 3/4 x (1 - x^2/3),
    x = t / sqrt(4 + t^2)."""
    x = abs(t) / math.sqrt(4 + t * t)
    return 2 * (1 - (0.5 + 0.75 * x * (1 - x * x / 3)))


def test_a_ten_point_gain_over_tight_seeds_is_significant_with_the_hand_computed_p():
    # both sides: 3 seeds, variance 0.0004; SE = sqrt(2 * 0.0004 / 3), t = 0.10 / SE = 6.1237, Welch dof = 4
    results = _results({("fedavg", "a"): [0.70, 0.72, 0.74], ("full", "a"): [0.80, 0.82, 0.84]}, failed=("full", "a"))
    (found,) = differences(results, "fedavg")
    t = 0.10 / math.sqrt(2 * 0.0004 / 3)
    assert found.delta == pytest.approx(0.10)
    assert found.p_value == pytest.approx(_welch_p_four_dof(t), rel=1e-9)  # 0.0036
    assert (found.n, found.n_reference) == (3, 3)  # the failed run is not counted
    assert found.significant
    assert found.describe() == "+10.00 points (p = 0.0036)"


def test_a_gain_smaller_than_the_seeds_spread_is_called_inside_seed_noise():
    # means 0.80 vs 0.79, variances 0.0025 and 0.0001: t = 0.01 / sqrt(0.0026 / 3) = 0.34, far from significant
    results = _results({("fedavg", "a"): [0.78, 0.79, 0.80], ("full", "a"): [0.75, 0.80, 0.85]})
    (found,) = differences(results, "fedavg")
    assert found.delta == pytest.approx(0.01)
    assert 0.7 < found.p_value < 0.8
    assert not found.significant
    assert found.describe().startswith("+1.00 points, inside seed noise (p = 0.7")


def test_one_seed_cannot_be_judged_and_no_spread_at_all_is_judged_by_the_means():
    one_seed = differences(_results({("fedavg", "a"): [0.7], ("full", "a"): [0.8]}), "fedavg")[0]
    assert math.isnan(one_seed.p_value) and not one_seed.significant
    assert one_seed.describe() == "+10.00 points (too few seeds to judge)"
    same = differences(_results({("fedavg", "a"): [0.7, 0.7], ("full", "a"): [0.7, 0.7]}), "fedavg")[0]
    assert same.p_value == 1.0 and same.describe() == "+0.00 points, inside seed noise (p = 1)"
    apart = differences(_results({("fedavg", "a"): [0.7, 0.7], ("full", "a"): [0.8, 0.8]}), "fedavg")[0]
    assert apart.p_value == 0.0 and apart.significant


def test_every_variant_in_every_setting_in_order_and_the_markdown_has_a_column_per_setting():
    cells = {
        ("fedavg", "alpha=0.1"): [0.70, 0.72, 0.74],
        ("full", "alpha=0.1"): [0.80, 0.82, 0.84],
        ("freeze", "alpha=0.1"): [0.70, 0.72, 0.74],
        ("fedavg", "alpha=0.5"): [0.90, 0.91, 0.92],
        ("full", "alpha=0.5"): [0.90, 0.91, 0.92],
        ("freeze", "alpha=0.5"): [0.90, 0.91, 0.92],
    }
    found = differences(_results(cells), "fedavg")
    assert [(d.variant, d.setting) for d in found] == [
        ("full", "alpha=0.1"),
        ("freeze", "alpha=0.1"),
        ("full", "alpha=0.5"),
        ("freeze", "alpha=0.5"),
    ]
    text = comparison.to_markdown(found, "fedavg")
    lines = text.splitlines()
    assert lines[0] == "| variant − fedavg | alpha=0.1 | alpha=0.5 |"
    assert lines[2].startswith("| full | +10.00 points (p = 0.0036) | +0.00 points, inside seed noise (p = 1) |")
    assert lines[3].startswith("| freeze | +0.00 points, inside seed noise")


def test_a_variant_without_finished_runs_shows_a_dash_and_an_unknown_reference_is_refused():
    results = _results({("fedavg", "a"): [0.7, 0.72]})
    results.loc[len(results)] = {"variant": "full", "setting": "a", "seed": 0, "status": "failed", "test_acc": 0.0}
    (found,) = differences(results, "fedavg")
    assert math.isnan(found.delta) and found.describe() == "– (no finished run)"
    with pytest.raises(ValueError, match="reference variant 'moon'"):
        differences(results, "moon")
