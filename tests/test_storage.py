"""`--storage` as a path or a URI: the resolver, and a study on a real S3 API (moto's server on loopback) that is
killed mid-trial and resumed from the bucket to the uninterrupted result."""

from __future__ import annotations

import os
import pickle
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import pyarrow.fs as pafs
import pytest
from mlflow.tracking import MlflowClient

from raytune_fl.cli import main
from raytune_fl.config import ConfigError, parse_space
from raytune_fl.runtime import cluster
from raytune_fl.runtime.storage import resolve_storage
from raytune_fl.tune.manifest import StudyManifest

from .conftest import REPO, tiny_space
from .test_resume import _kill_when, _space, _survivors, _trials

# what any S3-compatible endpoint needs, given the way every Ray node can get it: the environment
_FAKE_KEYS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def s3_server(tmp_path_factory):
    """moto's S3 server as a subprocess on 127.0.0.1 (a real HTTP S3 API), ended with the module."""
    moto = pytest.importorskip("moto", reason="the dev extra (moto[server]) is not installed")
    pytest.importorskip("boto3", reason="the dev extra (boto3) is not installed")
    if moto.__version__ in ("5.2.0", "5.2.1"):  # their CompleteMultipartUpload reply is refused by pyarrow
        pytest.fail(f"moto {moto.__version__} breaks pyarrow's uploads (getmoto/moto#10055): pip install -e .[dev]")
    port = _free_port()
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
    env = {**_FAKE_KEYS, "AWS_ENDPOINT_URL": s3_server.endpoint}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    bucket = "b" + request.node.name.lower().replace("_", "-")[:40].rstrip("-")
    client = boto3.client("s3", endpoint_url=s3_server.endpoint, region_name="us-east-1")
    client.create_bucket(Bucket=bucket)
    return SimpleNamespace(client=client, bucket=bucket, env=env, endpoint=s3_server.endpoint, port=s3_server.port)


def _keys(s3, prefix: str = "") -> list[str]:
    pages = s3.client.get_paginator("list_objects_v2").paginate(Bucket=s3.bucket, Prefix=prefix)
    return [item["Key"] for page in pages for item in page.get("Contents", [])]


# ---- the resolver ----------------------------------------------------------------------------------------------


