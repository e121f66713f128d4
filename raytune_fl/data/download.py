"""Opt-in downloads of a dataset's official files into its ``root`` (``dataset_options: {download: true}``).

Off by default: a run reads ``root`` and never reaches the network unless asked. When asked and a file the loader
reads is missing, the files are fetched once per node: under a file lock in the folder they go to (trials and
actors on one node wait for the first; each then finds the files and fetches nothing), each to a temporary name,
checked against its md5 (the official one, taken from torchvision's class attributes, or a mirror's from
``download_md5``), then renamed, so a killed download never leaves a file that looks complete. Archives are unpacked
the same way. A download that fails removes what it wrote. The standard library does the work (urllib, tarfile,
zipfile, gzip): importing this module stays light.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import http.client
import os
import re
import shutil
import sys
import tarfile
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from raytune_fl.errors import RaytuneFLError
from raytune_fl.paths import expand_home

TIMEOUT_S = 60.0  # per socket operation: a stalled server fails the download instead of hanging a trial
CHUNK = 1 << 20
URL_SCHEMES = ("http", "https", "ftp", "file")
MD5 = re.compile(r"[0-9a-fA-F]{32}")
OFFICIAL = "the official md5"
GIVEN = "dataset_options.download_md5"


class DownloadOptions(BaseModel):
    """The download settings every downloadable dataset takes (its options model extends this one)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    download: bool = Field(
        False,
        description="fetch the official files into `root` where they are missing, checked against their md5s, "
        "once per node (off: root is only read, so a run never reaches the network)",
    )
    download_url: str | None = Field(
        None,
        description="a mirror to fetch from instead of the official site: a base URL each file's official name "
        "is appended to, as torchvision's MNIST mirrors (http, https, ftp or file); needs download: true",
    )
    download_md5: str | dict[str, str] | None = Field(
        None,
        description="the md5 of a mirror's files where they differ from the official ones: one md5 for a "
        "dataset of one file, else {file name: md5} (files not named keep their official md5); needs download_url",
    )

    @field_validator("download_url")
    @classmethod
    def _a_mirror(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None:
            return None
        if not info.data.get("download"):
            raise ValueError("a mirror is read only when downloading: set dataset_options.download: true too")
        value = expand_home(value)  # file:~/mirror, as the commands' path options
        parts = urllib.parse.urlsplit(value)
        if parts.scheme not in URL_SCHEMES or (parts.scheme != "file" and not parts.netloc):
            raise ValueError("must be an http, https, ftp or file URL of the folder holding the files")
        return value

    @field_validator("download_md5")
    @classmethod
    def _a_mirrors_md5(cls, value: str | dict[str, str] | None, info: ValidationInfo) -> str | dict[str, str] | None:
        if value is None:
            return None
        if "download_url" in info.data and info.data["download_url"] is None:  # absent: download_url was refused
            raise ValueError(
                "checks a mirror's files: set dataset_options.download_url too (the official files are checked "
                "against their official md5s)"
            )
        md5s = [value] if isinstance(value, str) else list(value.values())
        bad = [md5 for md5 in md5s if not MD5.fullmatch(md5)]
        if bad:
            raise ValueError(f"{bad[0]!r} is not an md5 (32 hexadecimal digits, as md5sum prints it)")
        return value.lower() if isinstance(value, str) else {name: md5.lower() for name, md5 in value.items()}


@dataclass(frozen=True)
class Resource:
    """One file to fetch: its official name and md5, and the official URLs to try in turn (torchvision's)."""

    filename: str
    md5: str
    urls: tuple[str, ...]


Unpack = Literal["none", "gunzip", "untar", "unzip_gunzip"]


@dataclass(frozen=True)
class Plan:
    """What a dataset fetches: its files, the folder under root they go to, and how they are unpacked there
    (none: read as fetched; gunzip: each X.gz beside it as X; untar: the archive's tree; unzip_gunzip: EMNIST's
    zip of .gz files, each gunzipped into the folder)."""

    folder: str
    resources: tuple[Resource, ...]
    unpack: Unpack = "none"


class DownloadError(OSError, RaytuneFLError):
    """No URL served the file (offline, refused, not found, cut short)."""


class ChecksumError(ValueError, RaytuneFLError):
    """A fetched file's md5 is not the expected one."""


class FormatError(ValueError, RaytuneFLError):
    """A fetched file is not of the kind its name says (a mirror's error page saved under an archive's name)."""


# what a file of each kind begins with: a mirror's HTML page under an archive's name is caught as it arrives, not
# left in root for a reader to fail on with a puzzling error
SIGNATURES: dict[str, tuple[str, tuple[bytes, ...]]] = {
    ".gz": ("gzip file", (b"\x1f\x8b",)),
    ".tgz": ("gzip file", (b"\x1f\x8b",)),
    ".bz2": ("bzip2 file", (b"BZh",)),
    ".zip": ("zip archive", (b"PK\x03\x04", b"PK\x05\x06")),  # the second: an empty zip
    ".mat": ("MATLAB file", (b"MATLAB",)),  # v5 and v7.3 (HDF5) alike start with this text header
}
HEAD = 32  # bytes of a wrong file quoted in the message


def not_its_kind(filename: str, head: bytes) -> str | None:
    """Why a file named `filename` that begins with `head` is not what its name says ("not a bzip2 file: it begins
    with b'<html>...'"), or None: it is, or its suffix has no known signature."""
    for suffix, (kind, magics) in SIGNATURES.items():
        if filename.endswith(suffix):
            if head.startswith(magics):
                return None
            return f"not a {kind}: it begins with {head[:HEAD]!r}" if head else f"not a {kind}: it is empty"
    return None


def _head(path: Path) -> bytes:
    with path.open("rb") as f:
        return f.read(HEAD)


def mirror_url(base: str, filename: str) -> str:
    """`filename` on the mirror `base` (a URL that already names the file is taken as it is)."""
    if urllib.parse.urlsplit(base).path.rsplit("/", 1)[-1] == filename:
        return base
    return f"{base.rstrip('/')}/{filename}"


def ensure_files(
    dataset: str,
    root: str | None,
    targets: Sequence[str],
    options: DownloadOptions,
    plan: Callable[[], Plan],
    layout: str,
) -> None:
    """With `options.download`, fetch `dataset` into `root` when one of `targets` (the paths under root its loader
    reads) is missing; nothing otherwise. `plan` is called only then (it may import torchvision); `layout` says,
    in an error, what root must hold for the files to be put there by hand."""
    if not options.download:
        return
    if root is None:
        raise FileNotFoundError(f"{dataset}: download: true needs `root`, the folder to download into; set base.root")
    base = Path(root).expanduser().resolve()
    _remove_wrong_kind(dataset, base, targets)
    if _present(base, targets):
        return
    fetch = plan()
    md5s = expected_md5s(dataset, fetch, options.download_md5)  # refused before anything is written
    written = _Written()
    folder = base / fetch.folder
    try:
        _writable(dataset, folder, written)
        lock = folder / f".{fetch.resources[0].filename}.lock"
        try:
            with _locked(lock):
                if not _present(base, targets):  # else another process fetched them while this one waited
                    written.mkdirs(folder)  # again: a failed fetch before this one may have removed it
                    _clear_leftovers(folder)
                    _fetch_all(dataset, fetch, folder, options.download_url, md5s, written, layout)
                    _check_complete(dataset, base, targets, fetch, options.download_url, layout)
        finally:
            # after the release (a soft lock removes its own marker there). A process still waiting on the removed
            # file may then run beside a newcomer: only after a failed fetch, and safe, as every file is renamed
            # into place whole; the lock only spares the network a second copy
            lock.unlink(missing_ok=True)
    except BaseException:  # Ctrl-C too: nothing half-written stays behind
        written.undo()
        raise


def _writable(dataset: str, folder: Path, written: _Written) -> None:
    try:
        written.mkdirs(folder)
    except OSError as error:
        why = error.strerror or str(error)
    else:
        if os.access(folder, os.W_OK):
            return
        why = "not writable"
    raise DownloadError(f"{dataset}: cannot download into {folder} ({why}); set base.root to a folder you can write to")


def expected_md5s(dataset: str, plan: Plan, given: str | dict[str, str] | None) -> dict[str, tuple[str, str]]:
    """file name -> (md5, where it comes from): the official ones, overridden by `download_md5`."""
    md5s = {resource.filename: (resource.md5, OFFICIAL) for resource in plan.resources}
    if given is None:
        return md5s
    names = ", ".join(md5s)
    if isinstance(given, str):
        if len(md5s) != 1:
            raise ValueError(
                f"{GIVEN}: {dataset} downloads {len(md5s)} files ({names}); give one md5 per file: {{file name: md5}}"
            )
        given = {next(iter(md5s)): given}
    unknown = sorted(set(given) - set(md5s))
    if unknown:
        raise ValueError(f"{GIVEN}: {unknown[0]!r} is not a file {dataset} downloads; its files: {names}")
    return md5s | {name: (md5, GIVEN) for name, md5 in given.items()}


def _remove_wrong_kind(dataset: str, base: Path, targets: Sequence[str]) -> None:
    """Remove the files under root that download: true would read and that are not what their names say (left by
    a mirror before this check, or put there by hand), so they are fetched again; each is named on stderr."""
    for target in targets:
        path = base / target
        why = not_its_kind(path.name, _head(path)) if path.is_file() else None
        if why is not None:
            path.unlink()
            say(f"{dataset}: removed {path} ({why}); fetching it again")


def _present(base: Path, targets: Sequence[str]) -> bool:
    return all((base / target).exists() for target in targets)


def _check_complete(
    dataset: str, base: Path, targets: Sequence[str], plan: Plan, mirror: str | None, layout: str
) -> None:
    missing = [target for target in targets if not (base / target).exists()]
    if missing:
        source = f"the mirror {mirror}" if mirror else "the official files"
        raise ValueError(
            f"{dataset}: {base / missing[0]} is missing after fetching {', '.join(r.filename for r in plan.resources)} "
            f"from {source}; expected {layout}"
        )


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    from filelock import FileLock  # a dependency of Ray's, imported only when something is fetched

    with FileLock(str(path)):
        yield


class _Written:
    """What one download created under root (folders, files), removed again when it fails."""

    def __init__(self) -> None:
        self.paths: list[Path] = []

    def mkdirs(self, folder: Path) -> None:
        missing = [p for p in (folder, *folder.parents) if not p.exists()][::-1]
        for path in missing:
            try:
                path.mkdir()
            except FileExistsError:  # made meanwhile by another process: not ours to remove
                continue
            self.paths.append(path)

    def replace(self, source: Path, target: Path) -> None:
        """Rename `source` to `target` (atomic on one file system), recording `target` where it is new."""
        new = not target.exists()
        os.replace(source, target)
        if new:
            self.paths.append(target)

    def undo(self) -> None:
        for path in reversed(self.paths):
            with contextlib.suppress(OSError):
                if path.is_dir():
                    shutil.rmtree(path)
                else:
                    path.unlink(missing_ok=True)
        self.paths.clear()


def _clear_leftovers(folder: Path) -> None:
    """Temporary files and folders a killed download left (the lock is held: none is another's in progress)."""
    for path in folder.glob(".*.part"):
        path.unlink(missing_ok=True)
    for path in folder.glob(".unpack-*"):
        shutil.rmtree(path, ignore_errors=True)


def _fetch_all(
    dataset: str,
    plan: Plan,
    folder: Path,
    mirror: str | None,
    md5s: dict[str, tuple[str, str]],
    written: _Written,
    layout: str,
) -> None:
    for resource in plan.resources:
        urls = (mirror_url(mirror, resource.filename),) if mirror else resource.urls
        md5, origin = md5s[resource.filename]
        target = folder / resource.filename
        found = file_md5(target) if target.is_file() else None
        if found == md5:
            why = not_its_kind(target.name, _head(target))
            if why is None:
                continue  # fetched before (its unpacking cut short) or put there by hand: intact, not fetched again
            target.unlink()
            raise FormatError(_wrong_kind(dataset, target.name, str(target.parent), why, origin))
        _fetch(dataset, target, urls, (md5, origin, found), written, layout)
    UNPACKERS[plan.unpack](plan, folder, written)


def file_md5(path: Path) -> str:
    digest = hashlib.md5(usedforsecurity=False)
    with path.open("rb") as f:
        while chunk := f.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _fetch(
    dataset: str,
    target: Path,
    urls: Sequence[str],
    md5s: tuple[str, str, str | None],
    written: _Written,
    layout: str,
) -> None:
    """`target` from the first of `urls` that serves it whole, checked against its md5; `md5s` is (the expected
    md5, where it comes from, the md5 of a file already at `target`, or None)."""
    md5, origin, found = md5s
    failures = []
    for url in urls:
        say(f"downloading {dataset} from {url} into {target.parent}")
        try:
            part, actual = _stream(url, target)
        except _Failed as error:
            failures.append(f"{url} ({error})")
            continue
        if actual != md5:
            part.unlink(missing_ok=True)
            fix = (
                "check the md5 you gave and the mirror's file"
                if origin == GIVEN
                else f"a mirror serving other files than the official ones needs their md5 in {GIVEN}"
            )
            raise ChecksumError(
                f"{dataset}: {target.name} from {url} has md5 {actual}, expected {md5} ({origin}); the file was "
                f"removed; {fix}"
            )
        why = not_its_kind(target.name, _head(part))
        if why is not None:
            part.unlink(missing_ok=True)
            raise FormatError(_wrong_kind(dataset, target.name, url, why, origin))
        written.replace(part, target)
        return
    there = f" (the {target.name} there has md5 {found}, not {md5}, {origin})" if found else ""
    raise DownloadError(
        f"{dataset}: could not download {target.name} from {', '.join(failures)}; put the files under "
        f"{target.parent} as torchvision lays them out ({layout}), or set dataset_options.download_url to a "
        f"reachable mirror{there}"
    )


def _wrong_kind(dataset: str, filename: str, source: str, why: str, origin: str) -> str:
    """The message for a file that matched its md5 yet is not what its name says: only a given md5 can match it."""
    md5 = f"{GIVEN} holds this wrong file's md5" if origin == GIVEN else f"it matched {origin}"
    return (
        f"{dataset}: {filename} from {source} is {why}; the file was removed; {md5}: set "
        "dataset_options.download_url to a mirror serving the real file (an error page or a login page is served "
        f"with status 200 by some sites), and {GIVEN} to the real file's md5, or leave {GIVEN} unset to check the "
        "official one"
    )


class _Failed(RaytuneFLError):
    """Why one URL did not serve its file."""


def _stream(url: str, target: Path) -> tuple[Path, str]:
    """`url`'s body in a temporary file beside `target`, and its md5; nothing left behind on failure."""
    request = urllib.request.Request(url, headers={"User-Agent": "raytune-fl"})
    try:
        response = urllib.request.urlopen(request, timeout=TIMEOUT_S)
    except urllib.error.HTTPError as error:
        raise _Failed(f"HTTP {error.code} {error.reason}") from None
    except urllib.error.URLError as error:
        raise _Failed(str(error.reason)) from None
    except (OSError, http.client.HTTPException, ValueError) as error:  # ValueError: a malformed URL
        raise _Failed(str(error) or type(error).__name__) from None
    fd, name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".part")
    part = Path(name)
    try:
        with response, os.fdopen(fd, "wb") as out:
            return part, _copy(response, out, target.name)
    except (OSError, http.client.HTTPException) as error:
        part.unlink(missing_ok=True)
        raise _Failed(str(error) or type(error).__name__) from None
    except BaseException:
        part.unlink(missing_ok=True)
        raise


