"""benchmarks/search_efficiency.py: the trial-rounds to a target, the selection, the target and the tables on
hand-made trial histories; the searchers' spaces and the flags. (A tiny run through tune.py: tests/system/.)"""

from __future__ import annotations

import math
import subprocess
import sys

import pytest

from benchmarks import search_efficiency as bench
from benchmarks.search_efficiency import Budget, RoundPoint, Study, TrialHistory


def trial(*points: tuple[int, int, float]) -> TrialHistory:
    """(time, round, val_acc) per round; test_acc = val_acc - 0.05."""
    return TrialHistory(tuple(RoundPoint(t, r, v, v - 0.05) for t, r, v in points))


# three trials of 3 rounds one after another: A ran every round (0.70), B was stopped at round 1 (0.90), C ran every
# round (0.80). Spent in order: A1 A2 A3 B1 C1 C2 C3
A = trial((1, 1, 0.3), (2, 2, 0.5), (3, 3, 0.7))
B = trial((4, 1, 0.9))
C = trial((5, 1, 0.4), (6, 2, 0.6), (7, 3, 0.8))


def test_trial_rounds_to_reach_count_what_was_spent_until_a_trial_ends_every_round_at_the_target():
    assert bench.trial_rounds([A, B, C]) == 7
    assert bench.trial_rounds_to_reach([A, B, C], 3, 0.7) == 3  # A's last round
    assert bench.trial_rounds_to_reach([A, B, C], 3, 0.75) == 7  # C's last round, B's stopped round spent on the way
    assert bench.trial_rounds_to_reach([A, B, C], 3, 0.85) is None  # B's 0.90 was at round 1 of 3: not a result
    assert bench.trial_rounds_to_reach([], 3, 0.5) is None


def test_trials_that_ran_side_by_side_count_as_they_interleaved():
    # PBT-like: X and Y alternate; Y ends round 2 at 0.9 as the 4th round spent, X ends it at 0.86 as the 3rd
    x, y = trial((1, 1, 0.5), (3, 2, 0.86)), trial((2, 1, 0.4), (4, 2, 0.9))
    assert bench.trial_rounds_to_reach([x, y], 2, 0.88) == 4
    assert bench.trial_rounds_to_reach([x, y], 2, 0.85) == 3
    assert [(i, p.round) for i, p in bench.spent_order([x, y])] == [(0, 1), (1, 1), (0, 2), (1, 2)]


def test_the_selection_prefers_trials_that_ran_every_round_and_best_so_far_follows_it():
    assert bench.selected([A, B, C], 3) is C
    assert bench.selected([B], 3) is B  # nothing ran every round: the best of what there is
    rows = bench.best_so_far([A, B, C], 3)
    assert [(r["trial"], r["rounds_run"], r["val_acc"], r["best_so_far"]) for r in rows] == [
        (1, 3, 0.7, 0.7),
        (2, 1, 0.9, 0.7),  # stopped: does not count
        (3, 3, 0.8, 0.8),
    ]
    assert math.isnan(bench.best_so_far([B], 3)[0]["best_so_far"])


def test_the_target_is_the_best_selected_val_acc_less_one_binomial_se():
    assert bench.target_of(0.9, 100) == pytest.approx(0.87)  # sqrt(0.9 * 0.1 / 100) = 0.03
    assert bench.target_of(0.9, None) == 0.9
    studies = [Study("a", 1, 3, 100, (A, B)), Study("b", 1, 3, 400, (C,)), Study("c", 1, 3, 50, (B,))]
    assert bench.best_found(studies) == (0.8, 400)  # c's pick never ran every round
    assert bench.best_found([]) == (pytest.approx(math.nan, nan_ok=True), None)


def test_medians_count_not_reached_and_the_spread_says_so():
    assert bench.median_cost([10, None, 30]) == 30 and bench.median_cost([10, 20]) == 15
    assert math.isinf(bench.median_cost([10, None]))
    assert bench.cost_text([10, None, 30]) == "30 (10-not reached), 2/3 reached"
    assert bench.cost_text([10, None]) == "not reached (10-not reached), 1/2 reached"
    assert bench.cost_text([None]) == "not reached (0/1)" and bench.cost_text([12]) == "12"
    assert bench.mean_se([0.8, 0.9]) == (pytest.approx(0.85), pytest.approx(0.05))
    assert bench.mean_se_text([0.8]) == "0.8000"


