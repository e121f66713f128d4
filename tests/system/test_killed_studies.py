"""Studies whose driver is SIGKILLed mid-trial (its whole process group) resume with `tune.py --resume` to the
uninterrupted result: on S3 (moto's server on loopback), and into the same Optuna study. On local storage,
test_interrupted_studies.py stops and resumes a study four times over (Ctrl-C, SIGTERM, a double Ctrl-C)."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import tempfile

import optuna
from mlflow.tracking import MlflowClient
from optuna.trial import TrialState

from raytune_fl.cli import main
from raytune_fl.tracking import store
from raytune_fl.tracking.schema import (
    TAG_OPTUNA_STUDY,
    TAG_VARIANT,
    TRIAL_FINISHED,
)
from tests.support.killed_study import finished_trials, kill_when, resumable_space, start_script, survivors
from tests.support.optuna_runs import compare_with_optuna, tune_parents
from tests.support.s3 import bucket_keys


def test_a_study_on_s3_killed_mid_trial_resumes_to_the_uninterrupted_result(s3, ray_cluster, tmp_path, request):
    space = resumable_space(tmp_path)
    reference_uri = f"sqlite:///{tmp_path / 'reference.db'}"  # uninterrupted, local storage, in this process
    assert main(["--space", str(space), "--storage", str(tmp_path / "ref"), "--mlflow-uri", reference_uri]) == 0

    uri, storage = f"sqlite:///{tmp_path / 'killed.db'}", f"s3://{s3.bucket}/studies"
    args = ["--space", str(space), "--storage", storage, "--mlflow-uri", uri, "--verbose"]  # a line per round
    ray_tmp = tempfile.mkdtemp(prefix="rs", dir="/tmp")  # short: Ray's socket paths have a length limit
    request.addfinalizer(lambda: shutil.rmtree(ray_tmp, ignore_errors=True))
    # the subprocess's private Ray cluster inherits the S3 environment, so its trial workers have it too
    workdir = tmp_path / "cwd"
    workdir.mkdir()
    before = kill_when(start_script("tune.py", args, ray_tmp, workdir), "[full] trial 2/3 round 3/4", timeout_s=400)
    assert f"Ray Tune results:    {storage}" in before
    assert "=== variant full" in before  # fedavg had finished, full was mid-study
    assert survivors(ray_tmp, wait_s=30) == []  # the killed driver's Ray processes went with it

    resumed = start_script("tune.py", [*args, "--resume"], ray_tmp, workdir)
    try:
        printed, _ = resumed.communicate(timeout=500)
    finally:
        if resumed.poll() is None:
            os.killpg(resumed.pid, signal.SIGKILL)
            resumed.wait()
    assert resumed.returncode == 0, printed[-3000:]
    assert "variant fedavg: finished before the interruption, kept" in printed
    assert "nothing to restore" not in printed  # Tune found the experiment in the bucket
    assert printed.count("round 1/4") == 1  # trial 2 continued from its checkpoint in the bucket; trial 3 afresh
    # a round run again from the checkpoint is neither printed again nor reported to Optuna again
    rounds = re.findall(r"^\[\w+\] trial \d+/\d+ round \d+/\d+ ", printed, re.M)
    assert rounds and len(rounds) == len(set(rounds)), rounds
    assert "already reported" not in printed, printed[-3000:]

    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name("resumable").experiment_id])
    assert not [r for r in runs if r.info.status == "RUNNING"]
    assert any(r.data.tags.get("resumed") == "true" for r in runs)  # the interrupted trial kept its run
    reference = finished_trials(reference_uri)
    assert len(reference) == 4  # fedavg + 3 searched trials
    assert finished_trials(uri) == reference  # same trials, same configs, every round once, the same numbers

    keys = bucket_keys(s3, "studies/")
    assert "studies/resumable.study.json" in keys
    experiments = {key.split("/")[1] for key in keys if key.endswith("/tuner.pkl")}
    assert sorted(e.rsplit("-", 2)[0] for e in experiments) == ["resumable-fedavg", "resumable-full"]
    assert any("/checkpoint_" in key and key.endswith("/federation.pt") for key in keys)
    assert not (workdir / "ray_results").exists()  # nothing of Tune's went to the default local directory
    assert [p.parent.parent for p in tmp_path.rglob("tuner.pkl")] == [tmp_path / "ref"] * 2  # the reference's only


def test_a_killed_study_resumes_in_the_same_optuna_study(ray_cluster, tmp_path, capsys, request):
    from tests.support.killed_study import kill_when, resumable_space

    space = resumable_space(
        tmp_path
    )  # `resumable`: fedavg, then full with 3 trials of 4 rounds, one at a time, no ASHA
    uri, storage, url = f"sqlite:///{tmp_path}/m.db", tmp_path / "killed", f"sqlite:///{tmp_path}/optuna.db"
    args = ["--space", str(space), "--storage", str(storage), "--mlflow-uri", uri]
    ray_tmp = tempfile.mkdtemp(prefix="ro", dir="/tmp")  # short: Ray's socket paths have a length limit
    process = start_script("tune.py", [*args, "--verbose"], ray_tmp)  # a line per trial round
    request.addfinalizer(lambda: shutil.rmtree(ray_tmp, ignore_errors=True))
    kill_when(process, "[full] trial 2/3 round 3/4", timeout_s=400)
    entry = json.loads((storage / "resumable.study.json").read_text())["variants"]["full"]
    assert (entry["optuna_study"], entry["optuna_storage"]) == ("resumable-full", url)
    killed = optuna.load_study(study_name="resumable-full", storage=url).trials
    assert TrialState.RUNNING in {t.state for t in killed}  # the interrupted trial

    capsys.readouterr()
    assert main([*args, "--resume"]) == 0
    printed, errors = capsys.readouterr()
    assert f"Optuna studies:      {url}" in printed
    assert "already reported" not in printed + errors  # the round run again is reported to Optuna once
    assert [s.study_name for s in optuna.get_all_study_summaries(url)] == ["resumable-full"]  # no second study
    resumed = optuna.load_study(study_name="resumable-full", storage=url)
    assert not [t for t in resumed.trials if t.state == TrialState.RUNNING]
    [parent] = [p for p in tune_parents(store.open_client(uri), "resumable") if p.data.tags[TAG_VARIANT] == "full"]
    assert parent.data.tags[TAG_OPTUNA_STUDY] == "resumable-full"
    statuses = compare_with_optuna(store.open_client(uri), "resumable", parent, resumed)
    assert statuses == {TRIAL_FINISHED: 3}
    # the interrupted trial finished as the Optuna trial it was (same number, its rounds before the kill kept)
    assert [t.number for t in resumed.trials if t.state == TrialState.COMPLETE] == [0, 1, 2]
