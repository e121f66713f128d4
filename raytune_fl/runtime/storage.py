"""`--storage`: where Ray Tune results and the study record live, a path or a URI every Ray node can reach.

A plain path or a file:// URI is a local directory (on a cluster: shared storage such as NFS, mounted at the same
path on every node). s3://, gs://, hdfs://... go through pyarrow's filesystems. Tune is handed the filesystem
object itself (RunConfig / Tuner.restore `storage_filesystem`): Ray pickles it to the trials' worker processes,
and the endpoint it was made with (URI query or environment, e.g. AWS_ENDPOINT_URL) travels inside it;
credentials do not, so every node needs its own (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, ~/.aws, a role).
"""

from __future__ import annotations

import errno
import os
import posixpath
import re
import tempfile
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs

from raytune_fl.config import ConfigError

PROBE_TIMEOUT_S = 60.0  # an unreachable GCS endpoint retries for many minutes; say so before Ray starts instead
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")  # needs "://": a directory named "a:b" stays a directory


@dataclass(frozen=True)
class Storage:
    filesystem: pafs.FileSystem
    path: str  # within `filesystem`: an absolute local path, or bucket/prefix
    uri: str  # for people: the local path, or scheme://bucket/prefix (never the query: it may hold keys)

    @property
    def is_local(self) -> bool:
        return isinstance(self.filesystem, pafs.LocalFileSystem)

    def join(self, *parts: str) -> str:
        return posixpath.join(self.path, *parts)

    def show(self, path: str) -> str:
        """A path within the filesystem as a person would write it."""
        return path if self.is_local else f"{self.uri.split('://', 1)[0]}://{path}"

    def is_file(self, path: str) -> bool:
        return self.filesystem.get_file_info(path).type == pafs.FileType.File

    def mtime(self, path: str) -> float:
        return self.filesystem.get_file_info(path).mtime.timestamp()

    def read_text(self, path: str) -> str:
        with self.filesystem.open_input_stream(path) as stream:
            return stream.read().decode()

    def write_text(self, path: str, text: str) -> None:
        # whole or not at all, so a kill mid-write never leaves half a file: locally written aside, then renamed
        # over; an object store shows an object only once its upload completed
        target = f"{path}.tmp" if self.is_local else path
        with self.filesystem.open_output_stream(target) as stream:
            stream.write(text.encode())
        if target != path:
            self.filesystem.move(target, path)

    def move(self, source: str, destination: str) -> None:
        self.filesystem.move(source, destination)


def resolve_storage(text: str | Path | Storage) -> Storage:
    """`--storage` as a filesystem and a path in it, made and checked writable; errors name `--storage`."""
    return _resolve(text, create=True)


def check_storage(text: str | Path | Storage) -> Storage:
    """`resolve_storage`'s checks, leaving nothing behind: a local directory that does not exist yet is not made
    (its nearest existing parent must take a new folder); `make_storage` makes it once every check passed. A
    bucket is write-probed as by `resolve_storage` (the probe object deleted)."""
    return _resolve(text, create=False)


def make_storage(storage: Storage) -> Storage:
    """The checked local directory made (an object store has none to make); errors name `--storage`."""
    if storage.is_local:
        try:
            Path(storage.path).mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise ConfigError(f"--storage: cannot write to {storage.uri}: {error.strerror}") from None
    return storage


def check_creatable(path: Path) -> None:
    """That the directory `path` exists and takes a file, or could be made: its nearest existing parent is a
    directory that takes a new folder. Probes leave nothing behind; raises OSError."""
    path = path.absolute()
    existing = path
    while not existing.exists() and existing.parent != existing:
        existing = existing.parent
    if existing == path:
        probe = path / f".write-test-{uuid.uuid4().hex}"
        probe.write_text("")  # a file in its place fails: Not a directory
        probe.unlink()
        return
    if not existing.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(existing))
    os.rmdir(tempfile.mkdtemp(prefix=".write-test-", dir=existing))


def _resolve(text: str | Path | Storage, create: bool) -> Storage:
    if isinstance(text, Storage):
        return text
    text = str(text)
    scheme = _SCHEME.match(text)
    if scheme is None:
        return _local(Path(text), text, create)
    try:  # pyarrow parses the URI: percent-escapes, query options such as ?endpoint_override=host:port
        filesystem, path = pafs.FileSystem.from_uri(text)
    except (pa.ArrowException, OSError, ValueError) as error:
        raise ConfigError(
            f"--storage: cannot use {_without_query(text)}: {error} "
            "(expected a directory, or a file://, s3://, gs:// or hdfs:// URI)"
        ) from None
    if isinstance(filesystem, pafs.LocalFileSystem):
        return _local(Path(path), text, create)
    path = path.rstrip("/")
    if not path:
        raise ConfigError(f"--storage: {_without_query(text)} names no bucket; e.g. s3://bucket/ray_results")
    storage = Storage(filesystem, path, f"{scheme[1]}://{path}")
    _probe(storage)
    return storage


def _local(path: Path, given: str, create: bool = True) -> Storage:
    try:
        if create:
            path.mkdir(parents=True, exist_ok=True)
            probe = path / ".write-test"
            probe.write_text("")
            probe.unlink()
        else:
            check_creatable(path)
    except OSError as error:
        raise ConfigError(f"--storage: cannot write to {given}: {error.strerror}") from None
    return Storage(pafs.LocalFileSystem(), str(path.resolve()), str(path.resolve()))


def _probe(storage: Storage) -> None:
    """Write and delete a small object: a wrong bucket, endpoint or credentials fail here, not in Ray."""
    failure: list[BaseException] = []

    def write_and_delete() -> None:
        probe = storage.join(f".write-test-{uuid.uuid4().hex}")  # unique: studies may share a bucket
        try:
            if storage.filesystem.type_name not in ("s3", "gcs"):  # object stores have no directories to make
                storage.filesystem.create_dir(storage.path)
            with storage.filesystem.open_output_stream(probe) as stream:
                stream.write(b"ok")
            storage.filesystem.delete_file(probe)
        except Exception as error:  # each filesystem fails with its own exception types
            failure.append(error)

    worker = threading.Thread(target=write_and_delete, daemon=True)  # daemon: a hung probe does not block exit
    worker.start()
    worker.join(PROBE_TIMEOUT_S)
    if worker.is_alive():
        raise ConfigError(
            f"--storage: {storage.uri} did not answer within {PROBE_TIMEOUT_S:.0f} s (endpoint, network?)"
        )
    if failure:
        first = str(failure[0]).strip().splitlines()[0] if str(failure[0]).strip() else type(failure[0]).__name__
        raise ConfigError(f"--storage: cannot write to {storage.uri}: {first}")


def _without_query(uri: str) -> str:
    return uri.split("?", 1)[0]