def test_the_table_and_the_warm_start_comparison_by_hand():
    cold = [Study("tpe_asha", 1, 3, 100, (A, C), wall_s=20.0), Study("tpe_asha", 2, 3, 100, (A,), wall_s=40.0)]
    warm = [Study("tpe_warm", 1, 3, 100, (C,)), Study("tpe_warm", 2, 3, 100, (B, C))]
    source = [Study("tpe_warm", 1, 3, 100, (A, B), "partition.alpha=0.5")]
    comparison = bench.warm_comparison(cold, warm, source)  # the cold studies' best: 0.8, target 0.76
    assert comparison.target == pytest.approx(0.8 - 0.04)
    assert comparison.cold == (6, None) and comparison.warm == (3, 4) and comparison.source_budget == (4,)
    assert math.isnan(comparison.ratio)  # the cold median is "not reached": no ratio to it
    text = bench.format_warm(comparison)
    assert "| cold (tpe_asha) | not reached (6-not reached), 1/2 reached |" in text
    assert "| warm-started (tpe_warm) | 3.5 (3-4) |" in text and "spent 4 trial-rounds" in text
    assert "warm / cold (medians): n/a (the cold studies never reached it)" in text
    swapped = bench.WarmComparison(0.76, (3,), (None,), ())
    assert "warm / cold (medians): n/a (warm never did)" in bench.format_warm(swapped)
    result = bench.searcher_result("tpe_asha", cold, comparison.target)
    assert result.to_target == (6, None) and result.budget == (6, 3)
    assert result.best_val == (0.8, 0.7) and result.test_acc == pytest.approx((0.75, 0.65)) and result.wall_s == 30
    table = bench.format_table([result], 0.8, comparison.target)
    assert "target: val_acc 0.7600 (the best any study selected, 0.8000, less one SE)" in table
    row = "| tpe_asha | 2 | not reached (6-not reached), 1/2 reached | 4.5 | 0.7500 ± 0.0500 | 0.7000 ± 0.0500 | 30 s |"
    assert row in table


def test_the_report_compares_warm_and_cold_at_the_main_setting_only():
    budget = Budget(trials=2, rounds=3, seeds=1)
    studies = [
        Study("tpe_asha", 1, 3, 100, (A, C), wall_s=10.0),
        Study("random", 1, 3, 100, (A,)),
        Study("tpe_warm", 1, 3, 100, (C,), bench.main_setting(budget)),
        Study("tpe_warm", 1, 3, 100, (B, C), "partition.alpha=0.5"),  # the source: not in the table
    ]
    text = bench.report(studies, budget)
    assert bench.main_setting(budget) == "partition.alpha=0.1"
    assert "| tpe_asha | 1 | 6 | 6 |" in text and "| 10 s |" in text
    assert "| random | 1 | not reached (0/1) | 3 |" in text and "| tpe_warm | 1 | 3 | 3 |" in text
    assert "warm / cold (medians): 0.50 (target: at most 0.5); the source setting's studies spent 4" in text
    assert "warm start" not in bench.report(studies[:2], budget)


