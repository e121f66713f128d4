"""benchmarks/search.py: the grid's axes and the summary by hand; the landscape section on grid runs logged by
benchmarks/grid.py, and a run's metric summed (the search's cost); a tiny end-to-end run through tune.py (slow)."""

from __future__ import annotations

import pytest

from benchmarks import search
from benchmarks.search import axis, format_summary, main, strategy_space, summarise


def test_axes_are_log_spaced_for_loguniform_and_even_for_uniform():
    assert axis({"loguniform": [0.01, 1.0]}, 3) == pytest.approx([0.01, 0.1, 1.0])
    assert axis({"uniform": [0.0, 1.0]}, 5) == pytest.approx([0.0, 0.25, 0.5, 0.75, 1.0])
    with pytest.raises(ValueError, match="uniform or loguniform"):
        axis({"choice": [1, 2]}, 2)


def _row(mu: float, lam: float, seed: int, val: float, test: float) -> dict:
    return {"params": {"mu": mu, "lambda": lam}, "seed": seed, "val_acc": val, "test_acc": test,
            "client_epochs": 100.0, "wall_s": 10.0}  # fmt: skip


def test_the_summary_by_hand():
    grid = [
        _row(0.1, 1.0, 0, 0.80, 0.70), _row(0.1, 1.0, 1, 0.90, 0.72),  # mean 0.85, sd 0.05: the best point
        _row(1.0, 1.0, 0, 0.60, 0.50), _row(1.0, 1.0, 1, 0.62, 0.52),  # mean 0.61, sd 0.01
    ]  # fmt: skip
    studies = [
        {"strategy": "tpe_asha", "study": "tpe_asha-1", "best_val_acc": 0.86, "best_test_acc": 0.71,
         "client_epochs": 80.0, "study_s": 8.0, "rescored_val_acc": 0.84, "rescored_test_acc": 0.70},
        {"strategy": "tpe_asha", "study": "tpe_asha-2", "best_val_acc": 0.82, "best_test_acc": 0.69,
         "client_epochs": 120.0, "study_s": 12.0, "rescored_val_acc": 0.80, "rescored_test_acc": 0.68},
    ]  # fmt: skip
    summary = summarise(grid, studies, ["mu", "lambda"])
    g = summary["grid"]
    assert g["best_params"] == {"mu": 0.1, "lambda": 1.0} and g["best_val_acc"] == pytest.approx(0.85)
    assert g["best_test_acc"] == pytest.approx(0.71)
    assert g["seed_sd_at_best"] == pytest.approx(0.05) and g["seed_sd_median"] == pytest.approx(0.03)
    assert g["client_epochs"] == 400 and g["wall_s"] == 40
    s = summary["strategies"]["tpe_asha"]
    assert s["found_val_acc"] == pytest.approx(0.84) and s["found_val_sd"] == pytest.approx(0.02)
    assert s["gap_found_points"] == pytest.approx(1.0)  # 0.85 - 0.84
    assert s["rescored_val_acc"] == pytest.approx(0.82) and s["gap_rescored_points"] == pytest.approx(3.0)
    assert s["worst_gap_rescored_points"] == pytest.approx(5.0)  # 0.85 - 0.80
    assert s["client_epochs_share"] == pytest.approx(100 / 400) and s["wall_share"] == pytest.approx(10 / 40)
    table = format_summary(summary)
    assert "| tpe_asha | 2 | 0.8400 (2.00) | 0.7000 | +1.00 | 0.8200 | +3.00 (+5.00) | 25.0 % | 25.0 % |" in table


def test_each_strategy_is_a_space_of_seeded_variants_with_its_own_tune_settings():
    space = strategy_space("random_asha", {"mu": {"uniform": [0, 1]}}, "univarfl", {"rounds": 2}, 4, 3)
    assert list(space["variants"]) == ["random_asha-1", "random_asha-2", "random_asha-3"]
    assert space["tune"]["sampler"] == "random" and space["tune"]["scheduler"]["asha"] == {}  # the defaults
    assert strategy_space("tpe_asha_g4", {}, "univarfl", {}, 4, 1)["tune"]["scheduler"]["asha"]["grace_period"] == 4
    assert space["tune"]["num_samples"] == 4 and space["name"] == "bench-search"
    assert strategy_space("tpe", {}, "univarfl", {}, 4, 1)["tune"]["scheduler"] == {"asha": None}


