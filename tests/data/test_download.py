"""Opt-in downloads (raytune_fl/data/download.py): tiny archives in the real on-disk formats served by a real HTTP
server on 127.0.0.1, fetched into `root` by the normal dataset path, once per node, checksummed, and nothing left
behind when a download fails."""

from __future__ import annotations

import hashlib
import io
import math
import socket
import threading
import time
import zipfile
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest

from raytune_fl.config import ExperimentConfig
from raytune_fl.data import load_dataset
from raytune_fl.data.download import ChecksumError, DownloadError, FormatError, Plan, Progress, mirror_url, not_its_kind
from raytune_fl.data.files import torchvision_files
from raytune_fl.data.vision import _archive
from raytune_fl.metrics import ROUND, TRAIN_LOSS
from tests.support.data_files import cifar10_archive, gzipped_idx, write_usps

CIFAR = "cifar-10-python.tar.gz"


class Mirror:
    """What the local server serves under /mirror/, and every path it was asked for."""

    def __init__(self, port: int) -> None:
        self.url = f"http://127.0.0.1:{port}/mirror"
        self.files: dict[str, bytes] = {}
        self.requests: list[str] = []
        self.delay_s = 0.0
        self.short_by = 0  # announce this many bytes more than it sends, then close: a download cut short

    def serve(self, handler: BaseHTTPRequestHandler) -> None:
        self.requests.append(handler.path)
        time.sleep(self.delay_s)
        body = self.files.get(handler.path.removeprefix("/mirror/"))
        if body is None:
            handler.send_error(404)
            return
        handler.send_response(200)
        handler.send_header("Content-Length", str(len(body) + self.short_by))
        handler.end_headers()
        handler.wfile.write(body)


@pytest.fixture
def mirror(monkeypatch) -> Iterator[Mirror]:
    monkeypatch.setenv("no_proxy", "127.0.0.1")  # a proxy in the environment must not take local requests
    served: list[Mirror] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            served[0].serve(self)

        def log_message(self, *args) -> None:  # quiet
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    served.append(Mirror(server.server_address[1]))
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield served[0]
    server.shutdown()
    server.server_close()


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]  # closed on leaving: nothing listens there


def md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


def served_cifar(mirror: Mirror, tmp_path: Path) -> tuple[str, dict]:
    archive, written = cifar10_archive(tmp_path / "site")
    mirror.files[CIFAR] = archive.read_bytes()
    return md5(mirror.files[CIFAR]), written


def tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


CIFAR_TREE = sorted(
    [CIFAR, "cifar-10-batches-py"]
    + [f"cifar-10-batches-py/{f}" for f in ("batches.meta", *(f"data_batch_{i}" for i in range(1, 6)), "test_batch")]
)


# ---- the target: a real-format archive from a local server, trained on ----------------------------------


def test_download_true_fetches_a_real_format_archive_from_a_local_server_and_trains_on_it(mirror, tmp_path, capsys):
    import torch

    from raytune_fl.engine.federation import Federation

    checksum, written = served_cifar(mirror, tmp_path)
    root = tmp_path / "data"
    experiment = ExperimentConfig.model_validate(
        {
            "dataset": "cifar10",
            "root": str(root),
            "dataset_options": {"download": True, "download_url": mirror.url, "download_md5": checksum},
            "partition": {"kind": "iid", "clients": 2, "min_size": 5},
            "rounds": 1,
            "batch_size": 4,
            "resources": {"actors": 0},
            "diagnostics": {"every": 0},
        }
    )
    rows: list[dict] = []
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        federation = Federation(experiment, "fedavg", {})
        federation.run(rows.append)
    finally:
        torch.set_num_threads(before)
    assert mirror.requests == [f"/mirror/{CIFAR}"]
    assert tree(root) == CIFAR_TREE  # torchvision's layout: the archive kept, no lock or temporary file left
    dataset = federation.data.dataset
    labels = sum((written[f"data_batch_{i}"][1] for i in range(1, 6)), [])
    assert dataset.x_train.shape == (20, 3, 32, 32) and dataset.y_train.tolist() == labels
    pixels = np.concatenate([written[f"data_batch_{i}"][0] for i in range(1, 6)]) / 255.0  # the served bytes
    mean, std = pixels.mean(axis=(0, 2, 3), keepdims=True), pixels.std(axis=(0, 2, 3), keepdims=True)
    np.testing.assert_allclose(dataset.x_train, (pixels - mean) / std, atol=1e-4)
    assert dataset.y_test.tolist() == written["test_batch"][1]
    assert [row[ROUND] for row in rows] == [1] and math.isfinite(rows[0][TRAIN_LOSS])
    # a small download says one line: what, from where, into where
    assert capsys.readouterr().err == f"downloading cifar10 from {mirror.url}/{CIFAR} into {root}\n"


