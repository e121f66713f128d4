"""The dashboard's intervals, on hand-made frames: the ablation chart's error bars and the learning curves'."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from raytune_fl.report.figures import BARS, band, curve_figure, error_bars, final_accuracy_figure
from tests.support import band_curves

T975_1, T975_2 = 12.706205, 4.302653  # Student's t quantiles t_{0.975, dof} for 1 and 2 dof, from a t-table


def test_band_adds_the_t_interval_of_the_mean_at_each_round():
    curves = band_curves()  # c stopped after round 1
    by_round = band(curves, "test_acc")
    assert list(by_round["round"]) == [1, 2]
    # round 1: 0.2, 0.4, 0.3: mean 0.3, sd 0.1, half = 4.3027 x 0.1 / sqrt 3 = 0.248414
    # round 2: 0.5, 0.7: mean 0.6, sd 0.141421, half = 12.7062 x 0.141421 / sqrt 2 = 1.270620
    assert np.allclose(by_round["ci_lo"], [0.3 - 0.248414, 0.6 - 1.270620], atol=1e-6)
    assert np.allclose(by_round["ci_hi"], [0.3 + T975_2 * 0.1 / math.sqrt(3), 0.6 + T975_1 * 0.1], atol=1e-6)
    one_run = band(curves[curves["run_id"] == "a"], "test_acc")
    assert one_run["ci_lo"].isna().all() and one_run["ci_hi"].isna().all()  # one run: no interval


def test_error_bars_are_the_distances_from_the_mean_to_the_interval_ends():
    bars = error_bars([0.5, 0.6], [0.4, math.nan], [0.7, math.nan])
    assert bars["type"] == "data" and bars["symmetric"] is False
    assert np.allclose(bars["array"], [0.2, math.nan], equal_nan=True)
    assert np.allclose(bars["arrayminus"], [0.1, math.nan], equal_nan=True)


def test_the_ablation_chart_has_a_point_per_variant_and_setting_with_its_95_percent_interval():
    summary = pd.DataFrame(
        {
            "variant": ["full", "full", "fedavg", "fedavg"],
            "setting": ["alpha=0.1", "alpha=1.0", "alpha=0.1", "alpha=1.0"],
            "mean": [0.70, 0.58, 0.62, np.nan],
            "std": [0.01, np.nan, 0.02, np.nan],
            "n": [3, 1, 3, 0],
            "runs": [3, 3, 3, 3],
            # full at alpha=0.1: 0.70 ± 4.3027 x 0.01 / sqrt 3 = 0.70 ± 0.024841; fedavg: 0.62 ± 0.049683
            "ci_low": [0.675159, np.nan, 0.570317, np.nan],
            "ci_high": [0.724841, np.nan, 0.669683, np.nan],
            "best": [True, True, False, False],
        }
    )
    fig = final_accuracy_figure(summary, {"full": "#111111", "fedavg": "#222222"}, "chart")
    full, fedavg = fig.data
    assert full.name == "full" and list(full.x) == ["alpha=0.1", "alpha=1.0"]
    assert np.allclose(full.y, [70.0, 58.0])  # in %
    assert full.error_y.type == "data" and full.error_y.symmetric is False
    assert np.allclose(full.error_y.array, [2.4841, math.nan], atol=1e-4, equal_nan=True)
    assert np.allclose(full.error_y.arrayminus, [2.4841, math.nan], atol=1e-4, equal_nan=True)  # 1 run: no bar
    assert np.allclose(fedavg.error_y.array[:1], [4.9683], atol=1e-4) and full.marker.color == "#111111"
    assert BARS in fig.layout.yaxis.title.text and fig.layout.scattermode == "group"


def test_a_cell_of_two_runs_has_no_error_bar_and_says_why_and_one_of_three_has_one():
    # summarise's rows: full 0.5 and 0.9 (2 runs: the t-interval ±2.54 clipped to [0, 1]); fedavg 0.70, 0.72, 0.74
    summary = pd.DataFrame(
        {
            "variant": ["full", "fedavg"],
            "setting": ["a", "a"],
            "mean": [0.70, 0.72],
            "std": [0.282843, 0.02],
            "n": [2, 3],
            "runs": [2, 3],
            "ci_low": [0.0, 0.670317],
            "ci_high": [1.0, 0.769683],
            "best": [False, True],
        }
    )
    full, fedavg = final_accuracy_figure(summary, {}, "chart").data
    assert np.allclose(full.y, [70.0]) and math.isnan(full.error_y.array[0]) and math.isnan(full.error_y.arrayminus[0])
    assert full.customdata[0][0] == "n = 2: too few runs for an interval"
    # 0.72 ± 4.3027 x 0.02 / sqrt 3 = 0.72 ± 0.049683: 4.9683 points each way
    assert np.allclose([fedavg.error_y.array[0], fedavg.error_y.arrayminus[0]], [4.9683, 4.9683], atol=1e-4)
    assert fedavg.customdata[0][0] == "95 % interval 67.03..76.97"
    assert "%{customdata[0]} (%{customdata[1]}/%{customdata[2]} runs)" in full.hovertemplate


def test_learning_curves_carry_the_interval_of_the_mean_as_error_bars():
    curves = pd.DataFrame(
        {
            "variant": ["full"] * 4,
            "setting": ["a"] * 4,
            "run_id": ["r1", "r1", "r2", "r2"],
            "round": [1, 2, 1, 2],
            "test_acc": [0.2, 0.5, 0.4, 0.5],
        }
    ).assign(elapsed_s=1.0)
    band_trace, mean = curve_figure(curves, "test_acc", "round", "round", "t", {"full": "#111111"}).data
    assert np.allclose(mean.y, [0.3, 0.5])
    # round 1: 0.2, 0.4: sd 0.141421, half = 12.7062 x 0.141421 / sqrt 2 = 1.270620; round 2: no spread, no width
    assert np.allclose(mean.error_y.array, [1.270620, 0.0], atol=1e-6)
    assert np.allclose(mean.error_y.arrayminus, [1.270620, 0.0], atol=1e-6)
    assert np.allclose(band_trace.y, [0.4, 0.5, 0.5, 0.2])  # the band stays min..max: max out, min back
    # tune trials differ in hyperparameters, not seeds: no interval of their mean is drawn
    _, tune_mean = curve_figure(curves, "test_acc", "round", "round", "t", {}, intervals=False).data
    assert tune_mean.error_y.array is None and "95 %" not in tune_mean.hovertemplate
