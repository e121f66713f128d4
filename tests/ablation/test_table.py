"""The ablation summary's intervals stay where the score can be: an accuracy's in [0, 1], by hand."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from raytune_fl.ablation.table import MIN_RUNS_FOR_INTERVAL, clip_interval, mean_interval, summarise

T975_1 = 12.706205  # Student's t quantile t_{0.975, 1}, from a t-table


def _runs(values: list[float], metric: str = "test_acc") -> pd.DataFrame:
    return pd.DataFrame({"variant": "full", "setting": "a", "status": "finished", metric: values})


def test_two_runs_give_a_t_interval_wider_than_the_unit_interval_which_the_summary_clips():
    # 0.5 and 0.9: mean 0.7, sd 0.2828 (= 0.4 / sqrt 2), half = 12.706 x 0.2828 / sqrt 2 = 2.5412
    low, high = mean_interval([0.5, 0.9])
    half = T975_1 * (0.4 / math.sqrt(2)) / math.sqrt(2)
    assert half == pytest.approx(2.541241, abs=1e-6)
    assert (low, high) == pytest.approx((0.7 - half, 0.7 + half))  # [-1.84, 3.24]: no accuracy is there
    (row,) = summarise(_runs([0.5, 0.9])).to_dict("records")
    assert row["mean"] == pytest.approx(0.7) and row["n"] == 2
    assert (row["ci_low"], row["ci_high"]) == (0.0, 1.0)
    # a loss has no such bounds: the caller says so
    (loss,) = summarise(_runs([0.5, 0.9], "val_loss"), "val_loss", bounds=None).to_dict("records")
    assert (loss["ci_low"], loss["ci_high"]) == pytest.approx((0.7 - half, 0.7 + half))


def test_an_interval_inside_the_bounds_is_unchanged_and_one_run_has_none():
    # 0.70, 0.72, 0.74: mean 0.72, sd 0.02, half = 4.3027 x 0.02 / sqrt 3 = 0.049683
    (row,) = summarise(_runs([0.70, 0.72, 0.74])).to_dict("records")
    assert (row["ci_low"], row["ci_high"]) == pytest.approx((0.670317, 0.769683), abs=1e-6)
    (one,) = summarise(_runs([0.98])).to_dict("records")
    assert math.isnan(one["ci_low"]) and math.isnan(one["ci_high"])
    # only the end that leaves is moved: 0.95 and 0.99 -> mean 0.97, half = 12.706 x 0.02 = 0.2541
    (top,) = summarise(_runs([0.95, 0.99])).to_dict("records")
    assert top["ci_low"] == pytest.approx(0.97 - T975_1 * 0.02, abs=1e-6) and top["ci_high"] == 1.0


def test_clip_interval_keeps_nan_and_respects_other_bounds():
    assert clip_interval(-0.5, 1.5, (0.0, 1.0)) == (0.0, 1.0)
    assert clip_interval(-0.5, 1.5, None) == (-0.5, 1.5)
    assert clip_interval(2.0, 3.0, (0.0, 1.0)) == (1.0, 1.0)  # wholly outside: both ends at the bound
    low, high = clip_interval(math.nan, math.nan, (0.0, 1.0))
    assert math.isnan(low) and math.isnan(high)
    assert clip_interval(5.0, 150.0, (0.0, 100.0)) == (5.0, 100.0)
    assert MIN_RUNS_FOR_INTERVAL == 3


def test_collapsed_runs_are_out_of_the_mean_and_every_format_says_how_many():
    from raytune_fl.ablation.table import format_cell, to_csv, to_html, to_markdown

    results = pd.DataFrame(
        {
            "variant": ["full"] * 3 + ["frozen"] * 2 + ["fedavg"] * 2,
            "setting": "a",
            "status": ["finished", "finished", "collapsed", "collapsed", "collapsed", "finished", "error"],
            "test_acc": [0.70, 0.74, 0.10, 0.11, 0.10, 0.60, 0.0],
        }
    )
    summary = summarise(results).set_index("variant")
    # full: 0.70 and 0.74 counted (mean 0.72, sd 0.028284), the run at chance made but not averaged in
    assert summary.loc["full", "mean"] == pytest.approx(0.72) and summary.loc["full", "std"] == pytest.approx(
        0.028284, abs=1e-6
    )
    assert summary.loc["full", ["n", "runs", "collapsed"]].tolist() == [2, 3, 1]
    assert summary.loc["frozen", ["n", "runs", "collapsed"]].tolist() == [0, 2, 2]
    assert math.isnan(summary.loc["frozen", "mean"]) and math.isnan(summary.loc["frozen", "ci_low"])
    assert summary.loc["fedavg", "collapsed"] == 0  # a failed run is missing, not collapsed
    markdown = to_markdown(summary.reset_index(), seeds=3)
    assert "| full | **72.00 ± 2.83 (2/3, 1 collapsed)** |" in markdown
    assert "| frozen | – (0/2, 2 collapsed) |" in markdown
    assert "| fedavg | 60.00 (1/2) |" in markdown  # the unfinished mark as before
    assert "k collapsed = k runs ran every round to a final accuracy at chance" in markdown
    assert "b + 2 sqrt(b (1 - b) / size)" in markdown and "left out of the mean and the statistics" in markdown
    csv = to_csv(summary.reset_index())
    assert '"72.00 ± 2.83 (2/3, 1 collapsed) *"' in csv and '"– (0/2, 2 collapsed)"' in csv
    assert "<td>– (0/2, 2 collapsed)</td>" in to_html(summary.reset_index())
    assert format_cell(0.72, 0.02, 3, 3, collapsed=0) == "72.00 ± 2.00"  # all counted: no mark


def test_under_privacy_the_table_says_the_most_epsilon_each_variants_runs_spent():
    from raytune_fl.ablation.table import privacy_line
    from raytune_fl.metrics import EPSILON

    results = pd.DataFrame(
        {"variant": ["fedavg", "fedavg", "fedprox"], EPSILON: [7.91, 7.99, 4.0], "status": ["finished"] * 3}
    )
    assert privacy_line(results) == "Privacy: epsilon spent, the most over each variant's runs: fedavg 7.99, fedprox 4."
    assert privacy_line(results.assign(**{EPSILON: float("nan")})) == ""
    stored_inf = results.assign(**{EPSILON: [1.7976931348623157e308, 8.0, 2.0]})  # MLflow's inf
    assert "fedavg inf (no noise)" in privacy_line(stored_inf)
    assert privacy_line(results.drop(columns=EPSILON)) == ""
