"""A grid study under Hyperband whose driver is SIGKILLed mid-trial resumes (Tune restores the pickled grid sampler
and its Optuna study) to every grid point run once, with MLflow and the Optuna study saying how it was searched."""

from __future__ import annotations

import shutil
import tempfile

import optuna
import yaml
from optuna.trial import TrialState

from raytune_fl.cli import main
from raytune_fl.tracking import store
from raytune_fl.tracking.schema import TAG_SAMPLER, TAG_SCHEDULER, TAG_VARIANT, TRIAL_FINISHED
from tests.support.killed_study import kill_when, resumable_space, start_script
from tests.support.optuna_runs import compare_with_optuna, tune_parents


def test_a_killed_grid_study_under_hyperband_resumes_to_its_whole_grid(ray_cluster, tmp_path, capsys, request):
    path = resumable_space(tmp_path)  # `resumable`: fedavg, then full: 4 rounds a trial, one trial at a time
    data = yaml.safe_load(path.read_text())
    data["variants"]["full"]["search"] = {
        "mu": {"loguniform": [0.01, 1.0], "grid": [0.1, 1.0]},
        "lambda": {"uniform": [0.5, 3.0], "grid": [2.0]},
    }
    data["tune"].update(sampler="grid", scheduler={"hyperband": {}}, num_samples=3)  # the grid has 2 points
    path.write_text(yaml.safe_dump(data))
    uri, storage, url = f"sqlite:///{tmp_path}/m.db", tmp_path / "killed", f"sqlite:///{tmp_path}/optuna.db"
    # --no-models: the models are no part of this (and their low-priority helper waits long on a busy machine)
    args = ["--space", str(path), "--storage", str(storage), "--mlflow-uri", uri, "--no-models"]
    ray_tmp = tempfile.mkdtemp(prefix="rg", dir="/tmp")  # short: Ray's socket paths have a length limit
    request.addfinalizer(lambda: shutil.rmtree(ray_tmp, ignore_errors=True))
    before = kill_when(start_script("tune.py", [*args, "--verbose"], ray_tmp), "[full] trial 2/2 round 3/4", 400)
    assert "[full] grid sampler: 2 grid points, each run once (tune.num_samples 3 does not apply)" in before

    capsys.readouterr()
    assert main([*args, "--resume"]) == 0
    printed = capsys.readouterr().out
    assert "nothing to restore" not in printed and "Study.stop" not in printed
    assert "search: sampler grid, scheduler hyperband (tune.sampler, tune.scheduler)" in printed
    study = optuna.load_study(study_name="resumable-full", storage=url)
    assert study.user_attrs == {"sampler": "grid", "scheduler": "hyperband"}
    done = [t for t in study.trials if t.state == TrialState.COMPLETE]
    assert sorted(t.params["mu"] for t in done) == [0.1, 1.0]  # each grid point once, none repeated
    assert {t.params["lambda"] for t in done} == {2.0}
    [parent] = [p for p in tune_parents(store.open_client(uri), "resumable") if p.data.tags[TAG_VARIANT] == "full"]
    assert (parent.data.tags[TAG_SAMPLER], parent.data.tags[TAG_SCHEDULER]) == ("grid", "hyperband")
    assert "Optuna grid search (every point once)" in parent.data.tags["mlflow.note.content"]
    assert compare_with_optuna(store.open_client(uri), "resumable", parent, study) == {TRIAL_FINISHED: 2}
