"""Each searched variant's Optuna study persists to an RDB storage (`--optuna-storage`, default optuna.db beside the
MLflow SQLite file): opened with optuna.load_study and optuna-dashboard, it holds the same trials as MLflow."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import signal
import subprocess
import time
import urllib.request
from pathlib import Path
from types import SimpleNamespace

import optuna
import pytest
import yaml
from optuna.distributions import FloatDistribution
from optuna.trial import TrialState
from ray.tune.search.optuna import OptunaSearch

from raytune_fl.cli import main
from raytune_fl.config import ConfigError, parse_space
from raytune_fl.runtime import cluster
from raytune_fl.runtime import optuna_storage as osto
from raytune_fl.tracking import store
from raytune_fl.tracking.schema import (
    TAG_OPTUNA_STORAGE,
    TAG_OPTUNA_STUDY,
    TAG_VARIANT,
    TRIAL_FINISHED,
    TRIAL_STOPPED_EARLY,
)
from raytune_fl.tune.manifest import StudyManifest
from raytune_fl.tune.study import VariantRun
from tests.support import tiny_space
from tests.support.optuna_runs import compare_with_optuna, tune_parents
from tests.support.ray_nodes import free_ports

optuna.logging.set_verbosity(optuna.logging.WARNING)

# ------------------------------------------------------------------------------------------------ URL resolution


def test_the_default_is_optuna_db_beside_the_mlflow_sqlite_file(tmp_path):
    assert osto.resolve_url(None, f"sqlite:///{tmp_path}/runs/mlflow.db") == f"sqlite:///{tmp_path}/runs/optuna.db"
    # a relative MLflow path is relative to the working directory, as MLflow reads it; the result is absolute
    assert osto.default_url("sqlite:///sub/m.db", cwd=tmp_path) == f"sqlite:///{tmp_path}/sub/optuna.db"
    # an MLflow server, a file store, an in-memory SQLite: <cwd>/optuna.db
    for uri in ("http://127.0.0.1:5000", "file:///tmp/mlruns", "databricks", "sqlite://"):
        assert osto.default_url(uri, cwd=tmp_path) == f"sqlite:///{tmp_path}/optuna.db", uri


def test_the_option_overrides_the_default_and_sqlite_paths_become_absolute(tmp_path):
    mlflow = f"sqlite:///{tmp_path}/mlflow.db"
    assert osto.resolve_url(f"sqlite:///{tmp_path}/o.db", mlflow) == f"sqlite:///{tmp_path}/o.db"
    assert osto.resolve_url("sqlite:///rel/o.db", mlflow, cwd=tmp_path) == f"sqlite:///{tmp_path}/rel/o.db"
    url = "postgresql://optuna:s3cret@db.example:5432/studies"
    assert osto.resolve_url(url, mlflow) == url  # passed to Optuna as given, password included
    assert osto.masked(url) == "postgresql://optuna:***@db.example:5432/studies"
    assert osto.dashboard_command(url) == "optuna-dashboard postgresql://optuna:***@db.example:5432/studies"
    assert osto.masked(f"sqlite:///{tmp_path}/o.db") == f"sqlite:///{tmp_path}/o.db"


@pytest.mark.parametrize(
    ("option", "fragment"),
    [
        ("optuna.db", "expected a SQLAlchemy URL"),
        ("/abs/optuna.db", "expected a SQLAlchemy URL"),
        ("sqlite://", "in-memory SQLite database keeps nothing"),
        ("sqlite:///:memory:", "in-memory SQLite database keeps nothing"),
    ],
)
def test_what_is_not_a_storage_url_is_refused(option, fragment):
    with pytest.raises(ConfigError, match="--optuna-storage") as refused:
        osto.resolve_url(option, "sqlite:///m.db")
    assert fragment in str(refused.value)


# ------------------------------------------------------------------------------------------------ study names


def test_a_fresh_run_takes_the_plain_name_then_a_start_time_suffix(tmp_path):
    storage = osto.open_storage(f"sqlite:///{tmp_path}/o.db")
    assert osto.unused_study_name(storage, "space-full", "20260101-120000") == "space-full"
    optuna.create_study(storage=storage, study_name="space-full")
    assert osto.unused_study_name(storage, "space-full", "20260101-120000") == "space-full-20260101-120000"
    optuna.create_study(storage=storage, study_name="space-full-20260101-120000")  # two starts in one second
    assert osto.unused_study_name(storage, "space-full", "20260101-120000") == "space-full-20260101-120000-2"
    assert osto.unused_study_name(storage, "space-fedavg", "20260101-120000") == "space-fedavg"


def test_trials_left_running_are_marked_failed(tmp_path):
    url = f"sqlite:///{tmp_path}/o.db"
    study = optuna.create_study(storage=url, study_name="s", direction="maximize")
    done = study.ask({"x": FloatDistribution(0, 1)})
    study.tell(done, 0.5)
    study.ask({"x": FloatDistribution(0, 1)})  # its driver was killed: nobody will tell it
    assert osto.fail_running_trials(url, "s") == 1
    trials = optuna.load_study(study_name="s", storage=url).trials
    assert [t.state for t in trials] == [TrialState.COMPLETE, TrialState.FAIL]
    assert trials[0].value == 0.5 and "driver was killed" in trials[1].system_attrs["fail_reason"]
    assert osto.fail_running_trials(url, "s") == 0


def test_a_restored_searcher_keeps_writing_to_the_same_study(tmp_path):
    """Tune checkpoints its searcher with OptunaSearch.save (a pickle of its __dict__, the RDBStorage included) and
    a resumed study restores it into a searcher built afresh: the trials it had asked for end in the first DB."""
    url, space = f"sqlite:///{tmp_path}/o.db", {"x": FloatDistribution(0, 1)}
    searcher = OptunaSearch(space, metric="m", mode="max", study_name="s", storage=osto.open_storage(url))
    searcher.suggest("t1")
    searcher.on_trial_result("t1", {"m": 0.1, "training_iteration": 1})
    searcher.save(str(tmp_path / "searcher.pkl"))
    other = f"sqlite:///{tmp_path}/other.db"
    restored = OptunaSearch(space, metric="m", mode="max", study_name="x", storage=osto.open_storage(other))
    restored.restore(str(tmp_path / "searcher.pkl"))
    restored.on_trial_result("t1", {"m": 0.2, "training_iteration": 2})
    restored.on_trial_complete("t1", {"m": 0.3, "training_iteration": 2})
    [trial] = optuna.load_study(study_name="s", storage=url).trials
    assert trial.state == TrialState.COMPLETE and trial.value == 0.3
    assert trial.intermediate_values == {1: 0.1, 2: 0.2}
    assert optuna.load_study(study_name="x", storage=other).trials == []


def test_a_resume_refuses_another_storage_than_the_interrupted_variant_used(tmp_path):
    space = parse_space(tiny_space("moved"))
    manifest = StudyManifest.start(tmp_path, space, "sqlite:///m.db")
    manifest.started("full", VariantRun("p", "r", "moved-full", "sqlite:////first/optuna.db"))
    loaded = StudyManifest.load(tmp_path, space, "sqlite:///m.db")
    assert loaded.run("full") == VariantRun("p", "r", "moved-full", "sqlite:////first/optuna.db")
    loaded.check_optuna_storage("sqlite:////first/optuna.db")
    with pytest.raises(ConfigError, match="resume with --optuna-storage sqlite:////first/optuna.db"):
        loaded.check_optuna_storage("sqlite:////elsewhere/optuna.db")
    # an entry of a study started before Optuna storage existed (no such keys) still loads
    loaded.variants["old"] = {"experiment_path": "q", "parent_run_id": None, "outcome": None}
    assert loaded.run("old") == VariantRun("q", None)
    loaded.check_optuna_storage("sqlite:////first/optuna.db")


# ------------------------------------------------------------------------------------------------ the command line


@pytest.fixture
def no_ray(monkeypatch):
    def refuse(*args):
        raise AssertionError("main() went on to start Ray: the bad --optuna-storage was not caught")

    monkeypatch.setattr(cluster, "start_ray", refuse)


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("sqlite:///{tmp}/file/o.db", "sqlite:///{tmp}/file/o.db: OperationalError: (sqlite3.OperationalError) unable"),
        ("sqlite:////proc/forbidden/o.db", "unable to open database file"),
        ("sqlite:///{tmp}/file", "DatabaseError: (sqlite3.DatabaseError) file is not a database"),
        ("nosuchdb://host/x", "cannot use nosuchdb://host/x: NoSuchModuleError"),
    ],
    ids=["under-a-file", "in-proc", "not-a-database", "unknown-dialect"],
)  # fmt: skip
def test_a_storage_that_cannot_be_written_is_refused(tmp_path, url, expected):
    (tmp_path / "file").write_text("not a database")
    with pytest.raises(ConfigError) as refused:
        osto.check(url.format(tmp=tmp_path))
    assert str(refused.value).startswith("--optuna-storage: cannot use ")
    assert expected.format(tmp=tmp_path) in str(refused.value)


def test_a_bad_storage_is_refused_before_ray(tmp_path, capsys, no_ray):
    path = tmp_path / "space.yaml"
    path.write_text(yaml.safe_dump(tiny_space()))
    port = free_ports(1)[0]  # nothing listens there (and no PostgreSQL driver need be installed)
    argv = ["--space", str(path), "--storage", str(tmp_path / "ray"), "--mlflow-uri", f"sqlite:///{tmp_path}/m.db"]
    code = main([*argv, "--optuna-storage", f"postgresql://optuna:s3cret@127.0.0.1:{port}/studies"])
    out, err = capsys.readouterr()
    assert code == 2, (out, err)
    # refused before MLflow's store is made: for want of a driver, or (one installed) as nothing answers there
    shown = f"postgresql://optuna:***@127.0.0.1:{port}/studies"
    assert err.startswith((f"error: --optuna-storage: cannot use {shown}: ", f"error: --optuna-storage '{shown}': "))
    assert "s3cret" not in out + err and "Traceback" not in out + err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["space.yaml"]


def test_the_default_storage_is_checked_too(tmp_path, capsys, no_ray):
    path = tmp_path / "space.yaml"
    path.write_text(yaml.safe_dump(tiny_space()))
    (tmp_path / "optuna.db").write_text("not a database")  # what is beside the MLflow file
    argv = ["--space", str(path), "--storage", str(tmp_path / "ray"), "--mlflow-uri", f"sqlite:///{tmp_path}/m.db"]
    assert main(argv) == 2
    error = capsys.readouterr().err  # refused before MLflow's store is made
    assert error.startswith(f"error: --optuna-storage: cannot use sqlite:///{tmp_path}/optuna.db (the default; ")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["optuna.db", "space.yaml"]


# ------------------------------------------------------------------------------------------------ a real study


def _tune(root: Path, *extra: str) -> tuple[int, str]:
    printed = io.StringIO()
    args = ["--space", str(root / "space.yaml"), "--mlflow-uri", f"sqlite:///{root}/mlflow.db"]
    with contextlib.redirect_stdout(printed):
        code = main([*args, "--storage", str(root / "ray"), "--seed", "0", *extra])
    print(printed.getvalue())
    return code, printed.getvalue()


@pytest.fixture(scope="module")
def study(ray_cluster, tmp_path_factory):
    """`optuna-tiny`'s searched variant, 4 trials with ASHA (grace 1, halving): some stopped early, some finished."""
    root = tmp_path_factory.mktemp("optuna_study")
    data = tiny_space("optuna-tiny", resources={"actors": 0})  # clients trained in the trial's process: quicker
    data["tune"]["num_samples"] = 4  # one at a time, each in the process the previous one ran in (reuse_actors)
    (root / "space.yaml").write_text(yaml.safe_dump(data))
    code, printed = _tune(root, "--variants", "full")
    assert code == 0, printed
    url = f"sqlite:///{root}/optuna.db"  # the default: beside mlflow.db
    client = store.open_client(f"sqlite:///{root}/mlflow.db")
    manifest = json.loads((root / "ray" / "optuna-tiny.study.json").read_text())  # before another run moves it
    return SimpleNamespace(root=root, url=url, printed=printed, client=client, manifest=manifest)