def test_unknown_strategies_and_a_used_workdir_are_refused(tmp_path, capsys):
    assert main(["--strategies", "grid_search"]) == 2
    assert "unknown grid_search; known: tpe_asha, tpe, random_asha" in capsys.readouterr().err
    (tmp_path / "mlflow.db").write_text("")
    assert main(["--workdir", str(tmp_path)]) == 2
    assert "already holds an mlflow.db" in capsys.readouterr().err


def test_the_landscape_section_draws_logged_grid_runs(tmp_path):
    from benchmarks.grid import log_grid_run
    from raytune_fl.config import SearchSpace
    from raytune_fl.report.runs import open_store
    from raytune_fl.report.sections import search_landscape_section
    from raytune_fl.tracking.store import open_client

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    space = SearchSpace.model_validate({"name": "landscape", "variants": {"full": {"method": "fedavg"}}})
    for mu, lam, value in [(0.01, 0.1, 0.5), (0.01, 10.0, 0.6), (1.0, 0.1, 0.7), (1.0, 10.0, 0.9)]:
        for seed in (0, 1):
            rounds = [{"round": 1, "val_acc": value - 0.1}, {"round": 2, "val_acc": value + 0.01 * seed}]
            log_grid_run(uri, "landscape", "full", {"mu": mu, "lambda": lam}, seed, rounds)
    section = search_landscape_section(open_store(uri, space, tmp_path / "artifacts"))
    assert section.skipped is None and section.figures == 1
    notes = " ".join(section.parts)
    assert "Grid: 4 points, 2 seed(s) each; its best mean val_acc 0.9050 at lambda=10, mu=1" in notes
    empty = SearchSpace.model_validate({"name": "empty", "variants": {"full": {"method": "fedavg"}}})
    run_id = log_grid_run(uri, "empty", "full", {"mu": 1.0}, 0, [{"round": 1, "val_acc": 0.5, "clients": 3}])
    assert search.metric_sum(open_client(uri), run_id, "clients") == 3.0  # a run's client-rounds, from its history
    assert "a map needs 2" in search_landscape_section(open_store(uri, empty, tmp_path / "a2")).skipped


def test_rung_fidelity_by_hand():
    # final ranks A4 B3 C2 D1; round 1 ranks A1 B4 C3 D2 (rho = -1/5); round 2 ranks A4 B2 C3 D1 (rho = 4/5)
    curves = [[0.1, 0.7, 0.9], [0.4, 0.5, 0.8], [0.3, 0.6, 0.3], [0.2, 0.1, 0.1]]
    rows = search.rung_fidelity(curves)
    assert [r["round"] for r in rows] == [1, 2]
    assert rows[0]["spearman"] == pytest.approx(-0.2) and rows[1]["spearman"] == pytest.approx(0.8)
    # the final top tenth is A alone; Ray's cutoff at a rung is the (1 - 1/rf) quantile, ties go on:
    # round 1 [.1 .4 .3 .2]: rf 2 cuts at .25, rf 3 at .3 (B, C go on); round 2 [.7 .5 .6 .1]: .55 and .6 (A, C)
    assert [(r["top_kept_rf2"], r["top_kept_rf3"]) for r in rows] == [(0.0, 0.0), (1.0, 1.0)]
    table = search.format_fidelity(rows)
    assert "| 2 | 0.80 | 100 % | 100 % |" in table and "final top tenth kept, rf 3" in table
    flat = search.rung_fidelity([[0.5, 0.9], [0.5, 0.1]])  # a rung where all are equal: all go on, no correlation
    assert flat[0]["top_kept_rf2"] == 1.0 and "| 1 | n/a (all equal) | 100 % |" in search.format_fidelity(flat)
