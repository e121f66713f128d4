"""The official-protocol presets run through scripts/ablate.py end to end, shrunken to 2 rounds and one seed."""

from __future__ import annotations

import pytest
from mlflow.tracking import MlflowClient

from raytune_fl.cli.ablate import main as ablate
from raytune_fl.config import load_space
from tests.support import REPO

PRESETS = REPO / "search_spaces" / "protocols"

# what each preset must log on every run: the protocol knobs as params
EXPECTED = {
    "feduv_official": {"optimizer.schedule.kind": "cosine", "drop_last": "true", "optimizer.momentum": "0.9"},
    "fedld_official": {"batchnorm.local_training": "running", "drop_last": "false", "optimizer.momentum": "0.5"},
}


@pytest.mark.parametrize("name", list(EXPECTED))
def test_a_protocol_preset_ablates_end_to_end(name, ray_cluster, tmp_path, capsys):
    path = PRESETS / f"{name}.yaml"
    space = load_space(path)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    args = ["--space", str(path), "--mlflow-uri", uri, "--storage", str(tmp_path / "ray"), "--ignore-studies"]
    args += ["--seeds", "1", "--rounds", "2", "--set", "base.resources.actors=0"]
    assert ablate(args) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert all(variant in out for variant in space.variants)  # the table has a row per variant
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name(space.name).experiment_id
    cells = client.search_runs([experiment], "tags.stage = 'ablation' and tags.role = 'trial'")
    assert sorted(r.data.tags["variant"] for r in cells) == sorted(space.variants)
    for run in cells:
        assert run.info.status == "FINISHED"
        assert {k: run.data.params[k] for k in EXPECTED[name]} == EXPECTED[name], run.data.tags["variant"]
        assert 0.0 <= run.data.metrics["test_acc"] <= 1.0
        assert "val_acc" not in run.data.metrics  # no validation split: NaN, which MLflow is not given