def _first_parent(study) -> object:
    """The fixture's run's parent (test_a_second_fresh_run_gets_a_study_of_its_own adds another)."""
    [parent] = [
        p for p in tune_parents(study.client, "optuna-tiny") if p.data.tags[TAG_OPTUNA_STUDY] == "optuna-tiny-full"
    ]
    return parent


def test_the_optuna_study_holds_the_mlflow_trials(study):
    loaded = optuna.load_study(study_name="optuna-tiny-full", storage=study.url)
    assert loaded.direction == optuna.study.StudyDirection.MAXIMIZE
    assert len(loaded.trials) == 4 and all(t.state == TrialState.COMPLETE for t in loaded.trials)
    parent = _first_parent(study)
    statuses = compare_with_optuna(study.client, "optuna-tiny", parent, loaded)
    # ASHA-stopped trials are in Optuna too, as COMPLETE with their last (truncated) value
    assert statuses.get(TRIAL_FINISHED, 0) >= 1 and statuses.get(TRIAL_STOPPED_EARLY, 0) >= 1, statuses


def test_the_parent_run_the_manifest_and_the_summary_name_the_study(study):
    parent = _first_parent(study)
    assert parent.data.tags[TAG_VARIANT] == "full"
    assert parent.data.tags[TAG_OPTUNA_STORAGE] == study.url
    entry = study.manifest["variants"]["full"]
    assert (entry["optuna_study"], entry["optuna_storage"]) == ("optuna-tiny-full", study.url)
    assert (entry["outcome"]["optuna_study"], entry["outcome"]["optuna_storage"]) == ("optuna-tiny-full", study.url)
    assert f"Optuna studies:      {study.url}  (view with: optuna-dashboard {study.url})" in study.printed
    assert f"Optuna: studies at {study.url}\n  view with: optuna-dashboard {study.url}\n" in study.printed
    assert f"full: optuna.load_study(study_name='optuna-tiny-full', storage='{study.url}')" in study.printed


