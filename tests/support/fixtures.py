"""Stores several test modules read (the fast tier's and the system tier's): registered for every test by the root
conftest (`pytest_plugins`), so each is built once per run that asks for it."""

from __future__ import annotations

import contextlib
import io
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING

import pytest

from tests.support import tiny_space
from tests.support.s3 import FAKE_KEYS, free_port

if TYPE_CHECKING:
    from raytune_fl.config import SearchSpace
    from raytune_fl.report.dashboard import DashboardReport

# the root conftest loads this module for every run: torch, Ray and MLflow are imported by the fixtures that use them


@pytest.fixture(scope="session")
def ablation_store(ray_cluster, tmp_path_factory):
    """A real tuned study and ablation in one MLflow store, made by the real CLIs (shared by the ablation and
    dashboard tests): `full` tuned with two trials, `fedavg` left untuned (so the ablation takes its
    configuration from the YAML), a dashboard of that store, then 2 variants x 2 seeds x alpha in {0.5, 1.0}
    (which builds the dashboard again, with the ablation), 3 rounds a cell."""
    import contextlib
    import io
    from types import SimpleNamespace

    import yaml

    from raytune_fl.cli import main as tune
    from raytune_fl.cli.ablate import main as ablate

    root = tmp_path_factory.mktemp("ablation_store")
    space = tiny_space("ablation_tiny", rounds=2, resources={"actors": 0})
    space["tune"]["max_concurrent"] = 2  # in-process trials take one CPU each
    path = root / "ablation_tiny.yaml"
    path.write_text(yaml.safe_dump(space, sort_keys=False))  # the file's variant order is the table's row order
    uri = f"sqlite:///{root / 'mlflow.db'}"
    common = ["--space", str(path), "--mlflow-uri", uri, "--storage", str(root / "ray_results")]
    tuned = io.StringIO()
    with contextlib.redirect_stdout(tuned):
        code = tune([*common, "--variants", "full", "--num-samples", "2"])
    print(tuned.getvalue())
    assert code == 0
    # the dashboard of a store with studies only (its fallbacks), before the ablation adds to the store
    from raytune_fl.config import load_space
    from raytune_fl.report.dashboard import build_dashboard

    printed_by_dashboard: list[str] = []
    tune_only = build_dashboard(
        uri, load_space(path), root / "tune_only" / "dashboard.html", echo=printed_by_dashboard.append
    )
    out = root / "reports"
    # 3 rounds (the study's trials ran 2): at 2 a held-out seed's fedavg cell ends one validation image above chance
    argv = [*common, "--seeds", "2", "--grid", "alpha=0.5,1.0", "--rounds", "3", "--out", str(out)]
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = ablate(argv)
    print(printed.getvalue())
    assert code == 0
    return SimpleNamespace(
        root=root,
        space_path=path,
        space_name="ablation_tiny",
        uri=uri,
        out=out,
        argv=argv,
        output=printed.getvalue(),
        tune_output=tuned.getvalue(),  # tune.py's stdout (not a terminal)
        tune_only=tune_only,
        dashboard_output=printed_by_dashboard,
    )


@dataclass
class Dashboards:
    uri: str
    root: Path
    space: SearchSpace
    name: str
    tune_only: DashboardReport  # built after the tune stage, before the ablation
    latest: DashboardReport  # built after the ablation
    printed: list[str]


@pytest.fixture(scope="module")
def dashboard_store(ablation_store) -> Dashboards:
    """The shared store (tests/conftest.py): one study (`full`, 2 trials), then an ablation of full and fedavg."""
    from raytune_fl.config import load_space
    from raytune_fl.report.dashboard import build_dashboard

    space, printed = load_space(ablation_store.space_path), list(ablation_store.dashboard_output)
    root = ablation_store.root
    latest = build_dashboard(ablation_store.uri, space, root / "latest" / "dashboard.html", echo=printed.append)
    return Dashboards(ablation_store.uri, root, space, space.name, ablation_store.tune_only, latest, printed)


@pytest.fixture(scope="module")
def records_study(tmp_path_factory, ray_cluster):
    import yaml
    from mlflow.tracking import MlflowClient

    from raytune_fl.cli import main
    from raytune_fl.config import SearchSpace

    tmp = tmp_path_factory.mktemp("records")
    data = tiny_space("records")
    space = tmp / "records.yaml"
    space.write_text(yaml.safe_dump(data))
    uri = f"sqlite:///{tmp / 'm.db'}"
    argv = ["--space", str(space), "--storage", str(tmp / "ray"), "--mlflow-uri", uri]
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert main(argv) == 0
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("records").experiment_id
    runs = client.search_runs([experiment])
    base = SearchSpace.model_validate(data).base
    return client, uri, experiment, runs, base, space, printed.getvalue()


