"""File-backed vision datasets read from a local ``root``: CIFAR-10/100, STL-10 (labelled split), Tiny-ImageNet.

Each loader reads the layout that the dataset's official archive unpacks to (the same files torchvision reads).
``root`` may be the folder that contains the dataset folder (``cifar-10-batches-py``, ``cifar-100-python``,
``stl10_binary``, ``tiny-imagenet-200``) or that folder itself. Downloads are opt-in: CIFAR-10/100 and STL-10 take
``dataset_options: {download: true}`` (VisionOptions), which fetches the official archive into ``root`` where its
files are missing (data/download.py: once per node, md5-checked, ``download_url`` a mirror); without it nothing is
downloaded.

Output: images (N, 3, H, W) C-contiguous float32, scaled to [0, 1] and then standardised per channel with the
mean and (population) std of the *train* split; the test split uses the same statistics so it stays unseen.
Labels are int64 in 0..num_classes-1. Loads are cached per (name, resolved root): files changed on disk later
are not re-read in the same process, and the cached arrays are shared, so copy before editing in place.
Importing this module registers the names in ``DATASETS``.
"""

from __future__ import annotations

import functools
import os
import pickle
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from raytune_fl.data.datasets import ArrayDataset, register_builtin
from raytune_fl.data.download import DownloadOptions, Plan, Resource, ensure_files

_Split = tuple[np.ndarray, np.ndarray]  # uint8 images (N, 3, H, W), int64 labels (N,)


@dataclass(frozen=True)
class _Files:
    """The dataset folder being read, plus a description of a complete one for error messages."""

    name: str
    base: Path
    layout: str

    def missing(self, what: Path | str) -> FileNotFoundError:
        return FileNotFoundError(f"{self.name}: {what} not found; expected {self.base} to hold {self.layout}")

    def malformed(self, path: Path, why: str) -> ValueError:
        return ValueError(f"{self.name}: {path} is malformed ({why}); expected {self.layout}")

    def path(self, rel: str) -> Path:
        path = self.base / rel
        if not path.exists():
            raise self.missing(path)
        return path


_Reader = Callable[[_Files], tuple[_Split, _Split, tuple[str, ...]]]
_SOURCES: dict[str, tuple[str, str, _Reader]] = {}  # name -> (archive folder, layout description, reader)


@dataclass(frozen=True)
class _Download:
    """Where a downloadable dataset's archive comes from: the torchvision class whose attributes name its URL,
    file and md5, and the files in the archive's folder that the reader needs (all there: nothing to fetch)."""

    torchvision_class: str
    files: tuple[str, ...]


_DOWNLOADS: dict[str, _Download] = {}


class VisionOptions(DownloadOptions):
    """The settings of a built-in dataset that can fetch its official archive (CIFAR-10/100, STL-10)."""


def _source(name: str, folder: str, layout: str, reader: _Reader, download: _Download | None = None) -> None:
    """Register ``reader(files) -> (train, test, class_names)`` as dataset ``name`` stored in ``folder`` (called
    after the reader's definition, as every dataset is registered); with `download`, it takes VisionOptions."""
    _SOURCES[name] = (folder, layout, reader)
    if download is None:
        register_builtin(name, functools.partial(_factory, name))
        return
    _DOWNLOADS[name] = download
    register_builtin(name, functools.partial(_fetching_factory, name), options=VisionOptions)


def _factory(name: str, root: str | None = None) -> ArrayDataset:
    folder, layout, _ = _SOURCES[name]
    expected = f"expected <root>/{folder}/ holding {layout}"
    if root is None:
        raise FileNotFoundError(f"{name} is read from local files but no root was given (set `root`); {expected}")
    base = Path(root).expanduser().resolve()
    for candidate in (base / folder, base):  # accept the parent folder or the dataset folder itself
        if candidate.name == folder and candidate.is_dir():
            return _load(name, str(candidate))
    fetch = " (or set dataset_options.download: true to fetch it)" if name in _DOWNLOADS else ""
    raise FileNotFoundError(f"{name}: {expected}; not found under {base}{fetch}")


def _fetching_factory(name: str, root: str | None = None, options: VisionOptions | None = None) -> ArrayDataset:
    """`_factory`, the official archive fetched into root first where `options.download` asks and a file is
    missing (a root that is the dataset folder itself is read as it is)."""
    options = options or VisionOptions()
    folder, layout, _ = _SOURCES[name]
    base = None if root is None else Path(root).expanduser().resolve()
    if options.download and not (base is not None and base.name == folder and base.is_dir()):
        spec = _DOWNLOADS[name]
        targets = [f"{folder}/{file}" for file in spec.files]
        expected = f"<root>/{folder}/ holding {layout}"
        ensure_files(name, root, targets, options, functools.partial(_archive, spec.torchvision_class), expected)
    return _factory(name, root)


