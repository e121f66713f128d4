"""A text task end to end: LEAF Shakespeare's JSON (a repeated line, so the next character is easy) through the
real tune.py, char_lstm with FedAvg and UniVarFL on one client per speaker; both learn above chance, as the engine
judges it (beyond the most frequent next character by two standard errors)."""

from __future__ import annotations

import yaml
from mlflow.tracking import MlflowClient

from raytune_fl.cli import main
from tests.support.data_files import next_characters, write_leaf

LINE = "to be or not to be, that is the question. "


def test_a_shakespeare_study_trains_fedavg_and_univarfl_above_chance(ray_cluster, tmp_path):
    root = tmp_path / "shakespeare"
    for split, repeats in (("train", 20), ("test", 4)):
        x, y = next_characters(LINE * repeats, 10)
        write_leaf(root / "data" / split, {f"S{i}": (x[i::3], y[i::3]) for i in range(3)})
    space = {
        "name": "shakespeare",
        "base": {
            "dataset": "leaf",
            "dataset_options": {"path": str(root)},
            "model": "char_lstm",
            "partition": {
                "kind": "flwr",
                "partitioner": "NaturalIdPartitioner",
                "options": {"partition_by": "writer_id"},
            },
            "rounds": 3,
            "local_epochs": 4,
            "batch_size": 16,
            "optimizer": {"lr": 1.0},
            "resources": {"actors": 0},
        },
        "variants": {"fedavg": {"method": "fedavg"}, "univarfl": {"method": "univarfl"}},
        "tune": {"num_samples": 1, "max_concurrent": 1, "seed": 0},
    }
    path, uri = tmp_path / "shakespeare.yaml", f"sqlite:///{tmp_path / 'm.db'}"
    path.write_text(yaml.safe_dump(space))
    # --no-models: exporting the LSTM (torch.export, a helper process) is minutes on 2 cores; not what this tests
    assert main(["--space", str(path), "--storage", str(tmp_path / "ray"), "--mlflow-uri", uri, "--no-models"]) == 0
    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name("shakespeare").experiment_id])
    parents = {r.data.tags["variant"]: r for r in runs if "mlflow.parentRunId" not in r.data.tags}
    assert set(parents) == {"fedavg", "univarfl"}
    for variant, parent in parents.items():
        assert parent.info.status == "FINISHED", variant
        assert parent.data.metrics["best_val_acc"] > 1 / 80, (variant, parent.data.metrics["best_val_acc"])
    # above chance as the engine judges it: beyond the most frequent next character's share by two standard errors
    # (a trial at or under it would be tagged collapsed)
    trials = {r.data.tags["variant"]: r.data.tags["trial_status"] for r in runs if "mlflow.parentRunId" in r.data.tags}
    assert trials == {"fedavg": "finished", "univarfl": "finished"}, trials
