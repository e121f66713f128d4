"""benchmarks/pbt_schedule.py: the paired differences by hand, the three ways' spaces (accepted by this tree's
config, the same budget and range each), the report and the flags. (A whole run: `--quick`, a few minutes.)"""

from __future__ import annotations

import math
import subprocess
import sys

import pytest

from benchmarks import pbt_schedule as bench
from raytune_fl.config import SearchSpace

BUDGET = bench.Budget(trials=8, rounds=20, interval=4, seeds=5)


def test_a_paired_difference_and_its_t_interval_by_hand():
    # per seed: way - reference = +0.02, +0.04, +0.06: mean 0.04, sd 0.02, se 0.02/sqrt(3), t(0.975, 2) = 4.3027
    reference = {1: 0.80, 2: 0.70, 3: 0.90}
    way = {1: 0.82, 2: 0.74, 3: 0.96, 4: 0.99}  # seed 4 has no pair: left out
    d = bench.paired("pbt", way, reference)
    half = 4.302652729911275 * 0.02 / math.sqrt(3)
    assert (d.n, d.mean) == (3, pytest.approx(0.04))
    assert (d.low, d.high) == (pytest.approx(0.04 - half), pytest.approx(0.04 + half))
    assert d.inside_noise  # half-width 0.0497 > 0.04
    # +0.04, +0.05, +0.06: sd 0.01, half-width 0.0248, the interval above 0
    tight = bench.paired("pbt", {1: 0.84, 2: 0.75, 3: 0.96}, reference)
    assert tight.low == pytest.approx(0.05 - 4.302652729911275 * 0.01 / math.sqrt(3)) and not tight.inside_noise


def test_an_interval_that_holds_zero_is_inside_the_noise():
    d = bench.paired("pbt", {1: 0.8, 2: 0.6}, {1: 0.7, 2: 0.7})  # +0.1 and -0.1
    assert d.mean == pytest.approx(0.0) and d.inside_noise
    assert math.isnan(bench.paired("pbt", {1: 0.8}, {1: 0.7}).low)  # one pair: no interval


def test_the_three_ways_search_the_same_range_at_the_same_budget_and_this_tree_accepts_them():
    tpe, pbt, ablation = (SearchSpace.model_validate(f(BUDGET)) for f in (bench.tpe_space, bench.pbt_space,
                                                                           bench.ablation_space))  # fmt: skip
    assert list(tpe.variants) == ["constant", "cosine"] and list(pbt.variants) == ["pbt"]
    assert list(ablation.variants) == list(bench.WAYS)
    for space in (tpe, pbt):
        assert space.tune.num_samples == 8 and space.base.rounds == 20 and space.base.partition.val_fraction == 0.1
        for variant in space.variants.values():
            assert variant.method == "feduv" and set(variant.search) == {"optimizer.lr"}
    assert tpe.tune.early_stopping is None  # every TPE trial spends its rounds, as PBT's population does
    assert pbt.tune.scheduler_name.startswith("pbt") and pbt.tune.scheduler.pbt.interval == 4
    assert tpe.experiment_for("cosine").optimizer.schedule.kind == "cosine"
    assert tpe.experiment_for("constant").optimizer.schedule.kind == "constant"


def test_the_report_compares_each_way_with_the_constant_rate():
    scores = {"constant": {1: 0.80, 2: 0.70, 3: 0.90}, "pbt": {1: 0.82, 2: 0.74, 3: 0.96}}
    text = bench.format_report(scores, {"constant": "lr=0.05", "pbt": "rounds 1-: optimizer.lr=0.1"})
    constant, pbt = text.splitlines()[2:]
    assert constant == "| constant | lr=0.05 | 0.8000 ± 0.0577 (3) | - |"
    assert pbt.startswith("| pbt | rounds 1-: optimizer.lr=0.1 | 0.8400 ± 0.0643 (3) | +0.0400 [-0.0097, +0.0897]")
    assert pbt.endswith("(inside the noise, 3 seeds) |")


def test_an_interval_not_below_the_rounds_is_refused(capsys):
    with pytest.raises(SystemExit) as stopped:
        bench.parse_args(["--interval", "20"])
    assert stopped.value.code == 2
    assert "--interval: 20 must be below --rounds (20)" in capsys.readouterr().err
    assert (bench.parse_args(["--quick"]).trials, bench.parse_args([]).rounds) == (4, 20)
    with pytest.raises(SystemExit):
        bench.parse_args(["--reuse"])  # nothing to ablate again without a workdir's store
    assert "--reuse: ablates the studies of a --workdir's mlflow.db" in capsys.readouterr().err


def test_the_pure_part_imports_neither_ray_nor_mlflow():
    code = "import sys, benchmarks.pbt_schedule; print(sorted({'ray', 'mlflow', 'torch'} & set(sys.modules)))"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "[]\n"