def _archive(torchvision_class: str) -> Plan:
    """The official archive, named by torchvision's class attributes, unpacked into root as torchvision does."""
    import torchvision  # only when something is fetched: the driver stays torch-free otherwise

    source = getattr(torchvision.datasets, torchvision_class)
    return Plan("", (Resource(source.filename, source.tgz_md5, (source.url,)),), "untar")


@functools.lru_cache(maxsize=8)
def _load(name: str, base: str) -> ArrayDataset:
    _, layout, reader = _SOURCES[name]
    files = _Files(name, Path(base), layout)
    (x_train, y_train), (x_test, y_test), class_names = reader(files)
    for split, x, y in (("train", x_train, y_train), ("test", x_test, y_test)):
        if len(x) == 0:
            raise ValueError(f"{name}: the {split} split under {base} is empty; expected {layout}")
        if y.min() < 0 or y.max() >= len(class_names):
            raise ValueError(f"{name}: {split} labels outside 0..{len(class_names) - 1} under {base}")
    mean, std = _channel_stats(x_train)
    return ArrayDataset(
        name=name,
        x_train=_standardise(x_train, mean, std),
        y_train=y_train,
        x_test=_standardise(x_test, mean, std),
        y_test=y_test,
        num_classes=len(class_names),
        class_names=class_names,
    )


