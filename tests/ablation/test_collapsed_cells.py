"""A variant that learns nothing, through the real `tune.py` and `ablate.py` on Ray and MLflow: its trial and its
ablation run are tagged collapsed, both parents count it, the tune summary and the console say so, and the table's
cell marks it instead of averaging it in. Kept small (one variant, one round, one trial, one seed): the shared
ablation store (tests/support/fixtures.py) is the full-size real run, and its runs all finish."""

from __future__ import annotations

import pandas as pd
import yaml
from mlflow.tracking import MlflowClient

from raytune_fl.ablation.run import AblationOutcome
from raytune_fl.cli import main as tune
from raytune_fl.cli.ablate import main as ablate
from raytune_fl.metrics import COLLAPSED, TEST_ACC, TEST_CHANCE, VAL_ACC, VAL_CHANCE
from tests.support import tiny_space


def test_a_collapsed_run_finished_so_it_is_not_one_to_run_again():
    statuses = ["finished", "collapsed", "stopped_early", "diverged", "error", "interrupted"]
    assert AblationOutcome("parent", pd.DataFrame({"status": statuses}), pd.DataFrame()).unfinished == 4


def test_a_variant_that_learns_nothing_is_collapsed_in_mlflow_the_summary_and_the_table(ray_cluster, tmp_path, capsys):
    space = tiny_space("collapse", rounds=1, resources={"actors": 0})
    # lr must be > 0: 1e-9 leaves the model at its initialisation, which predicts about one class
    space["variants"] = {"frozen": {"method": "fedavg", "optimizer": {"lr": 1e-9}}}
    path = tmp_path / "collapse.yaml"
    path.write_text(yaml.safe_dump(space, sort_keys=False))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    common = ["--space", str(path), "--mlflow-uri", uri, "--storage", str(tmp_path / "ray_results")]
    assert tune([*common, "--no-models"]) == 0
    printed = capsys.readouterr().out
    assert "[frozen] done: 1/1 trials ended (0 finished, 1 collapsed) | " in printed
    assert "trials {'finished': 0, 'collapsed': 1, 'stopped_early': 0, 'diverged': 0, 'error': 0}" in printed

    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("collapse").experiment_id
    (parent,) = client.search_runs([experiment], "tags.stage = 'tune' and tags.mlflow.parentRunId IS NULL")
    (trial,) = client.search_runs([experiment], f"tags.mlflow.parentRunId = '{parent.info.run_id}'")
    assert trial.data.tags["trial_status"] == "collapsed" and trial.info.status == "FINISHED"
    metrics = trial.data.metrics
    assert metrics[COLLAPSED] == 1.0
    assert metrics[VAL_ACC] <= metrics[VAL_CHANCE] or metrics[TEST_ACC] <= metrics[TEST_CHANCE]
    assert parent.data.metrics["trials_collapsed"] == 1.0 and parent.data.metrics["trials_finished"] == 0.0

    out = tmp_path / "reports"
    assert ablate([*common, "--seeds", "1", "--out", str(out), "--no-dashboard"]) == 0  # it finished: exit 0
    printed = capsys.readouterr().out
    assert "[ablation] done: 1/1 cells ended (0 finished, 1 collapsed) | " in printed
    assert "did not finish" not in printed
    (ablation,) = client.search_runs([experiment], "tags.stage = 'ablation' and tags.role = 'parent'")
    (cell,) = client.search_runs([experiment], f"tags.mlflow.parentRunId = '{ablation.info.run_id}'")
    assert cell.data.tags["trial_status"] == "collapsed"
    assert ablation.data.metrics["runs_collapsed"] == 1.0
    results = pd.read_parquet(out / "ablation_results.parquet")
    assert results["status"].tolist() == ["collapsed"]
    markdown = (out / "ablation_table.md").read_text()
    assert "| frozen | – (0/1, 1 collapsed) |" in markdown and "left out of the mean and the statistics" in markdown
    summary = pd.read_csv(out / "ablation_summary.csv")
    assert summary[["n", "runs", "collapsed"]].values.tolist() == [[0, 1, 1]]
