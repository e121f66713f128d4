"""Feature shift end to end: the embedded rotated-MNIST search space through scripts/tune.py's path."""

from __future__ import annotations

import pandas as pd
from mlflow.tracking import MlflowClient

from raytune_fl.cli import main
from tests.support import REPO

SPACE = REPO / "search_spaces" / "rotated.yaml"


# a whole study through tune.py: ~30 s, the default tier's longest
def test_rotated_space_runs_through_tune_and_logs_the_partition(ray_cluster, tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    args = ["--space", str(SPACE), "--rounds", "2", "--num-samples", "1", "--variants", "univarfl,fedavg"]
    assert main([*args, "--mlflow-uri", uri, "--storage", str(tmp_path / "ray")]) == 0
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("rotated")
    parents = client.search_runs([experiment.experiment_id], "tags.stage = 'tune'")
    parent = next(
        r for r in parents if r.data.tags.get("variant") == "univarfl" and "mlflow.parentRunId" not in r.data.tags
    )
    assert {a.path for a in client.list_artifacts(parent.info.run_id, "partition")} == {
        "partition/partition.parquet",
        "partition/partition.png",
    }
    table = pd.read_parquet(client.download_artifacts(parent.info.run_id, "partition/partition.parquet"))
    assert list(table["domain"]) == ["rot0", "rot15", "rot30", "rot45", "rot60", "rot75"]
    assert table["num_samples"].sum() == 4000
    counts = table.drop(columns=["client", "num_samples", "domain"])
    assert list(counts.columns) == [str(digit) for digit in range(10)]
    assert (counts.sum(axis=1) == table["num_samples"]).all()
