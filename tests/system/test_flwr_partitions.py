"""Flower Datasets' partitioners end to end: one ablation through scripts/ablate.py's main over three of them at
once (a --grid over base.partition.partitioner), each cell's MLflow run recording the split it trained on."""

from __future__ import annotations

import yaml
from mlflow.tracking import MlflowClient

from raytune_fl.cli import ablate
from tests.support import tiny_space

PARTITIONERS = ("IidPartitioner", "LinearPartitioner", "SquarePartitioner")  # no options of their own: one grid


def test_an_ablation_over_three_flwr_partitioners_records_each_split(ray_cluster, tmp_path, capsys):
    partition = {"kind": "flwr", "partitioner": "IidPartitioner", "clients": 3, "min_size": 20, "seed": 0}
    data = tiny_space("flwr", partition=partition, rounds=2, resources={"actors": 0, "cpus_per_actor": 1})
    data["variants"] = {"fedavg": {"method": "fedavg"}}
    space, uri = tmp_path / "flwr.yaml", f"sqlite:///{tmp_path / 'm.db'}"
    space.write_text(yaml.safe_dump(data))
    args = ["--space", str(space), "--mlflow-uri", uri, "--seeds", "1", "--no-dashboard"]
    grid = ["--grid", f"base.partition.partitioner={','.join(PARTITIONERS)}"]
    assert ablate.main([*args, "--out", str(tmp_path / "report"), *grid]) == 0, capsys.readouterr().err
    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name("flwr").experiment_id], "tags.stage = 'ablation'")
    cells = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert sorted(r.data.params["partition.partitioner"] for r in cells) == sorted(PARTITIONERS)
    assert {r.data.params["partition.kind"] for r in cells} == {"flwr"}
    assert all(r.info.status == "FINISHED" for r in cells)
    # the ablation's data inputs name each split, and the three splits differ (their digests)
    found = {i.dataset.name: i.dataset.digest for r in runs for i in r.inputs.dataset_inputs}
    assert set(found) == {f"digits/flwr-{p}/3-clients" for p in PARTITIONERS}
    assert len(set(found.values())) == 3