def test_each_searcher_runs_one_variant_per_seed_with_its_own_tune_settings():
    budget = Budget(trials=16, rounds=10, seeds=3)
    space = bench.searcher_space("random", budget)
    assert list(space["variants"]) == ["random-1", "random-2", "random-3"]
    assert space["tune"] == {"num_samples": 16, "max_concurrent": 1, "metric": "val_acc", "seed": 0,
                             "sampler": "random", "scheduler": {"asha": None}}  # fmt: skip
    assert space["base"]["resources"]["actors"] == 0 and space["base"]["rounds"] == 10
    assert space["base"]["partition"]["val_fraction"] == 0.1
    grid = bench.searcher_space("grid", budget)["variants"]["grid-1"]["search"]
    # 4 x 4, each value at the centre of a quarter of the range in log space
    assert grid["server_lr"]["grid"] == pytest.approx([0.3 * 10 ** ((i + 0.5) / 4) for i in range(4)])
    assert grid["server_momentum"]["grid"] == pytest.approx([0.95 * (i + 0.5) / 4 for i in range(4)])
    assert bench.grid_points(10, 2) == 3 and bench.grid_points(3, 2) == 2
    assert bench.searcher_space("hyperband", budget)["tune"]["scheduler"] == {"asha": None, "hyperband": {}}
    assert bench.searcher_space("pbt", budget)["tune"]["sampler"] == "random"  # PBT's first population: random
    assert bench.searcher_space("pb2", budget)["tune"]["scheduler"]["pbt"] == {"explore": "bandit"}
    assert bench.space_problem("pb2", budget) is None  # the benchmark's ranges are numeric: PB2 takes them
    warm = bench.tune_command("tpe_warm", bench.Path("s.yaml"), "sqlite:///m.db", bench.Path("w"), budget)
    assert warm[-2:] == ["--per-setting", "partition.alpha=0.5,0.1"]
    assert "--per-setting" not in bench.tune_command("gp", bench.Path("s.yaml"), "u", bench.Path("w"), budget)


def test_flags_are_checked_and_the_bad_one_is_named_first(capsys):
    args = bench.parse_args(["--quick"])
    assert (args.searchers, args.seeds, args.trials, args.rounds) == (["tpe_asha", "random"], 1, 3, 3)
    args = bench.parse_args(["--searchers", "tpe, gp", "--seeds", "2"])
    assert (args.searchers, args.seeds, args.trials, args.rounds) == (["tpe", "gp"], 2, 16, 10)
    assert bench.parse_args([]).searchers == list(bench.SEARCHERS)
    for argv, said in [
        (["--searchers", "tpe,bogus"], "error: --searchers: unknown bogus; known: tpe_asha, tpe, random, grid"),
        (["--seeds", "0"], "error: argument --seeds: at least 1, got 0"),
        (["--trials", "x"], "error: argument --trials: a whole number, got 'x'"),
        (["--reuse"], "error: --reuse: reports the studies of a --workdir's mlflow.db; give a --workdir that"),
    ]:
        with pytest.raises(SystemExit) as stopped:
            bench.parse_args(argv)
        assert stopped.value.code == 2
        assert capsys.readouterr().err.splitlines()[0].startswith(said)


def test_a_searcher_this_trees_config_refuses_is_said_before_anything_runs(monkeypatch, capsys):
    assert bench.space_problem("tpe_asha", Budget(4, 2, 1)) is None
    monkeypatch.setitem(bench.SEARCHERS, "bogus", bench.Searcher({"sampler": "bogus"}))
    assert str(bench.space_problem("bogus", Budget(4, 2, 1))).startswith("tune.sampler: ")
    assert bench.main(["--searchers", "tpe,bogus"]) == 2
    said = capsys.readouterr()
    assert said.err.startswith("error: --searchers: refused by this tree's config: bogus: tune.sampler: ")
    assert said.out == ""  # nothing ran, not even the header


def test_the_pure_part_imports_neither_ray_nor_mlflow():
    code = "import sys, benchmarks.search_efficiency; print(sorted({'ray', 'mlflow', 'torch'} & set(sys.modules)))"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "[]\n"


def test_a_grid_axis_lies_at_the_centres_of_equal_cells_inside_the_range():
    low, high = bench.centred_axis({"loguniform": [0.01, 1.0]}, 2)
    assert math.isclose(low, 10**-1.5) and math.isclose(high, 10**-0.5)
    assert bench.centred_axis({"uniform": [0.0, 1.0]}, 4) == [0.125, 0.375, 0.625, 0.875]


def test_the_wide_space_adds_the_clients_lr_and_every_searcher_takes_it():
    budget = Budget(16, 10, 2, space="wide")
    for name in bench.SEARCHERS:
        assert bench.space_problem(name, budget) is None, name
    search = bench.searcher_space("grid", budget)["variants"]["grid-1"]["search"]
    assert list(search) == ["optimizer.lr", "server_lr", "server_momentum"]
    assert [len(axis["grid"]) for axis in search.values()] == [2, 2, 2]  # 2 ** 3 = 8 of the 16 trials
    assert bench.parse_args(["--space", "wide"]).space == "wide" and bench.parse_args([]).space == "small"
