"""The method timing benchmark: its ratio arithmetic by hand, and a tiny real run."""

from __future__ import annotations

import math

import pytest

from raytune_fl.bench.methods import DEFAULT_METHODS, Timing, benchmark, format_table, ratio_table
from raytune_fl.config import ExperimentConfig


def test_ratios_divide_by_fedavg_of_the_same_repetition():
    nan = float("nan")
    timings = [
        Timing("fedavg", 1, [1.0, 1.2, 1.1], 0.0, 0.5, nan),  # median 1.1
        Timing("moon", 1, [1.5, 1.7, 1.6], 0.0, 0.6, nan),  # median 1.6 -> 1.6 / 1.1
        Timing("fedavg", 2, [2.0, 2.0, 2.0], 0.0, 0.5, nan),  # a slow repetition: median 2.0
        Timing("moon", 2, [3.0, 3.0, 3.0], 0.0, 0.6, 0.7, 0.05),  # 3.0 / 2.0 = 1.5; aggregation 5 % of a round
    ]
    rows = {row["variant"]: row for row in ratio_table(timings)}
    assert rows["fedavg"]["ratio"] == 1.0
    assert rows["moon"]["ratio"] == pytest.approx((1.6 / 1.1 + 1.5) / 2)  # median of two = their mean
    assert rows["moon"]["s_per_round"] == pytest.approx((1.6 + 3.0) / 2)
    assert rows["moon"]["personal_val_acc"] == 0.7 and math.isnan(rows["fedavg"]["personal_val_acc"])
    assert rows["moon"]["aggregate_share"] == pytest.approx(0.025)  # median of 0 and 0.05
    assert "| moon | 2.300 | 1.48 | 2.5 | 0.600 | 0.700 |" in format_table(ratio_table(timings))


def test_a_tiny_benchmark_runs_every_listed_method():
    experiment = ExperimentConfig.model_validate(
        {
            "dataset": "digits",
            "partition": {"kind": "dirichlet", "alpha": 0.5, "clients": 3, "min_size": 20},
            "rounds": 2,
            "batch_size": 32,
            "resources": {"actors": 0},
        }
    )
    variants = {name: DEFAULT_METHODS[name] for name in ("fedavg", "fedbn")}
    timings = benchmark(experiment, variants, reps=1, warmup=1, log=lambda _: None)
    assert [(t.variant, len(t.round_times)) for t in timings] == [("fedavg", 1), ("fedbn", 1)]
    assert all(t.median > 0 for t in timings)
    assert 0.0 <= timings[1].personal_val_acc <= 1.0 and math.isnan(timings[0].personal_val_acc)
    assert all(0.0 <= t.aggregate_share < 1.0 for t in timings)
