"""--mlflow-uri and MLflow's own environment variables checked before Ray starts (tracking/uri_check.py,
tracking/environment.py): a folder store refused with the sqlite:/// URI to give, a server probed on a real API
path where any answer but MLflow's Host-check 403 counts as reachable, a variable MLflow cannot read named first.
The Host-check refusal by a real `mlflow server`: tests/system/test_mlflow_server.py."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator

import pytest
from mlflow.environment_variables import MLFLOW_ENABLE_SYSTEM_METRICS_LOGGING, MLFLOW_HTTP_REQUEST_MAX_RETRIES

from raytune_fl.config import ConfigError
from raytune_fl.tracking.environment import check_mlflow_environment
from raytune_fl.tracking.uri_check import API_PROBE, check_tracking_uri

OPT_OUT = "MLFLOW_ALLOW_FILE_STORE"


@pytest.fixture
def no_opt_out(monkeypatch):
    monkeypatch.delenv(OPT_OUT, raising=False)
    return monkeypatch


def test_a_bare_folder_is_refused_with_the_sqlite_uri_to_give(tmp_path, no_opt_out):
    no_opt_out.chdir(tmp_path)
    with pytest.raises(ConfigError) as refused:
        check_tracking_uri("results")
    first = str(refused.value).splitlines()[0]
    assert first.startswith("--mlflow-uri 'results': a folder is MLflow's file store")
    assert f"give sqlite:///{tmp_path}/results/mlflow.db instead (create the folder first: mkdir -p " in first
    (tmp_path / "runs").mkdir()  # an existing folder: the database goes inside it, nothing to create
    with pytest.raises(ConfigError, match=rf"give sqlite:///{tmp_path}/runs/mlflow.db instead, or set {OPT_OUT}"):
        check_tracking_uri(f"file://{tmp_path}/runs", "MLFLOW_TRACKING_URI")
    assert not (tmp_path / "results").exists()  # nothing made


@pytest.mark.parametrize("value", ["true", "1", "True"])
def test_mlflows_own_switch_keeps_a_folder_store(tmp_path, no_opt_out, value):
    no_opt_out.setenv(OPT_OUT, value)
    check_tracking_uri(str(tmp_path / "mlruns"))


def test_a_folder_under_a_file_is_still_refused_as_such(tmp_path, no_opt_out):
    (tmp_path / "space.yaml").write_text("")
    with pytest.raises(ConfigError, match="space.yaml is a file, not a directory"):
        check_tracking_uri(str(tmp_path / "space.yaml" / "mlruns"))


@pytest.mark.parametrize(
    ("name", "value", "takes"),
    [
        (MLFLOW_ENABLE_SYSTEM_METRICS_LOGGING.name, "maybe", "true, false, 1 or 0 (any case)"),
        (MLFLOW_HTTP_REQUEST_MAX_RETRIES.name, "five", "a whole number"),
        ("MLFLOW_HTTP_REQUEST_TIMEOUT", "1m", "a whole number"),
    ],
)
def test_an_mlflow_variable_mlflow_cannot_read_is_named_first(monkeypatch, name, value, takes):
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError) as refused:
        check_mlflow_environment()
    assert str(refused.value).splitlines()[0] == (
        f"{name}={value!r}: MLflow reads this environment variable as {takes}; set such a value or unset it"
    )


def test_mlflow_variables_mlflow_reads_pass(monkeypatch):
    for name, value in [
        ("MLFLOW_ENABLE_SYSTEM_METRICS_LOGGING", "TRUE"),
        ("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "3"),
        ("MLFLOW_TRACKING_URI", "anything: a string is never misread"),
        ("MLFLOW_NOT_A_VARIABLE_OF_MLFLOW", "x"),  # not MLflow's: nothing reads it
    ]:
        monkeypatch.setenv(name, value)
    check_mlflow_environment()


class _Answer(http.server.BaseHTTPRequestHandler):
    """A server that is not MLflow's (an authenticating proxy): every GET answered with the class's status."""

    status = 401
    paths: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        self.paths.append(self.path)
        self.send_response(self.status)
        self.end_headers()
        self.wfile.write(b"Permission denied")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def answering() -> Iterator[tuple[str, type[_Answer]]]:
    handler = type("Answer", (_Answer,), {"paths": []})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", handler
    server.shutdown()
    server.server_close()
    thread.join(timeout=5)


@pytest.mark.parametrize("status", [401, 403, 404])
def test_a_server_that_answers_is_reachable_and_is_asked_a_real_api_path(answering, status):
    url, handler = answering
    handler.status = status  # 403 without MLflow's Host-check message: an authorisation, MLflow's to report
    check_tracking_uri(f"{url}/mlflow/")
    check_tracking_uri(f"http://user:secret@{url.removeprefix('http://')}")
    assert handler.paths == [f"/mlflow{API_PROBE}", API_PROBE]  # under the URI's own path prefix, no credentials
