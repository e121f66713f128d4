"""examples/ (issue: your own data, model and method): each example, copied outside the repository, runs its study
as documented on a real Ray cluster with 2 client actors per trial. The cluster is a `ray start` head of its own
(tests/support/ray_nodes.py) whose processes know nothing of the examples' folders, so a trial or client actor can
only find a plugin in the copy Ray ships with the job (raytune_fl/plugins.py: the runtime_env's py_modules)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap

import pytest
from mlflow.tracking import MlflowClient

from tests.support import REPO
from tests.support.ray_nodes import start_cli, start_node, stop_node

STUDY_S = 240  # one example's study, 2 rounds, on 2 cores (~20-30 s; a cold torch import in each actor)
ARGS = ["--rounds", "2", "--num-samples", "1"]  # the examples as written, shorter


@pytest.fixture(scope="module")
def head():
    cluster = start_node(num_cpus=2)
    try:
        yield cluster
    finally:
        stop_node(cluster)


def copy_example(name: str, tmp_path):
    folder = tmp_path / name
    shutil.copytree(REPO / "examples" / name, folder)
    assert not any(p in folder.parents for p in (REPO,))  # outside the repository
    return folder


def run_example(head, folder, name: str, env_extra: dict[str, str] | None = None, *more: str) -> MlflowClient:
    """`python scripts/tune.py --space space.yaml` from the example's folder, joined to `head`."""
    env = {**head.env, **(env_extra or {})}
    args = ["--space", "space.yaml", "--address", head.address, *ARGS, *more]
    run = start_cli(REPO / "scripts" / "tune.py", args, folder, name, env, folder)
    rc, out, err, _ = run.finish(STUDY_S)
    assert rc == 0, f"{name} exited with {rc}" + run.context()
    assert "'error': 0" in out and "'error': 1" not in out, run.context()  # every trial of every variant ran
    return MlflowClient(f"sqlite:///{folder / 'mlflow.db'}")


def finished_trials(client: MlflowClient, experiment: str) -> list:
    """The trials' child runs; each ran every round with no client actor lost."""
    runs = client.search_runs([client.get_experiment_by_name(experiment).experiment_id])
    trials = [r for r in runs if "trial_id" in r.data.tags]
    assert trials and all(r.data.tags.get("actor_failures") == "0" for r in trials), [r.data.tags for r in trials]
    assert all(r.data.tags.get("rounds_completed") == "2" for r in trials), [r.data.tags for r in trials]
    return trials


NOT_ON_CLUSTER = """
import sys, ray
ray.init(address=sys.argv[1], log_to_driver=False)

@ray.remote
def probe():
    try:
        import my_model  # noqa: F401
        return "imported"
    except ModuleNotFoundError:
        return "missing"

print(ray.get(probe.remote()))
"""


def test_a_plugin_only_the_drivers_pythonpath_names_reaches_the_client_actors(head, tmp_path):
    folder = copy_example("custom_model", tmp_path)
    driver_only = tmp_path / "driver_only"
    driver_only.mkdir()
    shutil.move(folder / "my_model.py", driver_only / "my_model.py")  # not beside the space: PYTHONPATH only
    # without the job's runtime_env a worker of this cluster cannot import it: the check below is not vacuous
    probe = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(NOT_ON_CLUSTER), head.address],
        env={**head.env, "PYTHONPATH": str(driver_only)},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert probe.stdout.strip().splitlines()[-1:] == ["missing"], probe.stdout + probe.stderr[-2000:]

    # with the best models logged: the export helper process rebuilds tiny_mlp by name too
    client = run_example(head, folder, "custom_model", {"PYTHONPATH": str(driver_only)})
    runs = finished_trials(client, "custom-model")
    parents = [r for r in client.search_runs([runs[0].info.experiment_id]) if "trial_id" not in r.data.tags]
    assert len(parents) == 2 and all(r.data.tags.get("model_id", "").startswith("m-") for r in parents)
    assert {(r.data.params["model"], r.data.params["resources.actors"]) for r in runs} == {("tiny_mlp", "2")}
    assert max(r.data.metrics["val_acc"] for r in runs) > 0.2  # it learned (digits: chance is 0.1)


def test_the_custom_dataset_example_runs_from_its_folder(head, tmp_path):
    client = run_example(head, copy_example("custom_dataset", tmp_path), "custom_dataset", None, "--no-models")
    runs = finished_trials(client, "custom-dataset")
    assert {(r.data.params["dataset"], r.data.params["dataset_options.noise"]) for r in runs} == {("shapes", "0.15")}
    assert max(r.data.metrics["val_acc"] for r in runs) > 0.28  # 4 classes: chance is 0.25 (2 rounds: 0.31 here)


def test_the_custom_method_example_runs_from_its_folder(head, tmp_path):
    client = run_example(head, copy_example("custom_method", tmp_path), "custom_method", None, "--no-models")
    runs = finished_trials(client, "custom-method")
    trim = [r for r in runs if r.data.params["method"] == "fedtrim"]
    assert trim and all({"lam", "trim"} <= set(r.data.params) for r in trim)  # searched and logged
    assert all(any("term_feature_norm" in key for key in r.data.metrics) for r in trim), "its term is logged"
