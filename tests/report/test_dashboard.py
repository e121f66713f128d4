"""The HTML dashboard end to end: real tune (and ablation) runs in a real MLflow store, opened by real chromium.

One module-scoped store: a tiny tune study, a dashboard built from it alone (no ablation yet: the fallbacks),
then an ablation on top and a second dashboard (the ablation sections).
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from mlflow.tracking import MlflowClient
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from plotly.offline import get_plotlyjs

from raytune_fl.ablation.table import to_html
from raytune_fl.cli.dashboard import main
from raytune_fl.report.dashboard import DashboardReport
from raytune_fl.report.figures import band, best_so_far, elapsed_seconds
from raytune_fl.report.sections import SECTIONS
from raytune_fl.tune.space import parse_param
from tests.support import band_curves, tiny_space


def _parents(client: MlflowClient, stage: str, name: str) -> list:
    experiment = client.get_experiment_by_name(name).experiment_id
    runs = client.search_runs([experiment], f"tags.stage = '{stage}'", order_by=["attributes.start_time DESC"])
    return [r for r in runs if "mlflow.parentRunId" not in r.data.tags]


def _check_file(report: DashboardReport, expected_runs: set[str], uri: str, tmp_path: Path) -> str:
    text = report.path.read_text(encoding="utf-8")
    assert text.count(get_plotlyjs()) == 1  # plotly.js inlined once, in <head>
    assert text.index(get_plotlyjs()) < text.index("</head>")
    assert text.index("window.onerror") < text.index(get_plotlyjs())  # errors are caught from the start
    assert not re.search(r"<script[^>]*\ssrc=", text)  # nothing to fetch: opens offline from disk
    assert not re.search(r"<link[^>]*\shref=['\"]?https?:", text)
    for section_id, heading in SECTIONS.items():
        assert f"<section id='{section_id}'>" in text and heading in text
    assert set(report.rendered) | set(report.skipped) == set(SECTIONS)
    assert set(report.logged_to) == expected_runs
    client = MlflowClient(uri)
    for run_id in expected_runs:  # the run's copy is the file itself
        local = client.download_artifacts(run_id, "dashboard/dashboard.html", str(tmp_path / run_id))
        assert Path(local).read_bytes() == report.path.read_bytes()
    return text


def test_tune_only_dashboard_is_self_contained_and_logged_to_each_study(dashboard_store, tmp_path):
    tune_parents = {r.info.run_id for r in _parents(MlflowClient(dashboard_store.uri), "tune", dashboard_store.name)}
    assert len(tune_parents) == 1  # full (fedavg is ablated untuned)
    report = dashboard_store.tune_only
    text = _check_file(report, tune_parents, dashboard_store.uri, tmp_path / "download")
    # without an ablation: its table says how to get one; the curves fall back to the tune trials, and say so
    assert report.skipped == {"ablation-table": "no ablation runs yet: run scripts/ablate.py"}
    assert "no ablation runs yet: run scripts/ablate.py. Shown instead: each variant" in text
    assert report.figures == 8  # 2 curves, history + importances of full, round time, spectrum, clients, partition
    assert any(line.startswith("wrote: ") for line in dashboard_store.printed)
    assert any(line.startswith("logged: runs:/") for line in dashboard_store.printed)


def test_ablation_dashboard_shows_the_table_and_a_heat_map_per_setting(dashboard_store, tmp_path):
    ablation = _parents(MlflowClient(dashboard_store.uri), "ablation", dashboard_store.name)[0]
    report = dashboard_store.latest
    text = _check_file(report, {ablation.info.run_id}, dashboard_store.uri, tmp_path / "download")
    assert report.skipped == {}
    assert "<table class='ablation'>" in text
    for setting in ("alpha=0.5", "alpha=1.0"):
        assert f"<th>{setting}</th>" in text  # a column per setting
        assert f"Ablation setting {setting}: samples per class" in text  # its partition heat map
    assert text.count("<tr><th scope='row'>") == 2  # a row per variant ablated
    assert re.search(r"<td><strong>\d+\.\d\d ± \d+\.\d\d</strong></td>", text)  # 2 seeds: mean ± std, in %
    assert "Source: ablation run " + ablation.info.run_id in text


def test_cli_errors_exit_2_and_name_the_problem(dashboard_store, tmp_path, capsys):
    assert main(["--space", str(tmp_path / "missing.yaml")]) == 2
    assert capsys.readouterr().err.startswith("error: --space: no such file")
    other = tmp_path / "other.yaml"
    other.write_text(yaml.safe_dump(tiny_space("never-run")))
    assert main(["--space", str(other), "--mlflow-uri", dashboard_store.uri, "--out", str(tmp_path / "d.html")]) == 2
    err = capsys.readouterr().err
    assert "'never-run'" in err and dashboard_store.uri in err
    assert not (tmp_path / "d.html").exists()
    absent = f"sqlite:///{tmp_path / 'absent.db'}"
    assert main(["--space", str(other), "--mlflow-uri", absent]) == 2
    assert "no MLflow store at" in capsys.readouterr().err and not (tmp_path / "absent.db").exists()


# ---------------------------------------------------------------- pure helpers, hand-computed


def test_elapsed_seconds_adds_setup_and_the_timed_decomposition():
    rounds = pd.DataFrame(
        {
            "round": [2, 1, 3],  # unsorted on purpose
            "round_time_s": [2.0, 1.0, 4.0],
            "setup_s": [np.nan, 10.0, np.nan],
            "decomposition_s": [np.nan, np.nan, 0.5],
        }
    )
    elapsed = elapsed_seconds(rounds)
    assert list(elapsed.index) == [1, 2, 3]
    assert list(elapsed) == [11.0, 13.0, 17.5]  # 10 + 1; + 2; + 4 + 0.5
    assert list(elapsed_seconds(pd.DataFrame({"round": [1, 2], "round_time_s": [1.5, 2.5]}))) == [1.5, 4.0]


def test_band_is_mean_and_min_max_over_the_runs_that_reached_each_round():
    curves = band_curves()  # c stopped after round 1
    by_round = band(curves, "test_acc")
    assert list(by_round["x"]) == [1.0, 2.0]
    assert np.allclose(by_round["mean"], [0.3, 0.6])
    assert list(by_round["lo"]) == [0.2, 0.5] and list(by_round["hi"]) == [0.4, 0.7]
    assert list(by_round["n"]) == [3, 2]
    by_time = band(curves, "test_acc", x="elapsed_s")
    assert np.allclose(by_time["x"], [20.0, 17.5])  # the runs' mean elapsed time at each round


def test_best_so_far_follows_the_direction_and_skips_missing_values():
    assert best_so_far([0.3, 0.2, np.nan, 0.5, 0.4]) == [0.3, 0.3, 0.3, 0.5, 0.5]
    assert best_so_far([2.0, 3.0, 1.0], maximize=False) == [2.0, 2.0, 1.0]
    assert np.isnan(best_so_far([np.nan, 1.0])[0])


def test_params_read_back_as_their_distribution_holds_them():
    assert parse_param("0.0123", FloatDistribution(0.01, 1.0, log=True)) == 0.0123
    assert parse_param("3", IntDistribution(1, 5)) == 3
    choices = CategoricalDistribution(["median", 0.5, 2, True])
    assert parse_param("median", choices) == "median"  # strings are logged raw, the rest as JSON
    assert parse_param("0.5", choices) == 0.5
    assert parse_param("true", choices) is True
    with pytest.raises(ValueError, match="none of the choices"):
        parse_param("mean", choices)


def test_ablation_table_is_variants_by_settings_in_percent_with_the_best_of_each_column_bold():
    summary = pd.DataFrame(
        {
            "variant": ["full", "full", "fedavg", "fedavg"],
            "setting": ["alpha=0.1", "alpha=1.0", "alpha=0.1", "alpha=1.0"],
            "mean": [0.7014, 0.5833, 0.6208, np.nan],
            "std": [0.0137, np.nan, 0.0609, np.nan],
            "n": [2, 1, 2, 0],
            "runs": [2, 2, 2, 2],
            "best": [True, True, False, False],
        }
    )
    table = to_html(summary)
    assert table.startswith("<table class='ablation'><thead><tr><th>variant</th><th>alpha=0.1</th><th>alpha=1.0</th>")
    assert (
        "<tr><th scope='row'>full</th><td><strong>70.14 ± 1.37</strong></td><td><strong>58.33 (1/2)</strong>" in table
    )
    assert "<tr><th scope='row'>fedavg</th><td>62.08 ± 6.09</td><td>– (0/2)</td></tr>" in table


def test_the_dashboard_shows_one_run_per_ablation_cell(dashboard_store, tmp_path):
    # test_ablation's resume test re-runs one cell under the same parent: the dashboard, like the table, keeps
    # one run per cell (a finished one)
    from raytune_fl.report.runs import open_store

    store = open_store(dashboard_store.uri, dashboard_store.space, tmp_path)
    cells = [r.data.tags["cell"] for r in store.ablation_trials]
    assert len(cells) == len(set(cells)) == 8
    assert {r.data.tags["trial_status"] for r in store.ablation_trials} == {"finished"}


def test_runs_without_per_client_files_fall_back_to_mean_worst_and_a_std_band():
    from raytune_fl.report.figures import client_curve_figure

    rounds = pd.DataFrame(
        {
            "variant": ["a", "a"],
            "round": [2, 1],  # unsorted on purpose
            "client_acc_mean": [0.6, 0.5],
            "client_acc_worst": [0.3, 0.2],
            "client_acc_std": [0.1, 0.05],
        }
    )
    band_trace, mean, worst = client_curve_figure(rounds, {"a": "#1f77b4"}, "t").data
    assert list(band_trace.x) == [1, 2, 2, 1]
    assert np.allclose(band_trace.y, [0.55, 0.7, 0.5, 0.45])  # mean + std out, mean - std back
    assert list(mean.y) == [0.5, 0.6] and list(worst.y) == [0.2, 0.3]