def test_a_second_load_with_the_files_present_makes_no_request(mirror, tmp_path):
    checksum, _ = served_cifar(mirror, tmp_path)
    options = {"download": True, "download_url": mirror.url, "download_md5": checksum}
    first = load_dataset("cifar10", root=str(tmp_path / "data"), options=options)
    again = load_dataset("cifar10", root=str(tmp_path / "data"), options=options)
    assert len(mirror.requests) == 1 and again.y_train.tolist() == first.y_train.tolist()
    # a root that already holds the files never reaches the network, whatever the mirror
    offline = {"download": True, "download_url": f"http://127.0.0.1:{closed_port()}/"}
    assert load_dataset("cifar10", root=str(tmp_path / "data"), options=offline).num_classes == 10


def test_an_archive_put_in_root_by_hand_is_unpacked_without_a_request(mirror, tmp_path):
    checksum, _ = served_cifar(mirror, tmp_path)
    root = tmp_path / "data"
    root.mkdir()
    (root / CIFAR).write_bytes(mirror.files[CIFAR])
    (root / f".{CIFAR}.x1y2.part").write_bytes(b"a killed download's leftover")
    options = {"download": True, "download_url": mirror.url, "download_md5": checksum}
    assert len(load_dataset("cifar10", root=str(root), options=options).y_train) == 20
    assert mirror.requests == [] and tree(root) == CIFAR_TREE  # the leftover cleared under the lock


# ---- torchvision's classes ----------------------------------------------------------------------------------


def test_torchvision_mnist_downloads_its_raw_files_from_a_mirror(mirror, tmp_path):
    train = np.zeros((10, 28, 28), dtype=np.uint8)
    train[3] = 255
    labels = np.array([5, 0, 9, 1, 2, 3, 4, 6, 7, 8], dtype=np.uint8)
    mirror.files |= gzipped_idx(tmp_path / "site", "train", train, labels)
    mirror.files |= gzipped_idx(tmp_path / "site", "t10k", train[:2], labels[:2])
    root = tmp_path / "tv"
    options = {
        "name": "MNIST",
        "download": True,
        "download_url": mirror.url + "/",  # a trailing slash or none: the file's name is appended
        "download_md5": {name: md5(data) for name, data in mirror.files.items()},
    }
    ds = load_dataset("torchvision", root=str(root), options=options)
    assert ds.x_train.shape == (10, 1, 28, 28) and ds.y_train.tolist() == labels.tolist() and ds.num_classes == 10
    assert ds.x_train[3, 0, 0, 0] == ds.x_train.max() > 0  # the bright image kept its place
    assert sorted(mirror.requests) == sorted(f"/mirror/{name}" for name in mirror.files)
    raw = sorted(mirror.files) + sorted(name.removesuffix(".gz") for name in mirror.files)
    assert tree(root) == ["MNIST", "MNIST/raw"] + sorted(f"MNIST/raw/{name}" for name in raw)  # torchvision's own