def test_a_second_fresh_run_gets_a_study_of_its_own(study):
    before = len(optuna.load_study(study_name="optuna-tiny-full", storage=study.url).trials)
    code, printed = _tune(study.root, "--variants", "full", "--num-samples", "2", "--rounds", "2")
    assert code == 0, printed
    parent = max(tune_parents(study.client, "optuna-tiny"), key=lambda r: r.info.start_time)
    name = parent.data.tags[TAG_OPTUNA_STUDY]
    # the start time of this run's Tune experiment, whose directory has the same name
    assert name.startswith("optuna-tiny-full-") and (study.root / "ray" / name).is_dir(), name
    assert len(optuna.load_study(study_name="optuna-tiny-full", storage=study.url).trials) == before  # untouched
    second = optuna.load_study(study_name=name, storage=study.url)
    assert len(second.trials) == 2
    compare_with_optuna(study.client, "optuna-tiny", parent, second)


def test_optuna_dashboard_serves_the_study(study):
    if shutil.which("optuna-dashboard") is None:
        pytest.skip("optuna-dashboard is not installed (pip install -e '.[dev]')")
    port = free_ports(1)[0]
    log = open(study.root / "dashboard.log", "w")
    process = subprocess.Popen(
        ["optuna-dashboard", study.url, "--host", "127.0.0.1", "--port", str(port)], stdout=log, stderr=log
    )
    try:
        deadline, names = time.time() + 60, None
        while time.time() < deadline and process.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/studies", timeout=5) as reply:
                    names = {s["study_name"] for s in json.load(reply)["study_summaries"]}
                    break
            except OSError:
                time.sleep(0.3)
        assert names is not None, (study.root / "dashboard.log").read_text()[-2000:]
        assert "optuna-tiny-full" in names
    finally:
        os.kill(process.pid, signal.SIGTERM)
        process.wait(timeout=30)
        log.close()


# ------------------------------------------------------------------------------------------------ --resume
