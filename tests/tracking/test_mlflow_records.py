"""What a study leaves in MLflow for its users: the data as dataset inputs on every run, descriptions on the
parents, and the trained global models, loaded back with plain `mlflow.pytorch.load_model` and scored again.

One real tiny study (tune.py) and one real tiny ablation (ablate.py --log-models) into a fresh SQLite store.
"""

from __future__ import annotations

import json
from pathlib import Path

import mlflow.pytorch
import numpy as np
import pytest
import yaml
from mlflow.tracking import MlflowClient
from mlflow.tracking._tracking_service.utils import _use_tracking_uri

from raytune_fl.config import ExperimentConfig, SearchSpace
from raytune_fl.data import load_dataset
from raytune_fl.data.identity import data_identity, partition_label
from raytune_fl.engine.data import data_identity_of, prepare_data
from raytune_fl.tracking.describe import variant_description
from raytune_fl.tracking.schema import (
    DATASET_CONTEXT,
    TAG_DESCRIPTION,
    TAG_MODEL_ID,
    TAG_MODEL_RUN_ID,
    TAG_PARENT_RUN,
)
from raytune_fl.tracking.tracker import dataset_input
from tests.support.models import accuracy


def _parents(runs):
    return {r.data.tags["variant"]: r for r in runs if TAG_PARENT_RUN not in r.data.tags}


# ------------------------------------------------------------------------------------------- dataset inputs


def test_every_run_names_its_data_and_mlflow_filters_on_it(records_study):
    client, _, experiment, runs, base, _, _ = records_study
    expected = data_identity_of(base, prepare_data(base))
    assert expected.name == "digits/dirichlet-0.5/3-clients"
    assert len(runs) >= 4  # two parents, the trials
    for run in runs:
        (inp,) = run.inputs.dataset_inputs
        assert (inp.dataset.name, inp.dataset.digest) == (expected.name, expected.digest), run.info.run_name
        assert {t.key: t.value for t in inp.tags} == {DATASET_CONTEXT: "train"}
        profile = json.loads(inp.dataset.profile)
        assert profile["partition"] == {
            "kind": "dirichlet",
            "alpha": 0.5,
            "clients": 3,
            "min_size": 20,
            "seed": 0,
            "val_fraction": 0.1,
        }
        assert profile["train_samples"] + profile["val_samples"] == 1437 and profile["test_samples"] == 360
        assert json.loads(inp.dataset.source) == {"dataset": "digits", "embedded": True}
    # the runs page's filters: by name, by digest
    by_name = client.search_runs([experiment], filter_string=f"dataset.name = '{expected.name}'")
    by_digest = client.search_runs([experiment], filter_string=f"dataset.digest = '{expected.digest}'")
    assert {r.info.run_id for r in by_name} == {r.info.run_id for r in runs} == {r.info.run_id for r in by_digest}
    assert not client.search_runs([experiment], filter_string="dataset.name = 'digits/dirichlet-0.1/3-clients'")


def test_the_digest_changes_with_any_sample_moving_between_clients_or_shares():
    dataset = load_dataset("digits")
    train = [np.arange(0, 100), np.arange(100, 200)]
    val = [np.arange(200, 210), np.arange(210, 220)]
    settings = {"kind": "dirichlet", "alpha": 0.5, "clients": 2}
    first = data_identity(dataset, train, val, settings)
    assert first == data_identity(dataset, [t.copy() for t in train], [v.copy() for v in val], settings)
    moved = [np.arange(0, 99), np.arange(99, 200)]  # sample 99 changes client
    assert data_identity(dataset, moved, val, settings).digest != first.digest
    swapped = [np.arange(0, 100), np.r_[np.arange(101, 200), 200]]  # a training sample becomes validation
    val_swapped = [np.arange(200, 210), np.r_[100, np.arange(211, 220)]]
    assert data_identity(dataset, swapped, val_swapped, settings).digest != first.digest
    assert len(first.digest) == 16 and first.sizes == {
        "train_samples": 200,
        "val_samples": 20,
        "test_samples": 360,
        "clients": 2,
    }


@pytest.mark.parametrize(
    ("settings", "label"),
    [
        ({"kind": "dirichlet", "alpha": 0.1, "clients": 10}, "dirichlet-0.1/10-clients"),
        ({"kind": "quantity_skew", "alpha": 1.0, "clients": 5}, "quantity_skew-1/5-clients"),
        ({"kind": "shards", "classes_per_client": 2, "clients": 20}, "shards-2/20-clients"),
        ({"kind": "iid", "clients": 4}, "iid/4-clients"),
    ],
)
def test_the_dataset_name_says_the_partition(settings, label):
    assert partition_label(settings) == label


def test_a_file_backed_dataset_names_its_root_as_source():
    experiment = ExperimentConfig(dataset="digits", partition={"clients": 3, "alpha": 0.5, "min_size": 20})
    identity = data_identity_of(experiment, prepare_data(experiment))
    entity = dataset_input(identity).dataset
    assert json.loads(entity.source) == {"dataset": "digits", "embedded": True} and entity.source_type == "code"
    rooted = data_identity(
        load_dataset("digits"), [np.arange(5)], [np.arange(5, 7)], {"kind": "iid", "clients": 1}, "/d"
    )
    assert rooted.source == {"dataset": "digits", "root": "/d"}
    schema = json.loads(entity.schema)["mlflow_tensorspec"]
    assert json.loads(schema["features"])[0]["tensor-spec"] == {"dtype": "float32", "shape": [-1, 1, 8, 8]}


# ------------------------------------------------------------------------------------------- descriptions