@pytest.fixture(scope="module")
def trained_federation(tmp_path_factory):
    """A federation trained 2 rounds in process, its checkpoint, and a study's parent and trial runs."""
    from ray import tune

    from raytune_fl.engine.checkpoint import save_state
    from raytune_fl.engine.data import prepare_data
    from raytune_fl.engine.federation import Federation
    from raytune_fl.tracking import StudyTracker
    from raytune_fl.tracking.schema import TAG_PARENT_RUN, TAG_TRIAL_ID
    from tests.support.exports import EXPORT_EXPERIMENT

    tmp = tmp_path_factory.mktemp("helper")
    data = prepare_data(EXPORT_EXPERIMENT)
    federation = Federation(EXPORT_EXPERIMENT, "fedavg", {}, data=data)
    federation.run(on_round=lambda metrics: None)
    (tmp / "checkpoint").mkdir()
    save_state(federation.state_dict(), tmp / "checkpoint")
    uri = f"sqlite:///{tmp / 'm.db'}"
    tracker = StudyTracker(uri, "helper")
    parent = tracker.client.create_run(tracker.experiment_id).info.run_id
    tags = {TAG_PARENT_RUN: parent, "mlflow.parentRunId": parent}
    for trial in ("t1", "t2"):
        tracker.client.create_run(tracker.experiment_id, tags={**tags, TAG_TRIAL_ID: trial})
    checkpoint = tune.Checkpoint.from_directory(str(tmp / "checkpoint"))
    return uri, parent, checkpoint, data, federation.evaluate()


@pytest.fixture(scope="module")
def s3_server(tmp_path_factory):
    """moto's S3 server as a subprocess on 127.0.0.1 (a real HTTP S3 API), ended with the module."""
    moto = pytest.importorskip("moto", reason="the dev extra (moto[server]) is not installed")
    pytest.importorskip("boto3", reason="the dev extra (boto3) is not installed")
    if moto.__version__ in ("5.2.0", "5.2.1"):  # their CompleteMultipartUpload reply is refused by pyarrow
        pytest.fail(f"moto {moto.__version__} breaks pyarrow's uploads (getmoto/moto#10055): pip install -e .[dev]")
    port = free_port()
    log = tmp_path_factory.mktemp("moto") / "server.log"
    with log.open("w") as sink:
        server = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.time() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if server.poll() is not None or time.time() > deadline:
                    pytest.fail(f"moto's server did not start:\n{log.read_text()[-2000:]}")
                time.sleep(0.2)
        yield SimpleNamespace(endpoint=f"http://127.0.0.1:{port}", port=port)
    finally:
        server.terminate()  # only the server this fixture started
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


@pytest.fixture
def s3(s3_server, monkeypatch, request):
    """The S3 endpoint in this process's environment (fake keys), a fresh bucket, and a boto3 client."""
    import boto3

    for name in ("AWS_ENDPOINT_URL_S3", "AWS_PROFILE", "AWS_SESSION_TOKEN"):  # nothing ambient may redirect us
        monkeypatch.delenv(name, raising=False)
    env = {**FAKE_KEYS, "AWS_ENDPOINT_URL": s3_server.endpoint}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    bucket = "b" + request.node.name.lower().replace("_", "-")[:40].rstrip("-")
    client = boto3.client("s3", endpoint_url=s3_server.endpoint, region_name="us-east-1")
    client.create_bucket(Bucket=bucket)
    return SimpleNamespace(client=client, bucket=bucket, env=env, endpoint=s3_server.endpoint, port=s3_server.port)


@pytest.fixture
def one_thread():
    """One torch thread in this process, as each client actor trains: the same kernels, the same floats."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def plugin_dir(tmp_path):
    """A folder for plugin modules written by the test, on sys.path; afterwards the registries, sys.path and
    sys.modules are as they were (a name a test registers never leaks into another test's registry)."""
    import raytune_fl.data.datasets as datasets
    import raytune_fl.plugins as plugins
    from raytune_fl.methods import METHODS
    from raytune_fl.models import MODELS

    DATASET_OPTIONS = datasets.DATASET_OPTIONS
    registries = (datasets.DATASETS, MODELS, METHODS)
    saved = [(dict(r._entries), dict(r._user)) for r in registries]
    options, path, modules, installed = dict(DATASET_OPTIONS), list(sys.path), set(sys.modules), plugins._installed
    folder = tmp_path / "plugins"
    folder.mkdir()
    sys.path.insert(0, str(folder))
    try:
        yield folder
    finally:
        for registry, (entries, user) in zip(registries, saved):
            for name in set(registry._user) - set(user):  # built-ins registered meanwhile stay
                del registry._entries[name]
            registry._user = user
            registry._entries.update({name: entries[name] for name in user})
        DATASET_OPTIONS.clear()
        DATASET_OPTIONS.update(options)
        sys.path[:] = path
        for name in set(sys.modules) - modules:
            if name.startswith("plug_"):  # the tests' plugin modules are named plug_*
                del sys.modules[name]
        plugins._installed = installed
