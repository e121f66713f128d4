"""The method timing benchmark: its ratio arithmetic by hand, and a tiny real run."""

from __future__ import annotations

import json
import math

import pytest

from benchmarks.methods import DEFAULT_METHODS, Timing, benchmark, format_table, ratio_table
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
    assert 0.0 <= timings[1].personal_val_acc <= 1.0  # FedBN's clients' own BatchNorm
    assert timings[0].personal_val_acc == timings[0].val_acc  # FedAvg's clients use the global model
    assert all(0.0 <= t.aggregate_share < 1.0 for t in timings)


def test_client_batch_flags_reach_the_children_and_the_configs():
    from benchmarks import methods, workload

    assert workload.parse_client_batches("1, 2,5,10,2") == [1, 2, 5, 10] and workload.parse_client_batches("auto")
    for bad in ("0", "x", ""):
        with pytest.raises(ValueError, match="--client-batch"):
            workload.parse_client_batches(bad)
    assert workload.main(["--client-batch", "0"]) == 2
    command = workload.child_command("engine_batched", 6, 2, 2, "cpu", 5)
    assert (
        command[command.index("--client-batch") + 1] == "5"
        and command[command.index("--child") + 1] == "engine_batched"
    )
    assert "--client-batch" not in workload.child_command("engine_inprocess", 6, 2, 2, "cpu", 5)
    assert workload.way_label("engine_batched", 5) == "engine_batched K=5"
    assert workload.way_label("engine_inprocess", 5) == "engine_inprocess"
    assert workload.workload_config(client_batch=5).resources.client_batch == 5
    assert workload.workload_config().resources.client_batch == 1
    assert methods.client_batch_arg("4") == 4 and methods.client_batch_arg("auto") == "auto"
    with pytest.raises(Exception, match="positive integer"):
        methods.client_batch_arg("0")

    # the peak GPU memory column: "-" where the child has none (CPU, or actors)
    mib = 1024 * 1024
    results = [
        workload.WayResult("reference", 1, [9.0, 2.0, 2.0], 20.0, 100 * mib, 0.78),
        workload.WayResult("engine_batched K=5", 1, [9.0, 1.0, 1.0], 15.0, 150 * mib, 0.77, 812.4),
    ]
    table = workload.format_table(workload.summarise(results)).splitlines()
    assert table[2].endswith("| 0.780 | - |") and table[3].endswith("| 0.770 | 812 MiB |")
    assert "| engine_batched K=5 | 1.000 s | 0.50 | 15.0 s | 0.75 | 150 MiB | nan |" in table[3]


def test_the_client_batch_ceiling_benchmark_times_both_ways(tmp_path, capsys):
    from benchmarks import client_batch as batched

    out = tmp_path / "ceiling.json"
    argv = ["--clients", "2", "--steps", "2", "--batch-size", "4", "--image", "8", "--reps", "1", "--json", str(out)]
    assert batched.main(argv) == 0
    result = json.loads(out.read_text())
    assert result["speedup"] == pytest.approx(result["sequential_s"] / result["batched_s"])
    assert result["ms_per_stacked_step"] == pytest.approx(1000 * result["batched_s"] / 2)
    assert "2 equal clients x 2 steps" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        batched.main(["--clients", "0"])
    assert "--clients: must be at least 1 (got 0)" in capsys.readouterr().err