def test_parent_runs_describe_variant_method_fixed_and_searched(records_study):
    _, _, _, runs, _, space_file, _ = records_study
    parents = _parents(runs)
    full = parents["full"].data.tags[TAG_DESCRIPTION]
    assert full.startswith("**Variant `full`** of study `records`: method `univarfl`.")
    searched = next(line for line in full.splitlines() if line.startswith("- Searched: "))
    assert "`mu` ~ loguniform(0.01, 1)" in searched and "`lambda` ~ uniform(0.5, 3)" in searched
    assert "3 trials, Optuna TPE (seed 0, drawn per variant), ASHA on rounds (grace 1, reduction 2)" in full
    assert "Data: `digits`, dirichlet (alpha 0.5) over 3 clients" in full and "3 rounds" in full
    space = SearchSpace.model_validate(yaml.safe_load(space_file.read_text()))
    assert full == variant_description(space, "full", 3)
    fedavg = parents["fedavg"].data.tags[TAG_DESCRIPTION]
    assert "method `fedavg`" in fedavg and "- Searched: nothing (one run of the fixed configuration)" in fedavg
    trial = next(r for r in runs if r.info.run_name == "full-000")
    assert trial.data.tags[TAG_DESCRIPTION].startswith("Trial 0 of variant `full` (method `univarfl`): `lambda=")


def test_a_parent_logs_its_trials_params_minus_the_searched_names(records_study):
    # one builder for both (tracking/records.py): a parent and its trials line up column by column in the MLflow UI
    _, _, _, runs, _, _, _ = records_study
    for variant, parent in _parents(runs).items():
        searched = {k.removeprefix("search.") for k in parent.data.params if k.startswith("search.")}
        trials = [r for r in runs if r.data.tags.get(TAG_PARENT_RUN) == parent.info.run_id]
        assert trials, variant
        for trial in trials:
            expected = {k: v for k, v in trial.data.params.items() if k not in searched}
            unsearched = {k: v for k, v in parent.data.params.items() if not k.startswith("search.")}
            assert unsearched == expected, (variant, trial.info.run_name)
    assert {k for k in _parents(runs)["full"].data.params if k.startswith("search.")} == {"search.mu", "search.lambda"}
    assert not any(k.startswith("synthetic.") for k in _parents(runs)["full"].data.params)  # digits: not its data


# ------------------------------------------------------------------------------------------- models


def test_each_variants_best_model_loads_back_and_reproduces_its_logged_test_acc(records_study):
    client, uri, experiment, runs, base, _, printed = records_study
    data = prepare_data(base)
    x, y = data.dataset.x_test, data.dataset.y_test
    for variant, parent in _parents(runs).items():
        model_id, trial_run = parent.data.tags[TAG_MODEL_ID], parent.data.tags[TAG_MODEL_RUN_ID]
        trial = client.get_run(trial_run)
        assert trial.data.tags[TAG_PARENT_RUN] == parent.info.run_id and trial.data.tags[TAG_MODEL_ID] == model_id
        # the Models column: the model is an output of the trial's run and of the variant's parent
        (out,) = trial.outputs.model_outputs
        # filed in the study's experiment, its artifacts beside the store (not in Default, not in ./mlruns)
        logged_model = client.get_logged_model(model_id)
        assert logged_model.experiment_id == experiment and logged_model.name == "global_model"
        assert logged_model.artifact_location.startswith(Path(uri.removeprefix("sqlite:///")).parent.as_uri())
        assert logged_model.params == trial.data.params
        assert out.model_id == model_id and [m.model_id for m in parent.outputs.model_outputs] == [model_id]
        logged = {m.step: m.value for m in client.get_metric_history(trial_run, "test_acc")}
        assert out.step == base.rounds  # the selected trial ran every round: its final model
        with _use_tracking_uri(uri):
            model = mlflow.pytorch.load_model(f"models:/{model_id}")
        assert accuracy(model, x, y) == logged[out.step], variant
        assert parent.data.metrics["best_test_acc"] == logged[out.step]
        assert f"{variant}: parent run {parent.info.run_id}, best model models:/{model_id}" in printed
        with _use_tracking_uri(uri):
            signature = mlflow.models.get_model_info(f"models:/{model_id}").signature
        assert signature.inputs.to_dict()[0]["tensor-spec"] == {"dtype": "float32", "shape": (-1, 1, 8, 8)}
        assert signature.outputs.to_dict()[0]["tensor-spec"] == {"dtype": "float32", "shape": (-1, 10)}
    # the best trials so far were logged ahead (export/model_helper.py): those superseded are gone, from their runs too
    selected = {parent.data.tags[TAG_MODEL_ID] for parent in _parents(runs).values()}
    assert {m.model_id for m in client.search_logged_models([experiment])} == selected
    assert {
        r.data.tags[TAG_MODEL_ID] for r in client.search_runs([experiment]) if TAG_MODEL_ID in r.data.tags
    } == selected


def test_the_study_ends_with_commands_to_copy(records_study):
    _, uri, _, _, _, space_file, printed = records_study
    after = printed.split("=== next ===\n", 1)[1]
    assert f"mlflow ui --backend-store-uri {uri} --port 5000" in after
    experiment = MlflowClient(uri).get_experiment_by_name("records").experiment_id
    runs_page = f"http://127.0.0.1:5000/#/experiments/{experiment}/runs?workflowType=machine_learning"
    assert f"then open {runs_page}\n" in after
    assert f"python scripts/ablate.py --space {space_file} --mlflow-uri {uri} --seeds 3" in after
    assert f"python dashboards/build.py --space {space_file} --mlflow-uri {uri}" in after
    assert "mlflow.pytorch.load_model('models:/m-" in after
    optuna_db = uri.removeprefix("sqlite:///").removesuffix("m.db") + "optuna.db"
    assert f"optuna-dashboard sqlite:///{optuna_db}" in after