def _copy(response: http.client.HTTPResponse, out, filename: str) -> str:
    length = response.headers.get("Content-Length")
    total = int(length) if length and length.isdigit() else None
    digest = hashlib.md5(usedforsecurity=False)
    progress = Progress(filename, total)
    done = 0
    while chunk := response.read(CHUNK):
        out.write(chunk)
        digest.update(chunk)
        done += len(chunk)
        progress.update(done)
    if total is not None and done < total:
        raise _Failed(f"the connection closed after {done} of {total} bytes")
    progress.finish(done)
    return digest.hexdigest()


def say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


class Progress:
    """One file's progress on stderr. Nothing while a download is younger than `quiet_s` (a small one shows only
    its "downloading" line); then a line at each further tenth of the file, or after `every_s` without one (or
    where the size is unknown), never two within `spacing_s`; and a closing line where any was shown."""

    def __init__(
        self,
        filename: str,
        total: int | None,
        clock: Callable[[], float] = time.monotonic,
        quiet_s: float = 3.0,
        every_s: float = 10.0,
        spacing_s: float = 1.0,
    ) -> None:
        self.filename, self.total, self.clock = filename, total, clock
        self.quiet_s, self.every_s, self.spacing_s = quiet_s, every_s, spacing_s
        self.start = self.last = clock()
        self.tenth = 0  # the last tenth shown
        self.lines = 0

    def update(self, done: int) -> None:
        now = self.clock()
        if now - self.start < self.quiet_s or now - self.last < self.spacing_s:
            return
        tenth = done * 10 // self.total if self.total else 0
        if tenth <= self.tenth and now - self.last < self.every_s:
            return
        self.tenth, self.last, self.lines = tenth, now, self.lines + 1
        rate = done / 1e6 / max(now - self.start, 1e-9)
        size = f"{done / 1e6:.1f} MB"
        if self.total:
            size = f"{done / 1e6:.1f} of {self.total / 1e6:.1f} MB ({100 * done // self.total} %)"
        say(f"  {self.filename}: {size}, {rate:.1f} MB/s")

    def finish(self, done: int) -> None:
        if self.lines:
            say(f"  {self.filename}: {done / 1e6:.1f} MB in {self.clock() - self.start:.0f} s")


