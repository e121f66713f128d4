"""Your own data from files, without code: settings in the experiment's `dataset_options`, checked by each dataset's
options model below.

- ``npz``: a ``.npz`` (``numpy.savez``/``savez_compressed``) holding ``x_train``, ``y_train``, ``x_test``, ``y_test``:
  images (N, C, H, W), (N, H, W, C) (``layout``, else read off the shape) or (N, H, W), integer labels 0..K-1
  (K = the largest label + 1; at least two classes, each with a training sample). Integer images are 8-bit
  pixels (0..255, any integer dtype): scaled to [0, 1] and standardised per channel with the train split's
  statistics; float images are used as given (you normalised them).
- ``image_folder``: torchvision's ``ImageFolder`` layout under ``root``: ``train/<class>/<image>`` and
  ``test/<class>/<image>`` (classes: the train folders' sorted names, at least two; the test folders must be among
  them, a test split may lack a class). Grayscale files stay one channel when every file is grayscale; otherwise
  every image is read as RGB (alpha dropped). Resized to ``image_size`` where given, else all files must share one
  size.
- ``torchvision``: one of torchvision's dataset classes (``name``; EMNIST also takes ``split``) read from its files
  under ``root``, as torchvision gives them (EMNIST's images stay transposed; its letters split's labels 1..26
  become 0..25; K from the labels, as npz's). torchvision itself checks CIFAR's and SVHN's files against their
  official checksums (the built-in ``cifar10``/``cifar100`` read the same files without that check). Downloads
  are opt-in: with ``download: true`` missing files are fetched into ``root`` in torchvision's layout
  (data/download.py: once per node, md5-checked, ``download_url`` a mirror).

Paths are made absolute where the space is checked (the driver): trials run in other working directories. Loads
are cached per (dataset, files, settings) in a process; the cached arrays are shared, so copy before editing.
torch, torchvision and PIL are imported inside the loaders: importing this module stays light.
"""

from __future__ import annotations

import functools
import pickle
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from raytune_fl.data.datasets import ArrayDataset, check_arrays, image_layout, register_builtin, standardise
from raytune_fl.data.download import DownloadOptions, Plan, Resource, ensure_files

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp", ".ppm", ".pgm")


