"""Every method's search-space file runs through scripts/tune.py end to end (a shrunken configuration)."""

from __future__ import annotations

import pytest
from mlflow.tracking import MlflowClient

from raytune_fl.cli import main
from raytune_fl.config import load_space
from raytune_fl.tracking.schema import RAN_EVERY_ROUND
from tests.support import REPO

SMOKE = [
    "--rounds=2",
    "--num-samples=1",
    "--set=base.dataset=digits",
    "--set=base.partition.clients=3",
    "--set=base.partition.min_size=20",
    "--set=base.batch_size=32",
    "--set=base.resources.actors=0",  # clients train in the trial's process: no actor start-up per variant
    "--set=base.diagnostics.every=1",  # every diagnostic runs for every method
    "--no-models",  # logging a model (a helper process, torch.export) is tested in test_model_helper, test_quickstart
]


# every variant of the new files; of the older files, the variants this library added (the rest run in test_study).
# A variant that repeats another's method and code path here is left out (CI's time): moon's and adaptive's FedAvg
# and FedAvgM are baselines'; FedLD's none, margin and principal are both's terms alone, and run in
# test_reproduce's fedld_table2
CASES = {
    "fedld": ["both", "both_official", "fedgh", "fedgh_official", "fedpac"],
    "moon": ["moon"],
    "baselines": None,
    "adaptive": ["fedadagrad", "fedadam", "fedyogi"],
    "stragglers": None,
    "feduv": ["full_official", "freeze", "feddecorr", "fedalign"],
    # its feduv_official and feddecorr are feduv.yaml's full_official and feddecorr, variant for variant
    "univarfl": ["feddyn"],
}


@pytest.mark.parametrize("name", list(CASES))
def test_search_space_runs_through_tune_py(name, ray_cluster, tmp_path, capsys):
    path = REPO / "search_spaces" / f"{name}.yaml"
    space = load_space(path)
    variants = CASES[name] or list(space.variants)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    args = ["--space", str(path), "--mlflow-uri", uri, "--storage", str(tmp_path / "ray"), *SMOKE]
    args += ["--variants", ",".join(variants)]
    assert main(args) == 0, capsys.readouterr().err
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name(space.name)
    runs = client.search_runs([experiment.experiment_id])
    parents = {r.data.tags["variant"]: r for r in runs if "mlflow.parentRunId" not in r.data.tags}
    assert set(parents) == set(variants)
    for variant, parent in parents.items():
        assert parent.info.status == "FINISHED", variant
        assert 0.0 <= parent.data.metrics["best_val_acc"] <= 1.0, variant
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    # every trial ran every round; a smoke run's may end at chance (collapsed), still not stopped or failed
    assert all(r.data.tags["trial_status"] in RAN_EVERY_ROUND for r in children)
    assert {r.data.tags["variant"] for r in children} == set(variants)
    for child in children:  # the costly diagnostic ran (every=1) and adds up to the validation loss
        m = child.data.metrics
        assert m["loss_local"] + m["loss_shift"] + m["loss_aggregation"] == pytest.approx(m["val_loss"], rel=1e-6)


def test_the_univarfl_variants_left_out_above_are_the_feduv_ones_that_run():
    univarfl, feduv = (load_space(REPO / "search_spaces" / f"{name}.yaml") for name in ("univarfl", "feduv"))
    assert univarfl.variants["feduv_official"] == feduv.variants["full_official"]
    assert univarfl.variants["feddecorr"] == feduv.variants["feddecorr"]