def _channel_stats(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Exact per-channel mean and population std of uint8 images scaled to [0, 1].

    Computed from a 256-bin histogram per channel, so no float copy of the whole train set is needed; in chunks
    because bincount makes an int64 copy of its input.
    """
    levels = np.arange(256) / 255.0
    counts = np.zeros((x.shape[1], 256))
    for chunk in (x[i : i + 1024] for i in range(0, len(x), 1024)):
        counts += [np.bincount(chunk[:, c].ravel(), minlength=256) for c in range(x.shape[1])]
    p = counts / counts.sum(axis=1, keepdims=True)
    mean = p @ levels
    std = np.sqrt((p * (levels - mean[:, None]) ** 2).sum(axis=1))
    return mean, np.where(std > 0, std, 1.0)  # a constant channel is only centred


def _standardise(x: np.ndarray, mean: np.ndarray, std: np.ndarray) -> np.ndarray:
    out = x.astype(np.float32, order="C")  # order="C" also materialises STL-10's transposed view
    out /= 255.0  # in place: the float32 copy is the only full-size allocation
    out -= mean.astype(np.float32)[None, :, None, None]
    out /= std.astype(np.float32)[None, :, None, None]
    return out


def _paired(files: _Files, path: Path, x: np.ndarray, y: np.ndarray) -> _Split:
    if len(x) != len(y):
        raise files.malformed(path, f"{len(x)} images but {len(y)} labels")
    return x, y


# --- CIFAR -------------------------------------------------------------------------------------------------
# torchvision.datasets.CIFAR10/100 verify each file's md5 and refuse anything else (subsets, regenerated files),
# so the pickles are read here directly, exactly as torchvision reads them. pickle can run code: only point
# `root` at files you trust (the same holds for torchvision).


def _unpickle(files: _Files, rel: str, *keys: str) -> list:
    path = files.path(rel)
    try:
        with path.open("rb") as f:
            entries = pickle.load(f, encoding="latin1")  # python-2 pickles holding numpy arrays
        return [entries[key] for key in keys]
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError) as e:
        raise files.malformed(path, f"unreadable pickle, truncated? {e}") from e
    except KeyError as e:
        raise files.malformed(path, f"no {e} entry") from e


def _cifar_split(files: _Files, batches: Sequence[str], label_key: str) -> _Split:
    xs, ys = [], []
    for rel in batches:
        data, labels = _unpickle(files, rel, "data", label_key)
        data = np.asarray(data, dtype=np.uint8)
        if data.ndim != 2 or data.shape[1] != 3 * 32 * 32:
            raise files.malformed(files.base / rel, f"data has shape {data.shape}, expected (N, 3072)")
        # Each row holds the R, G and B 32x32 planes in turn, each row-major: that is (3, 32, 32) in C order.
        x, y = _paired(files, files.base / rel, data.reshape(-1, 3, 32, 32), np.asarray(labels, dtype=np.int64))
        xs.append(x)
        ys.append(y)
    return np.concatenate(xs), np.concatenate(ys)


def _cifar_names(files: _Files, rel: str, key: str) -> tuple[str, ...]:
    return tuple(str(n) for n in _unpickle(files, rel, key)[0])


def _cifar10(files: _Files) -> tuple[_Split, _Split, tuple[str, ...]]:
    train = _cifar_split(files, [f"data_batch_{i}" for i in range(1, 6)], "labels")
    test = _cifar_split(files, ["test_batch"], "labels")
    return train, test, _cifar_names(files, "batches.meta", "label_names")


_source(
    "cifar10",
    "cifar-10-batches-py",
    "data_batch_1..5, test_batch and batches.meta (the python version from the CIFAR site)",
    _cifar10,
    _Download("CIFAR10", (*(f"data_batch_{i}" for i in range(1, 6)), "test_batch", "batches.meta")),
)


def _cifar100(files: _Files) -> tuple[_Split, _Split, tuple[str, ...]]:
    train = _cifar_split(files, ["train"], "fine_labels")
    test = _cifar_split(files, ["test"], "fine_labels")
    return train, test, _cifar_names(files, "meta", "fine_label_names")


_source(
    "cifar100",
    "cifar-100-python",
    "train, test and meta (the python version from the CIFAR site)",
    _cifar100,
    _Download("CIFAR100", ("train", "test", "meta")),
)


# --- STL-10 ------------------------------------------------------------------------------------------------
# Only the labelled splits (5,000 train / 8,000 test); the 100,000 unlabelled images are not read. Read directly
# for the same md5 reason as CIFAR, with torchvision's byte layout.


def _stl_split(files: _Files, split: str) -> _Split:
    x_path, y_path = files.path(f"{split}_X.bin"), files.path(f"{split}_y.bin")
    raw = np.fromfile(x_path, dtype=np.uint8)
    if raw.size % (3 * 96 * 96):
        raise files.malformed(x_path, f"{raw.size} bytes is not a whole number of 3x96x96 images, truncated?")
    # Images are stored column-major (MATLAB order): swap the last two axes so x[..., row, col].
    x = raw.reshape(-1, 3, 96, 96).transpose(0, 1, 3, 2)
    y = np.fromfile(y_path, dtype=np.uint8).astype(np.int64) - 1  # 1..10 on disk
    return _paired(files, y_path, x, y)


def _stl10(files: _Files) -> tuple[_Split, _Split, tuple[str, ...]]:
    train, test = _stl_split(files, "train"), _stl_split(files, "test")
    names = tuple(line.strip() for line in files.path("class_names.txt").read_text().splitlines() if line.strip())
    return train, test, names


_source(
    "stl10",
    "stl10_binary",
    "train_X.bin, train_y.bin, test_X.bin, test_y.bin and class_names.txt (the binary version)",
    _stl10,
    _Download("STL10", ("train_X.bin", "train_y.bin", "test_X.bin", "test_y.bin", "class_names.txt")),
)


# --- Tiny-ImageNet -----------------------------------------------------------------------------------------
# The test split is the labelled val split (the official test split has no labels). Class names are the wnids.

_TINY_SIDE = 64


def _read_images(files: _Files, items: Sequence[tuple[Path, int]]) -> _Split:
    from PIL import Image  # imported lazily: only this loader needs it

    def decode(path: Path) -> np.ndarray:
        try:
            with Image.open(path) as im:
                return np.asarray(im.convert("RGB"), dtype=np.uint8)  # some images are greyscale
        except OSError as e:  # PIL reports truncated or unreadable files as OSError
            raise files.malformed(path, str(e)) from e

    paths = [path for path, _ in items]
    x = np.empty((len(items), 3, _TINY_SIDE, _TINY_SIDE), dtype=np.uint8)
    # Threads: PIL releases the GIL while decoding, and the train split is 100,000 small JPEGs.
    with ThreadPoolExecutor(max_workers=min(16, os.cpu_count() or 1)) as pool:
        for i, (path, img) in enumerate(zip(paths, pool.map(decode, paths))):
            if img.shape != (_TINY_SIDE, _TINY_SIDE, 3):
                raise files.malformed(path, f"size {img.shape[1]}x{img.shape[0]}, expected {_TINY_SIDE}x{_TINY_SIDE}")
            x[i] = img.transpose(2, 0, 1)
    return x, np.array([label for _, label in items], dtype=np.int64)


def _jpegs(files: _Files, rel: str) -> list[Path]:
    found = sorted(p for p in files.path(rel).iterdir() if p.suffix.lower() in (".jpeg", ".jpg"))
    if not found:
        raise files.missing(f"*.JPEG in {files.base / rel}")
    return found


def _tinyimagenet(files: _Files) -> tuple[_Split, _Split, tuple[str, ...]]:
    wnids = tuple(files.path("wnids.txt").read_text().split())
    if not wnids:
        raise files.malformed(files.base / "wnids.txt", "no wnids")
    index = {wnid: i for i, wnid in enumerate(wnids)}  # label = line number in wnids.txt
    train = [(path, i) for i, wnid in enumerate(wnids) for path in _jpegs(files, f"train/{wnid}/images")]
    annotations = files.path("val/val_annotations.txt")
    test = []
    for line in annotations.read_text().splitlines():
        if not line.strip():
            continue
        fields = line.split("\t")  # filename, wnid, x, y, w, h
        if len(fields) < 2 or fields[1] not in index:
            raise files.malformed(annotations, f"line {line!r} lacks a known wnid")
        test.append((files.path(f"val/images/{fields[0]}"), index[fields[1]]))
    return _read_images(files, train), _read_images(files, test), wnids


_source(
    "tinyimagenet",
    "tiny-imagenet-200",
    "wnids.txt, train/<wnid>/images/*.JPEG, val/images/*.JPEG and val/val_annotations.txt",
    _tinyimagenet,
)
