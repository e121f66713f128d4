"""End to end on real Ray Tune, Optuna and MLflow: scripts/tune.py's path, then the store's contents."""

from __future__ import annotations

import io
import math
from contextlib import redirect_stdout

import pandas as pd
import pytest
import yaml
from mlflow.tracking import MlflowClient

from raytune_fl.cli import main
from raytune_fl.config import SearchSpace
from raytune_fl.engine.data import prepare_data
from tests.support import tiny_space


@pytest.fixture(scope="module")
def study(ray_cluster, tmp_path_factory):
    root = tmp_path_factory.mktemp("study")
    space = root / "tiny.yaml"
    space.write_text(yaml.safe_dump(tiny_space("tiny-study")))
    uri = f"sqlite:///{root / 'mlflow.db'}"
    printed = io.StringIO()  # what the command prints (capsys does not reach a module fixture)
    with redirect_stdout(printed):
        code = main(["--space", str(space), "--mlflow-uri", uri, "--storage", str(root / "ray"), "--seed", "0"])
    return code, MlflowClient(uri), root, printed.getvalue()


def _val_samples() -> int:
    """The validation images of the tiny space: every client's held-out part (the partition is seeded)."""
    return len(prepare_data(SearchSpace.model_validate(tiny_space("tiny-study")).base).val_indices)


def _runs(client: MlflowClient, filter_string: str = ""):
    experiment = client.get_experiment_by_name("tiny-study")
    return client.search_runs([experiment.experiment_id], filter_string, max_results=100)


def test_study_exits_cleanly_and_prints_the_summary(study):
    code, client, root, printed = study
    assert code == 0
    assert (root / "ray").is_dir() and any((root / "ray").iterdir())  # Tune results under --storage
    summary = printed.split("=== best configuration per variant", 1)[1].split("\ntotal wall time", 1)[0]
    n = _val_samples()
    assert f"val_acc: one trial, one seed per variant, on {n} validation images" in summary
    for parent in _runs(client, "tags.stage = 'tune'"):
        if "mlflow.parentRunId" not in parent.data.tags:
            p, variant = parent.data.metrics["best_val_acc"], parent.data.tags["variant"]
            assert f"{variant:>16}: val_acc {100 * p:.1f} % ± {100 * math.sqrt(p * (1 - p) / n):.1f}" in summary
    assert "standard errors" in summary.splitlines()[-1]  # two variants: flagged, or the best stands out


def test_a_parent_run_per_variant_and_a_child_per_trial(study):
    client = study[1]
    parents = {
        r.data.tags["variant"]: r
        for r in _runs(client, "tags.stage = 'tune'")
        if "mlflow.parentRunId" not in r.data.tags
    }
    assert set(parents) == {"full", "fedavg"}
    assert parents["full"].data.tags["method"] == "univarfl"
    assert parents["full"].data.tags["dataset"] == "digits"
    assert all(p.info.status == "FINISHED" for p in parents.values())
    children = {v: _runs(client, f"tags.mlflow.parentRunId = '{p.info.run_id}'") for v, p in parents.items()}
    assert len(children["full"]) == 3  # num_samples
    assert len(children["fedavg"]) == 1  # nothing to search: one run
    for run in children["full"]:
        assert {"mu", "lambda", "method", "partition.alpha", "rounds"} <= set(run.data.params)
        assert 0.01 <= float(run.data.params["mu"]) <= 1.0
        assert run.data.tags["trial_status"] in {"finished", "stopped_early"}
        assert run.info.status == "FINISHED"