def test_torchvision_emnist_unzips_its_gz_files_and_usps_reads_them_as_fetched(mirror, tmp_path):
    letters = np.r_[1:27].astype(np.uint8)  # every letter once
    site = tmp_path / "site"
    packed = gzipped_idx(site, "emnist-letters-train", np.zeros((26, 28, 28), dtype=np.uint8), letters)
    packed |= gzipped_idx(site, "emnist-letters-test", np.zeros((1, 28, 28), dtype=np.uint8), letters[:1])
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in packed.items():
            archive.writestr(f"gzip/{name}", data)
    mirror.files["gzip.zip"] = buffer.getvalue()
    options = {"name": "EMNIST", "split": "letters", "download": True, "download_url": mirror.url}
    ds = load_dataset(
        "torchvision", root=str(tmp_path / "e"), options={**options, "download_md5": md5(buffer.getvalue())}
    )
    assert ds.y_train.tolist() == list(range(26)) and ds.name == "emnist_letters"
    assert sorted(p.name for p in (tmp_path / "e" / "EMNIST" / "raw").iterdir()) == sorted(
        ["gzip.zip", *(name.removesuffix(".gz") for name in packed)]
    )
    images = np.zeros((10, 16, 16), dtype=np.uint8)
    for name, rows in (("usps.bz2", list(range(1, 11))), ("usps.t.bz2", [2])):
        write_usps(site / name, images[: len(rows)], rows)
        mirror.files[name] = (site / name).read_bytes()
    md5s = {name: md5(mirror.files[name]) for name in ("usps.bz2", "usps.t.bz2")}
    options = {"name": "USPS", "download": True, "download_url": mirror.url, "download_md5": md5s}
    assert load_dataset("torchvision", root=str(tmp_path / "u"), options=options).y_test.tolist() == [1]
    assert tree(tmp_path / "u") == ["usps.bz2", "usps.t.bz2"]


@pytest.mark.parametrize("name", ["MNIST", "EMNIST", "CIFAR10", "CIFAR100", "SVHN", "USPS"])
def test_urls_files_and_md5s_are_torchvisions_own(name):
    import torchvision

    source = getattr(torchvision.datasets, name)
    files, plan = torchvision_files(name, "digits" if name == "EMNIST" else None)
    official = [(r.filename, r.md5, r.urls) for r in plan.resources]
    if name == "MNIST":
        assert official == [(f, m, tuple(mirror + f for mirror in source.mirrors)) for f, m in source.resources]
        assert files[0] == "MNIST/raw/train-images-idx3-ubyte"
    elif name == "EMNIST":
        assert official == [("gzip.zip", source.md5, (source.url,))] and source.url.endswith("/gzip.zip")
        assert files[0] == "EMNIST/raw/emnist-digits-train-images-idx3-ubyte"
    elif name.startswith("CIFAR"):
        assert official == [(source.filename, source.tgz_md5, (source.url,))] and plan.unpack == "untar"
        assert f"{source.base_folder}/{source.meta['filename']}" in files
    else:
        assert official == [(f, m, (url,)) for url, f, m in (source.split_list["train"], source.split_list["test"])]


@pytest.mark.parametrize("name", ["CIFAR10", "CIFAR100", "STL10"])
def test_the_built_in_loaders_fetch_torchvisions_archive(name):
    import torchvision

    source = getattr(torchvision.datasets, name)
    plan = _archive(name)
    assert plan == Plan("", plan.resources, "untar")  # unpacked into root, as torchvision does
    assert [(r.filename, r.md5, r.urls) for r in plan.resources] == [(source.filename, source.tgz_md5, (source.url,))]


# ---- once per node ------------------------------------------------------------------------------------------