class _Options(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _absolute(path: str) -> str:
    return str(Path(path).expanduser().resolve())


# ------------------------------------------------------------------------------------------------------- npz


class NpzOptions(_Options):
    path: str = Field(description="a .npz file holding x_train, y_train, x_test, y_test")
    layout: Literal["nchw", "nhwc"] | None = Field(
        None,
        description="how 4-D images are laid out: nchw = (N, C, H, W), nhwc = (N, H, W, C) (channels last); unset: "
        "read off the shape (the axis of size 1, 3 or 4 holds channels), an array where both can is refused",
    )

    @field_validator("path")
    @classmethod
    def _made_absolute(cls, value: str) -> str:
        return _absolute(value)


def npz(root: str | None = None, options: NpzOptions | None = None) -> ArrayDataset:
    """Arrays from a .npz file (dataset_options.path)."""
    assert options is not None  # load_dataset validates dataset_options into NpzOptions
    return _npz(options.path, options.layout)


register_builtin("npz", npz, options=NpzOptions)


@functools.lru_cache(maxsize=4)
def _npz(path: str, layout: str | None = None) -> ArrayDataset:
    file = Path(path)
    if not file.is_file():
        raise FileNotFoundError(f"npz: no such file: {file}")
    try:
        with np.load(file, allow_pickle=False) as archive:
            arrays = {key: archive[key] for key in archive.files}
    except (OSError, ValueError) as error:  # not a zip, a pickled object array, ...
        raise ValueError(f"npz: {file} is not a readable .npz ({error})") from None
    missing = [key for key in ("x_train", "y_train", "x_test", "y_test") if key not in arrays]
    if missing:
        raise ValueError(f"npz: {file} lacks {', '.join(missing)} (it holds {', '.join(arrays) or 'nothing'})")
    source = f"npz: {file}"
    how = "set base.dataset_options.layout: nchw or nhwc"
    used = image_layout(source, arrays["x_train"].shape, layout, how)
    x_train, y_train, x_test, y_test, classes = check_arrays(source, arrays, scale_uint8=True, layout=used)
    return ArrayDataset(file.stem, x_train, y_train, x_test, y_test, num_classes=classes, layout=used)


# ---------------------------------------------------------------------------------------------- image_folder


class ImageFolderOptions(_Options):
    image_size: int | tuple[int, int] | None = Field(
        None,
        description="resize every image to this size (one number: square); unset: keep the files' size, "
        "which must then be one",
    )

    @field_validator("image_size")
    @classmethod
    def _positive(cls, value: int | tuple[int, int] | None) -> int | tuple[int, int] | None:
        sizes = (value,) if isinstance(value, int) else value or ()
        if any(size < 1 for size in sizes):
            raise ValueError(f"must be positive (got {value})")
        return value


def image_folder(root: str | None = None, options: ImageFolderOptions | None = None) -> ArrayDataset:
    """Images in train/<class>/ and test/<class>/ folders under root."""
    if root is None:
        raise FileNotFoundError("image_folder: no root given (set `root`: a folder with train/ and test/ inside)")
    size = (options or ImageFolderOptions()).image_size
    return _image_folder(_absolute(root), (size, size) if isinstance(size, int) else size)


register_builtin("image_folder", image_folder, options=ImageFolderOptions)


def _listing(split: Path) -> dict[str, list[Path]]:
    """class name -> its image files, in sorted order; hidden folders and files skipped."""
    classes = sorted(p for p in split.iterdir() if p.is_dir() and not p.name.startswith("."))
    return {
        folder.name: sorted(
            f for f in folder.iterdir() if f.suffix.lower() in IMAGE_SUFFIXES and not f.name.startswith(".")
        )
        for folder in classes
    }


@functools.lru_cache(maxsize=4)
def _image_folder(root: str, size: tuple[int, int] | None) -> ArrayDataset:
    from PIL import Image

    base = Path(root)
    layout = "train/<class>/<image> and test/<class>/<image>"
    splits = {}
    for split in ("train", "test"):
        if not (base / split).is_dir():
            raise FileNotFoundError(f"image_folder: {base / split} not found; expected {base} to hold {layout}")
        splits[split] = _listing(base / split)
        if not any(splits[split].values()):
            raise ValueError(f"image_folder: no images under {base / split}; expected {layout}")
    class_names = tuple(name for name, files in splits["train"].items() if files)
    extra = sorted(set(name for name, files in splits["test"].items() if files) - set(class_names))
    if extra:
        raise ValueError(f"image_folder: test classes {', '.join(extra)} under {base} have no train images")
    if len(class_names) < 2:  # every image one class: 100 % accuracy by construction
        raise ValueError(
            f"image_folder: {base / 'train'} holds one class folder ({class_names[0]}); a classifier needs at least "
            "2: one train/<class>/ folder per class"
        )
    items = {
        split: [(path, class_names.index(name)) for name, files in listing.items() if files for path in files]
        for split, listing in splits.items()
    }

    def mode(path: Path) -> str:
        with Image.open(path) as image:  # reads the header only
            return image.mode

    gray = all(mode(path) in ("L", "1") for found in items.values() for path, _ in found)
    arrays = {}
    for split, found in items.items():
        decoded = []
        for path, _ in found:
            with Image.open(path) as image:
                image = image.convert("L" if gray else "RGB")
                if size is not None and image.size != (size[1], size[0]):
                    image = image.resize((size[1], size[0]), Image.Resampling.BILINEAR)
                decoded.append(np.asarray(image, dtype=np.uint8))
        shapes = {a.shape for a in decoded}
        if len(shapes) > 1:
            raise ValueError(
                f"image_folder: images under {base / split} differ in size ({', '.join(map(str, sorted(shapes)[:3]))}"
                "); set dataset_options.image_size to resize them"
            )
        stacked = np.stack(decoded)
        arrays[split] = stacked[:, None] if gray else stacked.transpose(0, 3, 1, 2)
    if arrays["train"].shape[1:] != arrays["test"].shape[1:]:
        raise ValueError(
            f"image_folder: train images are {arrays['train'].shape[2:]} but test images {arrays['test'].shape[2:]} "
            f"under {base}; set dataset_options.image_size"
        )
    x_train, x_test = standardise(arrays["train"], arrays["test"])
    y_train, y_test = (np.array([label for _, label in items[s]], dtype=np.int64) for s in ("train", "test"))
    return ArrayDataset(base.name, x_train, y_train, x_test, y_test, len(class_names), class_names=class_names)


# ----------------------------------------------------------------------------------------------- torchvision

# torchvision's class -> the files it reads under root (for the message when they are missing)
_MNIST_FILES = "{folder}/raw/{{train,t10k}}-{{images-idx3,labels-idx1}}-ubyte"
TORCHVISION = {
    "MNIST": _MNIST_FILES.format(folder="MNIST"),
    "FashionMNIST": _MNIST_FILES.format(folder="FashionMNIST"),
    "KMNIST": _MNIST_FILES.format(folder="KMNIST"),
    "EMNIST": "EMNIST/raw/emnist-<split>-{train,test}-{images-idx3,labels-idx1}-ubyte (the gzip.zip's files, unzipped)",
    "CIFAR10": "cifar-10-batches-py/ (the python version, official files: torchvision checks their md5)",
    "CIFAR100": "cifar-100-python/ (the python version, official files: torchvision checks their md5)",
    "SVHN": "train_32x32.mat and test_32x32.mat (official files: torchvision checks their md5)",
    "USPS": "usps.bz2 and usps.t.bz2",
}
EMNIST_SPLITS = ("byclass", "bymerge", "balanced", "letters", "digits", "mnist")


class TorchvisionOptions(DownloadOptions):
    name: str = Field(description=f"torchvision's dataset class: {', '.join(TORCHVISION)}")
    split: str | None = Field(
        default=None,
        validate_default=True,
        description="EMNIST's split, needed there and refused elsewhere: byclass, bymerge, balanced, letters, "
        "digits, mnist",
    )

    @field_validator("name")
    @classmethod
    def _supported(cls, value: str) -> str:
        if value not in TORCHVISION:
            raise ValueError(f"unknown torchvision dataset {value!r}; supported: {', '.join(TORCHVISION)}")
        return value

    @field_validator("split")
    @classmethod
    def _emnist_only(cls, value: str | None, info: ValidationInfo) -> str | None:
        name = info.data.get("name")  # absent when name was refused
        if name == "EMNIST" and value not in EMNIST_SPLITS:
            raise ValueError(f"EMNIST needs a split: {', '.join(EMNIST_SPLITS)}")
        if name not in (None, "EMNIST") and value is not None:
            raise ValueError(f"only EMNIST takes a split, not {name}")
        return value


def torchvision_dataset(root: str | None = None, options: TorchvisionOptions | None = None) -> ArrayDataset:
    """torchvision.datasets.<name>(root), both splits, as arrays; its files fetched first with download: true."""
    assert options is not None  # load_dataset validates dataset_options into TorchvisionOptions
    if root is None:
        raise FileNotFoundError(f"torchvision {options.name}: no root given (set `root`: the folder you would pass "
                                "torchvision as its root)")  # fmt: skip
    if options.download:
        targets, plan = torchvision_files(options.name, options.split)
        ensure_files(f"torchvision {options.name}", root, targets, options, lambda: plan, TORCHVISION[options.name])
    return _torchvision(options.name, _absolute(root), options.split, options.download)


register_builtin("torchvision", torchvision_dataset, options=TorchvisionOptions)


def torchvision_files(name: str, split: str | None) -> tuple[tuple[str, ...], Plan]:
    """The files under root that torchvision's class `name` reads (for the splits used here: train and test), and
    how they are fetched: names, URLs and md5s from torchvision's own class attributes, laid out as its
    download=True lays them out."""
    import torchvision

    source = getattr(torchvision.datasets, name)
    if name in ("MNIST", "FashionMNIST", "KMNIST"):  # <Name>/raw/X.gz from each mirror in turn, gunzipped beside it
        folder = f"{name}/raw"
        files = tuple(f"{folder}/{file.removesuffix('.gz')}" for file, _ in source.resources)
        mirrors = source.mirrors  # base URLs, the file's name appended (torchvision's convention, download_url's)
        resources = tuple(Resource(file, md5, tuple(m + file for m in mirrors)) for file, md5 in source.resources)
        return files, Plan(folder, resources, "gunzip")
    if name == "EMNIST":  # one zip of every split's .gz files, gunzipped into EMNIST/raw
        folder = "EMNIST/raw"
        kinds = ("train-images-idx3", "train-labels-idx1", "test-images-idx3", "test-labels-idx1")
        files = tuple(f"{folder}/emnist-{split}-{kind}-ubyte" for kind in kinds)
        resource = Resource(source.url.rsplit("/", 1)[-1], source.md5, (source.url,))
        return files, Plan(folder, (resource,), "unzip_gunzip")
    if name in ("CIFAR10", "CIFAR100"):  # the python version's tar.gz, unpacked into root
        listed = [file for file, _ in source.train_list + source.test_list] + [source.meta["filename"]]
        files = tuple(f"{source.base_folder}/{file}" for file in listed)
        return files, Plan("", (Resource(source.filename, source.tgz_md5, (source.url,)),), "untar")
    entries = [source.split_list[part] for part in ("train", "test")]  # SVHN, USPS: read as fetched, in root
    return tuple(file for _, file, _ in entries), Plan("", tuple(Resource(f, md5, (url,)) for url, f, md5 in entries))


@functools.lru_cache(maxsize=4)
def _torchvision(name: str, root: str, split: str | None = None, download: bool = False) -> ArrayDataset:
    splits = [_torchvision_split(name, root, split, train, download) for train in (True, False)]
    (x_train, y_train, _), (x_test, y_test, classes) = splits
    if split == "letters":  # labels 1..26: torchvision's class 0 ("N/A") holds no image
        y_train, y_test, classes = np.asarray(y_train) - 1, np.asarray(y_test) - 1, classes[1:]
    # K from the labels (the largest + 1), not from torchvision's class list: a copy holding fewer classes gets a
    # head of its own size; a class of 0..K-1 without a training sample is refused (check_classes)
    arrays = {"x_train": x_train, "y_train": y_train, "x_test": x_test, "y_test": y_test}
    x_train, y_train, x_test, y_test, count = check_arrays(f"torchvision {name}: {root}", arrays, scale_uint8=True)
    names = tuple(str(c) for c in classes[:count]) if len(classes) >= count else ()
    label = f"emnist_{split}" if split else name.lower()
    return ArrayDataset(label, x_train, y_train, x_test, y_test, count, class_names=names)


def _torchvision_split(
    name: str, root: str, split: str | None, train: bool, download: bool = False
) -> tuple[np.ndarray, np.ndarray, list]:
    """One split as uint8 images (N, C, H, W), labels and the class names (empty where torchvision has none);
    `download`: dataset_options.download was set (the advice then is not to set it)."""
    import torchvision

    kwargs: dict[str, Any] = {"split": "train" if train else "test"} if name == "SVHN" else {"train": train}
    if split is not None:
        kwargs["split"] = split
    try:
        data = getattr(torchvision.datasets, name)(root, download=False, **kwargs)
    except (RuntimeError, OSError) as error:  # RuntimeError: "Dataset not found or corrupted. You can use ..."
        fix = (
            "remove them to have download: true fetch them again, from the official site or a dataset_options."
            "download_url serving the official files"
            if download
            else "set dataset_options.download: true to fetch them"
        )
        raise FileNotFoundError(
            f"torchvision {name}: not found or corrupted under {root} ({str(error).split('. ')[0]}); expected "
            f"{TORCHVISION[name]} there, as torchvision downloads them; {fix}"
        ) from None
    except (ValueError, AssertionError, EOFError, KeyError, TypeError, pickle.UnpicklingError) as error:
        raise ValueError(
            f"torchvision {name}: malformed files under {root} ({type(error).__name__}: {error!s:.200}); expected "
            f"{TORCHVISION[name]}"
        ) from None
    x = np.asarray(data.data)
    y = np.asarray(data.targets if hasattr(data, "targets") else data.labels).reshape(-1)  # SVHN squeezes N=1 to ()
    if x.ndim == 4 and x.shape[-1] in (1, 3) and x.shape[1] not in (1, 3):  # CIFAR: (N, H, W, C)
        x = x.transpose(0, 3, 1, 2)
    return x, y, list(getattr(data, "classes", None) or [])
