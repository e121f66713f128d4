"""`--storage` as a path or a URI: the resolver, and a study on a real S3 API (moto's server on loopback) that is
killed mid-trial and resumed from the bucket to the uninterrupted result."""

from __future__ import annotations

import os
import pickle

import pyarrow.fs as pafs
import pytest

from raytune_fl.cli import main
from raytune_fl.config import ConfigError, parse_space
from raytune_fl.runtime import cluster
from raytune_fl.runtime.storage import check_storage, make_storage, resolve_storage
from raytune_fl.tune.manifest import StudyManifest
from tests.support import tiny_space
from tests.support.s3 import FAKE_KEYS, bucket_keys, free_port

# what any S3-compatible endpoint needs, given the way every Ray node can get it: the environment


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


def test_check_storage_makes_nothing_and_make_storage_makes_the_checked_folder(tmp_path):
    storage = check_storage(f"{tmp_path}/results/study")  # checked before the command's other checks
    assert storage.path == str(tmp_path / "results" / "study") and list(tmp_path.iterdir()) == []
    assert make_storage(storage) is storage and (tmp_path / "results" / "study").is_dir()
    assert check_storage(f"file://{tmp_path}/results/study").path == storage.path  # exists: probed inside
    assert list((tmp_path / "results" / "study").iterdir()) == []  # the probes leave nothing


@pytest.mark.parametrize("check", [resolve_storage, check_storage])
@pytest.mark.parametrize("form", ["{tmp}/file/sub", "file://{tmp}/file/sub"])
def test_an_unwritable_path_names_storage(tmp_path, form, check):
    (tmp_path / "file").write_text("")
    with pytest.raises(ConfigError) as error:
        check(form.format(tmp=tmp_path))
    assert str(error.value).startswith(f"--storage: cannot write to {form.format(tmp=tmp_path)}: ")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


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
    assert not [key for key in bucket_keys(s3) if ".write-test" in key]


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

    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{free_port()}")  # nothing listens there
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
    kept = [key for key in bucket_keys(s3, "study/") if key.startswith("study/kept.study.2")]  # kept.study.<time>.json
    assert len(kept) == 1 and kept[0].endswith(".json")
    assert b'"parent_run_id": "r"' in s3.client.get_object(Bucket=s3.bucket, Key=kept[0])["Body"].read()
    assert StudyManifest.load(f"s3://{s3.bucket}/study", space, "sqlite:///x.db").variants == {}
    with pytest.raises(ConfigError, match=f"no study of 'kept' to resume under s3://{s3.bucket}/other"):
        StudyManifest.load(f"s3://{s3.bucket}/other", space, "sqlite:///x.db")


def test_the_filesystem_reaches_a_ray_worker_with_its_endpoint(s3, ray_cluster):
    """Trials get the filesystem pickled: the endpoint travels inside it; the worker brings only credentials."""
    storage = resolve_storage(f"s3://{s3.bucket}/pickled")

    @ray_cluster.remote(runtime_env={"env_vars": FAKE_KEYS})  # the session's workers predate this test's env
    def write(filesystem: pafs.FileSystem, path: str) -> str:
        with filesystem.open_output_stream(path) as stream:
            stream.write(b"from a worker")
        return os.environ.get("AWS_ENDPOINT_URL", "")

    assert pickle.loads(pickle.dumps(storage.filesystem)).get_file_info(storage.path).type == pafs.FileType.Directory
    assert ray_cluster.get(write.remote(storage.filesystem, storage.join("w.txt")), timeout=120) == ""
    assert storage.read_text(storage.join("w.txt")) == "from a worker"


# ---- a study on S3, killed and resumed --------------------------------------------------------------------------