def test_two_concurrent_loads_into_one_root_download_once(mirror, tmp_path):
    checksum, _ = served_cifar(mirror, tmp_path)
    mirror.delay_s = 0.3  # the second arrives while the first is downloading
    options = {"download": True, "download_url": mirror.url, "download_md5": checksum}
    start = threading.Barrier(2)
    results: list[object] = [None, None]

    def load(i: int) -> None:
        start.wait()
        try:
            results[i] = load_dataset("cifar10", root=str(tmp_path / "data"), options=options)
        except Exception as error:  # reported below, not lost in the thread
            results[i] = error

    threads = [threading.Thread(target=load, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert [len(r.y_train) for r in results] == [20, 20], results
    assert mirror.requests == [f"/mirror/{CIFAR}"] and tree(tmp_path / "data") == CIFAR_TREE


# ---- failures: clear errors, nothing left behind -----------------------------------------------------------


@pytest.mark.parametrize("given", [True, False])
def test_a_wrong_checksum_names_the_file_and_both_md5s_and_leaves_nothing(mirror, tmp_path, given):
    actual, _ = served_cifar(mirror, tmp_path)
    options = {"download": True, "download_url": mirror.url}
    expected = "0123456789abcdef0123456789abcdef" if given else "c58f30108f718f92721af3b95e74349a"  # CIFAR-10's own
    if given:
        options["download_md5"] = expected.upper()  # as some tools print it
    root = tmp_path / "data"
    with pytest.raises(ChecksumError) as error:
        load_dataset("cifar10", root=str(root), options=options)
    assert str(error.value).startswith(
        f"cifar10: {CIFAR} from {mirror.url}/{CIFAR} has md5 {actual}, expected {expected} "
        f"({'dataset_options.download_md5' if given else 'the official md5'}); the file was removed; "
    ), str(error.value)
    assert not root.exists()  # made for the download, removed with it
    root.mkdir()
    with pytest.raises(ChecksumError):
        load_dataset("cifar10", root=str(root), options=options)
    assert tree(root) == []  # a root that was there is left as it was: no archive, lock or temporary file


def test_offline_the_first_line_names_the_dataset_the_url_and_what_to_do(tmp_path):
    url = f"http://127.0.0.1:{closed_port()}/datasets"
    root = tmp_path / "data"
    with pytest.raises(DownloadError) as error:
        load_dataset("cifar10", root=str(root), options={"download": True, "download_url": url})
    first = str(error.value).splitlines()[0]
    assert first.startswith(f"cifar10: could not download {CIFAR} from {url}/{CIFAR} (") and "refused" in first
    assert first.endswith(
        f"put the files under {root} as torchvision lays them out (<root>/cifar-10-batches-py/ holding data_batch_1..5"
        ", test_batch and batches.meta (the python version from the CIFAR site)), or set dataset_options.download_url "
        "to a reachable mirror"
    ), first
    assert not root.exists()
    # an archive already in root that is not the expected one is named, and left as it was (it is the user's)
    root.mkdir()
    (root / CIFAR).write_bytes(b"not CIFAR")
    with pytest.raises(DownloadError) as error:
        load_dataset("cifar10", root=str(root), options={"download": True, "download_url": url})
    assert str(error.value).endswith(
        f"reachable mirror (the {CIFAR} there has md5 {md5(b'not CIFAR')}, not c58f30108f718f92721af3b95e74349a, "
        "the official md5)"
    ), str(error.value)
    assert tree(root) == [CIFAR] and (root / CIFAR).read_bytes() == b"not CIFAR"


@pytest.mark.parametrize(
    ("name", "head", "why"),
    [
        ("usps.bz2", b"BZh91AY&SY", None),
        ("usps.bz2", b"<html>Not Found</html>", "not a bzip2 file: it begins with b'<html>Not Found</html>'"),
        ("cifar-10-python.tar.gz", b"\x1f\x8b\x08", None),
        ("train-labels-idx1-ubyte.gz", b"PK\x03\x04", "not a gzip file: it begins with b'PK\\x03\\x04'"),
        ("gzip.zip", b"PK\x03\x04", None),
        ("gzip.zip", b"", "not a zip archive: it is empty"),
        ("train_32x32.mat", b"MATLAB 5.0 MAT-file", None),
        ("train_32x32.mat", b"<!DOCTYPE html>", "not a MATLAB file: it begins with b'<!DOCTYPE html>'"),
        ("batches.meta", b"<html>", None),  # no known signature: the reader judges it
    ],
)
def test_a_file_is_judged_by_what_its_name_says_it_is(name, head, why):
    assert not_its_kind(name, head) == why


def test_a_mirrors_wrong_files_are_removed_with_the_reason_and_ones_left_before_are_fetched_again(
    mirror, tmp_path, capsys
):
    page = b"<html>Please log in</html>"  # served with status 200, as some sites serve their login page
    mirror.files = {"usps.bz2": page, "usps.t.bz2": page}
    options = {"name": "USPS", "download": True, "download_url": mirror.url, "download_md5": {"usps.bz2": md5(page)}}
    root = tmp_path / "u"
    with pytest.raises(FormatError) as error:
        load_dataset("torchvision", root=str(root), options=options)
    assert str(error.value) == (
        f"torchvision USPS: usps.bz2 from {mirror.url}/usps.bz2 is not a bzip2 file: it begins with "
        f"b'<html>Please log in</html>'; the file was removed; dataset_options.download_md5 holds this wrong file's "
        "md5: set dataset_options.download_url to a mirror serving the real file (an error page or a login page is "
        "served with status 200 by some sites), and dataset_options.download_md5 to the real file's md5, or leave "
        "dataset_options.download_md5 unset to check the official one"
    )
    assert not root.exists()  # nothing left for a second run to find and read
    # files an earlier version left in root: removed, named, fetched again from a mirror serving the real ones
    root.mkdir()
    (root / "usps.bz2").write_bytes(page)
    (root / "usps.t.bz2").write_bytes(page)
    site = tmp_path / "site"
    for name, rows in (("usps.bz2", list(range(1, 11))), ("usps.t.bz2", [3])):
        write_usps(site / name, np.zeros((len(rows), 16, 16), dtype=np.uint8), rows)
        mirror.files[name] = (site / name).read_bytes()
    md5s = {name: md5(mirror.files[name]) for name in ("usps.bz2", "usps.t.bz2")}
    capsys.readouterr()
    assert load_dataset("torchvision", root=str(root), options={**options, "download_md5": md5s}).y_test.tolist() == [2]
    err = capsys.readouterr().err
    for name in ("usps.bz2", "usps.t.bz2"):
        assert (
            f"torchvision USPS: removed {root / name} (not a bzip2 file: it begins with b'<html>Please log in</" in err
        )


def test_a_corrupt_file_under_download_true_is_not_told_to_set_download_true(tmp_path):
    from raytune_fl.data.files import _torchvision_split

    write_usps(tmp_path / "usps.bz2", np.zeros((1, 16, 16), dtype=np.uint8), [1])
    (tmp_path / "usps.t.bz2").write_bytes(b"BZh" + b"\x00" * 40)  # a bzip2 header, a cut body
    for download, fix in ((True, "remove them to have download: true fetch them again"), (False, "set dataset_")):
        with pytest.raises(FileNotFoundError) as error:
            _torchvision_split("USPS", str(tmp_path), None, False, download)
        assert "; " + fix in str(error.value) and ("set dataset_options.download: true" in str(error.value)) != download


def test_a_download_cut_short_leaves_no_file_that_looks_complete(mirror, tmp_path):
    checksum, _ = served_cifar(mirror, tmp_path)
    mirror.short_by = 1000
    (tmp_path / "data").mkdir()
    options = {"download": True, "download_url": mirror.url, "download_md5": checksum}
    with pytest.raises(DownloadError, match=f"could not download {CIFAR} from {mirror.url}/{CIFAR} "):
        load_dataset("cifar10", root=str(tmp_path / "data"), options=options)
    assert tree(tmp_path / "data") == []


def test_missing_files_without_download_say_how_to_fetch_them(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"not found under .* \(or set dataset_options.download: true"):
        load_dataset("cifar100", root=str(tmp_path))
    with pytest.raises(FileNotFoundError, match="stl10: download: true needs `root`, the folder to download into"):
        load_dataset("stl10", options={"download": True})
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "a_file").write_text("")
    root = tmp_path / "a_file" / "stl"
    with pytest.raises(DownloadError, match=f"stl10: cannot download into {root} \\(Not a directory\\); set base.root"):
        load_dataset("stl10", root=str(root), options={"download": True})


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"download_url": "http://mirror/"}, "dataset_options.download_url: a mirror is read only when downloading"),
        ({"download": True, "download_md5": "0" * 32}, "dataset_options.download_md5: checks a mirror's files: set"),
        ({"download": True, "download_url": "mirror/cifar"}, "dataset_options.download_url: must be an http, https"),
        ({"download": True, "download_url": "http://m/", "download_md5": "abc"}, "'abc' is not an md5 (32 hexadecimal"),
        ({"download": "yes please"}, "dataset_options.download: Input should be a valid boolean"),
    ],
)
def test_download_settings_are_checked_where_the_space_is(options, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        ExperimentConfig(dataset="stl10", root="/data", dataset_options=options)


def test_an_md5_per_file_is_needed_where_a_dataset_fetches_several(tmp_path):
    url = f"http://127.0.0.1:{closed_port()}/"
    base = {"name": "MNIST", "download": True, "download_url": url}
    with pytest.raises(ValueError, match=r"download_md5: torchvision MNIST downloads 4 files \(train-images-idx3"):
        load_dataset("torchvision", root=str(tmp_path), options={**base, "download_md5": "0" * 32})
    with pytest.raises(ValueError, match="download_md5: 'train.gz' is not a file torchvision MNIST downloads; its"):
        load_dataset("torchvision", root=str(tmp_path), options={**base, "download_md5": {"train.gz": "0" * 32}})
    assert list(tmp_path.iterdir()) == []


def test_a_mirror_under_the_home_folder_is_expanded_as_the_commands_paths_are(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    for given in ("file:~/mirror", "file://~/mirror"):
        config = ExperimentConfig(
            dataset="stl10", root="/data", dataset_options={"download": True, "download_url": given}
        )
        assert config.dataset_options["download_url"].endswith(f"{tmp_path}/mirror"), given
    kept = ExperimentConfig(
        dataset="stl10", root="/d", dataset_options={"download": True, "download_url": "http://m/~x"}
    )
    assert kept.dataset_options["download_url"] == "http://m/~x"  # only a file path's leading ~


# ---- the mirror's URL and progress ---------------------------------------------------------------------------


def test_a_mirror_is_a_base_url_the_files_name_is_appended_to():
    assert mirror_url("https://lab/data", CIFAR) == f"https://lab/data/{CIFAR}"
    assert mirror_url("https://lab/data/", CIFAR) == f"https://lab/data/{CIFAR}"
    assert mirror_url(f"file:///nfs/{CIFAR}", CIFAR) == f"file:///nfs/{CIFAR}"  # one naming the file: as it is


def test_progress_is_quiet_for_a_small_download_then_a_line_a_tenth(capsys):
    now = [100.0]
    progress = Progress("big.tar.gz", 1_000_000_000, clock=lambda: now[0])
    for t, done in ((1.0, 300_000_000), (2.9, 400_000_000)):  # within the first 3 s: nothing
        now[0] = 100 + t
        progress.update(done)
    assert capsys.readouterr().err == ""
    # 3.0 s: 40 % (four tenths at once: one line); 3.5 s: 50 % but within a second of it; 4.0 s: still 50 %
    # (shown: a new tenth); 9 s: 55 %, no new tenth, 5 s since the last; 14.1 s: 10 s since the last line
    steps = ((3.0, 400_000_000), (3.5, 500_000_000), (4.0, 500_000_000), (9.0, 550_000_000), (14.1, 560_000_000))
    for t, done in steps:
        now[0] = 100 + t
        progress.update(done)
    progress.finish(1_000_000_000)
    assert capsys.readouterr().err.splitlines() == [
        "  big.tar.gz: 400.0 of 1000.0 MB (40 %), 133.3 MB/s",  # 400 MB in 3 s
        "  big.tar.gz: 500.0 of 1000.0 MB (50 %), 125.0 MB/s",
        "  big.tar.gz: 560.0 of 1000.0 MB (56 %), 39.7 MB/s",  # 560 / 14.1
        "  big.tar.gz: 1000.0 MB in 14 s",
    ]
    unknown = Progress("x.bin", None, clock=lambda: now[0])
    now[0] += 9.9
    unknown.update(10_000_000)  # no size: a line every 10 s only
    now[0] += 0.2
    unknown.update(20_000_000)
    assert capsys.readouterr().err == "  x.bin: 20.0 MB, 2.0 MB/s\n"
