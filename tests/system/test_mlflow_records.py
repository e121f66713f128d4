"""Ablation cells log their final models only behind --log-models; each model loads back with plain MLflow and scores
the logged test accuracy. (The study's records: tests/tracking/test_mlflow_records.py.)"""

from __future__ import annotations

import mlflow.pytorch
from mlflow.tracking._tracking_service.utils import _use_tracking_uri

from raytune_fl.engine.data import prepare_data
from raytune_fl.tracking.schema import (
    TAG_DESCRIPTION,
    TAG_MODEL_ID,
    TAG_PARENT_RUN,
    TAG_STAGE,
)
from tests.support.models import accuracy


# two ablations: about 30 s
def test_ablation_cells_log_their_final_models_behind_a_switch(records_study, tmp_path):
    from raytune_fl.cli.ablate import main as ablate

    client, uri, experiment, _, base, space_file, _ = records_study
    argv = ["--space", str(space_file), "--storage", str(tmp_path / "ray"), "--mlflow-uri", uri]
    argv += ["--seeds", "1", "--no-dashboard", "--out", str(tmp_path / "out")]
    assert ablate([*argv, "--variants", "fedavg", "--log-models"]) == 0
    cells = client.search_runs([experiment], filter_string=f"tags.{TAG_STAGE} = 'ablation'")
    (parent,) = [r for r in cells if TAG_PARENT_RUN not in r.data.tags]
    (cell,) = [r for r in cells if TAG_PARENT_RUN in r.data.tags]
    assert parent.data.tags[TAG_DESCRIPTION].startswith("**Ablation** of study `records`: variants `fedavg`")
    assert cell.data.tags[TAG_DESCRIPTION].startswith("Ablation cell: variant `fedavg` (method `fedavg`), seed 1")
    for run in (parent, cell):
        assert run.inputs.dataset_inputs[0].dataset.name == "digits/dirichlet-0.5/3-clients"
    data = prepare_data(base)
    with _use_tracking_uri(uri):
        model = mlflow.pytorch.load_model(f"models:/{cell.data.tags[TAG_MODEL_ID]}")
    final = client.get_metric_history(cell.info.run_id, "test_acc")[-1]
    assert final.step == base.rounds
    assert accuracy(model, data.dataset.x_test, data.dataset.y_test) == final.value
    # without the switch, no model
    assert ablate([*argv, "--variants", "fedavg", "--set", "base.rounds=2"]) == 0
    again = client.search_runs([experiment], filter_string="attributes.run_name = 'fedavg/seed1/default'")
    newest = max(again, key=lambda r: r.info.start_time)
    assert TAG_MODEL_ID not in newest.data.tags and not newest.outputs.model_outputs
