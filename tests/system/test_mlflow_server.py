"""A real `mlflow server` (bound to 127.0.0.1): the same study logs to it through --mlflow-uri unchanged; its
--allowed-hosts admits only the address the study uses, so an other name for it is refused before Ray starts."""

from __future__ import annotations

import socket

import optuna
import pytest
import yaml
from mlflow.tracking import MlflowClient

from raytune_fl.cli import main
from raytune_fl.config import ConfigError
from raytune_fl.tracking.uri_check import check_tracking_uri
from tests.support import tiny_space
from tests.support.mlflow_servers import start_mlflow_server, stop_mlflow_server


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """One server for the module (it takes ~15 s to answer): its URL and the folder it stores into. Its Host check
    (MLflow 3.5+) admits 127.0.0.1:PORT alone, the address every test here uses."""
    root = tmp_path_factory.mktemp("mlflow-server")
    process, url = start_mlflow_server(root, allowed_hosts="127.0.0.1:{port}")
    yield url, root
    stop_mlflow_server(process)


@pytest.fixture
def mlflow_server(served):
    return served[0]


def test_study_logs_to_a_server(ray_cluster, mlflow_server, served, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # where the Optuna study goes when MLflow is a server: <cwd>/optuna.db
    data = tiny_space("served")
    data["base"]["rounds"] = 2
    data["tune"]["num_samples"] = 2
    space = tmp_path / "served.yaml"
    space.write_text(yaml.safe_dump(data))
    args = [
        "--space",
        str(space),
        "--mlflow-uri",
        mlflow_server,
        "--storage",
        str(tmp_path / "ray"),
        "--variants",
        "full",
    ]
    assert main(args) == 0
    client = MlflowClient(mlflow_server)
    experiment = client.get_experiment_by_name("served")
    runs = client.search_runs([experiment.experiment_id])
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert len(runs) == 3 and len(children) == 2
    assert all(r.info.status == "FINISHED" for r in runs)
    # ASHA (grace 1) may stop one trial after round 1; every step is a round, and one trial ran both
    steps = [[m.step for m in client.get_metric_history(c.info.run_id, "val_acc")] for c in children]
    assert [1, 2] in steps and all(s == list(range(1, len(s) + 1)) for s in steps)
    artifacts = {a.path for a in client.list_artifacts(children[0].info.run_id)}
    assert artifacts == {
        "round_metrics.parquet",
        "classifier_spectrum.parquet",
        "client_accuracy.parquet",
        "client_rounds.parquet",
    }
    # artifacts are proxied: the client uploads through the server, which writes them to --artifacts-destination,
    # so no node needs a filesystem shared with the server
    assert all(r.info.artifact_uri.startswith("mlflow-artifacts:/") for r in runs), [r.info.artifact_uri for r in runs]
    stored = {p.name for p in (served[1] / "artifacts").rglob("*.parquet")}
    assert {"round_metrics.parquet", "client_rounds.parquet", "partition.parquet"} <= stored, stored
    assert not (tmp_path / "mlruns").exists() and not list(tmp_path.glob("ray/**/mlruns"))
    optuna_db = f"sqlite:///{tmp_path / 'optuna.db'}"
    assert [s.study_name for s in optuna.get_all_study_summaries(optuna_db)] == ["served-full"]


def test_a_host_the_server_does_not_allow_is_refused_before_ray_with_the_flag_to_set(mlflow_server, tmp_path, capsys):
    port = int(mlflow_server.rsplit(":", 1)[1])
    check_tracking_uri(mlflow_server)  # the allowed address: an API call answered
    other = f"http://localhost:{port}"  # the same server under a name its --allowed-hosts lacks: every call is a 403
    with pytest.raises(ConfigError) as refused:
        check_tracking_uri(other)
    assert str(refused.value).splitlines()[0] == (
        f"--mlflow-uri {other}: the tracking server answers 403 'Invalid Host header' (MLflow 3.5+ checks the Host "
        f"header, and localhost:{port} is not among its allowed hosts); restart it with --allowed-hosts "
        f"localhost:{port} (or MLFLOW_SERVER_ALLOWED_HOSTS), listing every address the driver and the workers use"
    )
    space = tmp_path / "refused.yaml"  # the command: exit 2 before Ray starts, nothing written
    space.write_text(yaml.safe_dump(tiny_space("refused")))
    assert main(["--space", str(space), "--mlflow-uri", other, "--storage", str(tmp_path / "ray")]) == 2
    assert not (tmp_path / "ray").exists()
    assert f"error: --mlflow-uri {other}: the tracking server answers 403" in capsys.readouterr().err


def _external_ip() -> str | None:
    """This machine's address on its outward interface (no packet is sent), or None if it has only loopback."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))
        except OSError:
            return None
        ip = s.getsockname()[0]
    return None if ip.startswith("127.") else ip


def test_the_server_listens_on_loopback_only(mlflow_server):
    port = int(mlflow_server.rsplit(":", 1)[1])
    socket.create_connection(("127.0.0.1", port), timeout=5).close()
    ip = _external_ip()
    if ip is None:
        pytest.skip("no non-loopback interface to try")
    with pytest.raises(OSError):  # refused: MLflow servers have no authentication
        socket.create_connection((ip, port), timeout=5).close()