def test_metrics_per_round_with_step_equal_to_round(study):
    client = study[1]
    runs = [r for r in _runs(client) if r.data.tags.get("variant") == "full" and "mlflow.parentRunId" in r.data.tags]
    finished = [r for r in runs if r.data.tags["trial_status"] == "finished"]
    assert finished, "ASHA (grace 1) keeps at least the best trial to the end"
    run = finished[0]
    for key in ("val_acc", "test_acc", "train_loss", "train_ce", "term_variance", "term_energy", "round_time_s"):
        history = client.get_metric_history(run.info.run_id, key)
        assert [m.step for m in history] == [1, 2, 3], key
    fedavg = [
        r for r in _runs(client) if r.data.tags.get("variant") == "fedavg" and "mlflow.parentRunId" in r.data.tags
    ]
    assert not any(k.startswith("term_") for k in fedavg[0].data.metrics)  # FedAvg has no regularizer
    local = client.download_artifacts(run.info.run_id, "round_metrics.parquet")
    table = pd.read_parquet(local)
    assert list(table["round"]) == [1, 2, 3]
    val = client.get_metric_history(run.info.run_id, "val_acc")
    assert list(table["val_acc"]) == [m.value for m in val]
    # the classifier's full spectrum per round is an artifact; its summary is a metric
    spectrum = pd.read_parquet(client.download_artifacts(run.info.run_id, "classifier_spectrum.parquet"))
    assert list(spectrum.columns) == ["round", "index", "singular_value"]
    assert len(spectrum) == 3 * 10  # 3 rounds x D = 10 singular values
    for step, group in spectrum.groupby("round"):
        values = list(group.sort_values("index")["singular_value"])
        assert values == sorted(values, reverse=True)
        assert values[0] == pytest.approx(table.set_index("round").loc[step, "sv_max"])
    for key in ("client_acc_mean", "client_acc_worst", "client_acc_std", "sv_effective_rank"):
        assert [m.step for m in client.get_metric_history(run.info.run_id, key)] == [1, 2, 3], key
    assert "classifier_spectrum" not in run.data.metrics


def test_parent_records_the_validation_selected_best(study):
    client = study[1]
    parent = next(r for r in _runs(client, "tags.variant = 'full'") if "mlflow.parentRunId" not in r.data.tags)
    children = [r for r in _runs(client, f"tags.mlflow.parentRunId = '{parent.info.run_id}'")]
    finished = [r for r in children if r.data.tags["trial_status"] == "finished"]
    best = max(finished, key=lambda r: r.data.metrics["val_acc"])
    assert parent.data.metrics["best_val_acc"] == pytest.approx(best.data.metrics["val_acc"])
    assert parent.data.metrics["best_test_acc"] == pytest.approx(best.data.metrics["test_acc"])
    assert float(parent.data.tags["best.mu"]) == pytest.approx(float(best.data.params["mu"]))
    # its uncertainty beside it: the validation set's size and the binomial standard error over it
    n, p = _val_samples(), best.data.metrics["val_acc"]
    assert parent.data.metrics["val_samples"] == n
    assert parent.data.metrics["best_val_acc_se"] == pytest.approx(math.sqrt(p * (1 - p) / n))
    assert parent.data.tags["best_basis"] == "single trial, seed 0"
    # a selected value within 5 % of a bound of its range is tagged edge.<name> (tiny_space: mu log-uniform on
    # [0.01, 1], 5 % = 0.1 decades; lambda uniform on [0.5, 3], 5 % = 0.125)
    mu, lam = float(parent.data.tags["best.mu"]), float(parent.data.tags["best.lambda"])
    expected = {}
    if math.log10(mu / 0.01) <= 0.1 or math.log10(1.0 / mu) <= 0.1:
        expected["edge.mu"] = "lower" if math.log10(mu / 0.01) <= 0.1 else "upper"
    if lam - 0.5 <= 0.125 or 3.0 - lam <= 0.125:
        expected["edge.lambda"] = "lower" if lam - 0.5 <= 0.125 else "upper"
    assert {k: v for k, v in parent.data.tags.items() if k.startswith("edge.")} == expected
    assert ("edges" in parent.data.tags) == bool(expected)
    assert study[3].count(" edge: ") == len(expected)  # and the summary says so, a line per edge