def test_a_plain_path_is_a_local_directory_made_and_left_clean(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    storage = resolve_storage("results/study")
    assert isinstance(storage.filesystem, pafs.LocalFileSystem)
    assert storage.path == storage.uri == str(tmp_path / "results" / "study")
    assert (tmp_path / "results" / "study").is_dir() and not list((tmp_path / "results" / "study").iterdir())


def test_a_file_uri_is_the_same_local_directory(tmp_path):
    storage = resolve_storage(f"file://{tmp_path}/with%20space")  # a URI's escapes are undone
    assert isinstance(storage.filesystem, pafs.LocalFileSystem)
    assert storage.path == storage.uri == str(tmp_path / "with space")
    assert (tmp_path / "with space").is_dir()
    assert resolve_storage(storage) is storage  # already resolved: passed through, not probed again


@pytest.mark.parametrize("form", ["{tmp}/file/sub", "file://{tmp}/file/sub"])
def test_an_unwritable_path_names_storage(tmp_path, form):
    (tmp_path / "file").write_text("")
    with pytest.raises(ConfigError) as error:
        resolve_storage(form.format(tmp=tmp_path))
    assert str(error.value).startswith(f"--storage: cannot write to {form.format(tmp=tmp_path)}: ")


@pytest.mark.parametrize(
    ("uri", "expected"),
    [
        ("foo://bar/baz", "--storage: cannot use foo://bar/baz: Unrecognized filesystem type"),
        ("file://relative/dir", "--storage: cannot use file://relative/dir:"),
        ("s3://", "--storage: s3:// names no bucket"),
    ],
)
def test_an_unusable_uri_names_storage(uri, expected):
    with pytest.raises(ConfigError) as error:
        resolve_storage(uri)
    assert str(error.value).startswith(expected), error.value


def test_an_s3_uri_is_the_bucket_prefix_and_the_probe_leaves_nothing(s3):
    storage = resolve_storage(f"s3://{s3.bucket}/runs/a")
    assert isinstance(storage.filesystem, pafs.S3FileSystem)
    assert (storage.path, storage.uri) == (f"{s3.bucket}/runs/a", f"s3://{s3.bucket}/runs/a")
    assert not [key for key in _keys(s3) if ".write-test" in key]


def test_the_endpoint_also_goes_in_the_uri_query_and_is_never_shown(s3, monkeypatch):
    monkeypatch.delenv("AWS_ENDPOINT_URL")
    storage = resolve_storage(f"s3://{s3.bucket}/q?endpoint_override=127.0.0.1:{s3.port}&scheme=http")
    assert storage.uri == f"s3://{s3.bucket}/q"  # a query may hold keys: never printed or recorded
    storage.write_text(storage.join("x.txt"), "hello")
    assert s3.client.get_object(Bucket=s3.bucket, Key="q/x.txt")["Body"].read() == b"hello"


def test_a_missing_bucket_or_a_dead_endpoint_fails_naming_storage(s3, monkeypatch):
    with pytest.raises(ConfigError) as error:
        resolve_storage("s3://no-such-bucket/prefix")
    assert str(error.value).startswith("--storage: cannot write to s3://no-such-bucket/prefix: ")
    assert "no-such-bucket" in str(error.value).split(": ", 2)[2]  # the store's own reason

    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{_free_port()}")  # nothing listens there
    with pytest.raises(ConfigError) as error:
        resolve_storage(f"s3://{s3.bucket}/prefix")
    assert str(error.value).startswith(f"--storage: cannot write to s3://{s3.bucket}/prefix: ")


def test_tune_py_refuses_a_bad_bucket_before_ray_without_a_traceback(s3, tmp_path, capsys, monkeypatch):
    import yaml

    def refuse(address):
        raise AssertionError("main() went on to start Ray")

    monkeypatch.setattr(cluster, "start_ray", refuse)
    space = tmp_path / "tiny.yaml"
    space.write_text(yaml.safe_dump(tiny_space()))
    argv = ["--space", str(space), "--storage", "s3://no-such-bucket/x", "--mlflow-uri", f"sqlite:///{tmp_path}/m"]
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 2 and err.startswith("error: --storage: cannot write to s3://no-such-bucket/x"), err
    assert "Traceback" not in out + err


def test_the_study_record_lives_in_the_bucket_and_keeps_the_previous_one(s3):
    space = parse_space(tiny_space("kept"))
    first = StudyManifest.start(f"s3://{s3.bucket}/study", space, "sqlite:///x.db")
    first.variants["fedavg"] = {"experiment_path": "p", "parent_run_id": "r", "outcome": None}
    first.save()
    StudyManifest.start(f"s3://{s3.bucket}/study", space, "sqlite:///x.db")
    kept = [key for key in _keys(s3, "study/") if key.startswith("study/kept.study.2")]  # kept.study.<time>.json
    assert len(kept) == 1 and kept[0].endswith(".json")
    assert b'"parent_run_id": "r"' in s3.client.get_object(Bucket=s3.bucket, Key=kept[0])["Body"].read()
    assert StudyManifest.load(f"s3://{s3.bucket}/study", space, "sqlite:///x.db").variants == {}
    with pytest.raises(ConfigError, match=f"no study of 'kept' to resume under s3://{s3.bucket}/other"):
        StudyManifest.load(f"s3://{s3.bucket}/other", space, "sqlite:///x.db")


def test_the_filesystem_reaches_a_ray_worker_with_its_endpoint(s3, ray_cluster):
    """Trials get the filesystem pickled: the endpoint travels inside it; the worker brings only credentials."""
    storage = resolve_storage(f"s3://{s3.bucket}/pickled")

    @ray_cluster.remote(runtime_env={"env_vars": _FAKE_KEYS})  # the session's workers predate this test's env
    def write(filesystem: pafs.FileSystem, path: str) -> str:
        with filesystem.open_output_stream(path) as stream:
            stream.write(b"from a worker")
        return os.environ.get("AWS_ENDPOINT_URL", "")

    assert pickle.loads(pickle.dumps(storage.filesystem)).get_file_info(storage.path).type == pafs.FileType.Directory
    assert ray_cluster.get(write.remote(storage.filesystem, storage.join("w.txt")), timeout=120) == ""
    assert storage.read_text(storage.join("w.txt")) == "from a worker"


# ---- a study on S3, killed and resumed --------------------------------------------------------------------------


def _tune_py(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, str(REPO / "scripts" / "tune.py"), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        cwd=cwd,
        start_new_session=True,  # its own process group: a kill takes the Ray cluster it starts too
    )


@pytest.mark.slow
def test_a_study_on_s3_killed_mid_trial_resumes_to_the_uninterrupted_result(s3, ray_cluster, tmp_path, request):
    space = _space(tmp_path)
    reference_uri = f"sqlite:///{tmp_path / 'reference.db'}"  # uninterrupted, local storage, in this process
    assert main(["--space", str(space), "--storage", str(tmp_path / "ref"), "--mlflow-uri", reference_uri]) == 0

    uri, storage = f"sqlite:///{tmp_path / 'killed.db'}", f"s3://{s3.bucket}/studies"
    args = ["--space", str(space), "--storage", storage, "--mlflow-uri", uri, "--verbose"]  # a line per round
    ray_tmp = tempfile.mkdtemp(prefix="rs", dir="/tmp")  # short: Ray's socket paths have a length limit
    request.addfinalizer(lambda: shutil.rmtree(ray_tmp, ignore_errors=True))
    # the subprocess's private Ray cluster inherits the S3 environment, so its trial workers have it too
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_ADDRESS")} | {"RAY_TMPDIR": ray_tmp}
    workdir = tmp_path / "cwd"
    workdir.mkdir()
    before = _kill_when(_tune_py(args, env, workdir), "[full] trial 2/3 round 3/4", timeout_s=400)
    assert f"Ray Tune results:    {storage}" in before
    assert "=== variant full" in before  # fedavg had finished, full was mid-study
    assert _survivors(ray_tmp, wait_s=30) == []  # the killed driver's Ray processes went with it

    resumed = _tune_py([*args, "--resume"], env, workdir)
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

    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name("resumable").experiment_id])
    assert not [r for r in runs if r.info.status == "RUNNING"]
    assert any(r.data.tags.get("resumed") == "true" for r in runs)  # the interrupted trial kept its run
    reference = _trials(reference_uri)
    assert len(reference) == 4  # fedavg + 3 searched trials
    assert _trials(uri) == reference  # same trials, same configs, every round once, the same numbers

    keys = _keys(s3, "studies/")
    assert "studies/resumable.study.json" in keys
    experiments = {key.split("/")[1] for key in keys if key.endswith("/tuner.pkl")}
    assert sorted(e.rsplit("-", 2)[0] for e in experiments) == ["resumable-fedavg", "resumable-full"]
    assert any("/checkpoint_" in key and key.endswith("/federation.pt") for key in keys)
    assert not (workdir / "ray_results").exists()  # nothing of Tune's went to the default local directory
    assert [p.parent.parent for p in tmp_path.rglob("tuner.pkl")] == [tmp_path / "ref"] * 2  # the reference's only