# ---------------------------------------------------------------------------------------------------- unpacking


def _scratch(folder: Path) -> Path:
    """A temporary folder beside the files: its contents are renamed into place (one file system)."""
    return Path(tempfile.mkdtemp(dir=folder, prefix=".unpack-"))


def _gunzip(source: Path, target: Path, written: _Written) -> None:
    fd, name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as out, gzip.open(source) as packed:
            shutil.copyfileobj(packed, out, CHUNK)
    except BaseException:
        Path(name).unlink(missing_ok=True)
        raise
    written.replace(Path(name), target)


def _unreadable(path: Path, error: Exception, kind: str) -> ValueError:
    return ValueError(f"{path.name} under {path.parent} is not a readable {kind} ({error})")


def _none(plan: Plan, folder: Path, written: _Written) -> None:
    return


def _gunzip_each(plan: Plan, folder: Path, written: _Written) -> None:
    """torchvision's MNIST layout: each X.gz stays, X beside it."""
    for resource in plan.resources:
        source = folder / resource.filename
        try:
            _gunzip(source, folder / resource.filename.removesuffix(".gz"), written)
        except (OSError, EOFError, gzip.BadGzipFile) as error:
            raise _unreadable(source, error, "gzip file") from None


def _untar(plan: Plan, folder: Path, written: _Written) -> None:
    """The archive's tree under folder (the archive stays, as torchvision leaves it)."""
    scratch = _scratch(folder)
    try:
        for resource in plan.resources:
            source = folder / resource.filename
            try:
                with tarfile.open(source) as archive:
                    _extract(archive, scratch)
            except (tarfile.TarError, OSError, EOFError) as error:
                raise _unreadable(source, error, "tar archive") from None
        _move_tree(scratch, folder, written)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _extract(archive: tarfile.TarFile, into: Path) -> None:
    """Every member under `into`, none outside it (tarfile's "data" filter, or the same check where Python lacks
    it: before 3.10.12 and 3.11.4)."""
    if hasattr(tarfile, "data_filter"):
        archive.extractall(into, filter="data")
        return
    for member in archive.getmembers():
        inside = (into / member.name).resolve().is_relative_to(into.resolve())
        if not inside or member.issym() or member.islnk() or not (member.isfile() or member.isdir()):
            raise tarfile.TarError(f"member {member.name!r} is not a plain file or folder inside the archive")
    archive.extractall(into)


def _unzip_gunzip(plan: Plan, folder: Path, written: _Written) -> None:
    """EMNIST: the zip holds gzip/<file>.gz; each is gunzipped into folder and the zip's tree dropped."""
    scratch = _scratch(folder)
    try:
        source = folder / plan.resources[0].filename
        try:
            with zipfile.ZipFile(source) as archive:
                archive.extractall(scratch)
        except (zipfile.BadZipFile, OSError) as error:
            raise _unreadable(source, error, "zip archive") from None
        for packed in sorted(scratch.rglob("*.gz")):
            try:
                _gunzip(packed, folder / packed.name.removesuffix(".gz"), written)
            except (OSError, EOFError, gzip.BadGzipFile) as error:
                raise _unreadable(packed, error, "gzip file") from None
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _move_tree(scratch: Path, folder: Path, written: _Written) -> None:
    for path in sorted(scratch.rglob("*")):
        if path.is_file():
            target = folder / path.relative_to(scratch)
            written.mkdirs(target.parent)
            written.replace(path, target)


UNPACKERS: dict[str, Callable[[Plan, Path, _Written], None]] = {
    "none": _none,
    "gunzip": _gunzip_each,
    "untar": _untar,
    "unzip_gunzip": _unzip_gunzip,
}
