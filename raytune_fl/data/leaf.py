"""``dataset: leaf``: LEAF's JSON layout (FEMNIST and Shakespeare as LEAF's scripts write them), each sample's
writer kept.

``path`` holds ``train/`` and ``test/`` (LEAF's ``data/`` folder, or the folder above it), each of ``*.json`` files
``{"users": [...], "num_samples": [...], "user_data": {user: {"x": [...], "y": [...]}}}``: x rows are flattened
grayscale images of floats in [0, 1] (FEMNIST: 784 = 28 x 28), y integer labels (K = the largest + 1, as npz's).
The images are standardised with the train split's statistics as every image loader's are, and
``columns_train["writer_id"]`` holds each training sample's user, so ``partition_by: writer_id`` makes one client
per writer. Shakespeare's x rows are strings of 80 characters and y the next character: both become ids over
LEAF's 80 characters (data/text.py; a text dataset, K = 80), and its users (speakers) the writer_id. Sent140
(word lists) and CelebA (image names) are not read.
"""

from __future__ import annotations

import functools
import json
import math
from pathlib import Path

import numpy as np
from pydantic import Field, field_validator

from raytune_fl.data.datasets import ArrayDataset, check_arrays, register_builtin, standardise
from raytune_fl.data.files import _absolute, _Options
from raytune_fl.data.text import LEAF_CHARACTERS, check_text, encode, encode_labels

WRITER = "writer_id"  # the column a partitioner's partition_by names: one natural client per LEAF user
LAYOUT = "train/*.json and test/*.json in LEAF's format ({users, num_samples, user_data: {user: {x, y}}})"


class LeafOptions(_Options):
    path: str = Field(description="the folder holding LEAF's train/ and test/ JSON files (its data/ folder)")
    image_size: tuple[int, int] | None = Field(
        None, description="(height, width) of an x row; unset: square (FEMNIST's 784 values: 28 x 28)"
    )

    @field_validator("path")
    @classmethod
    def _made_absolute(cls, value: str) -> str:
        return _absolute(value)


def leaf(root: str | None = None, options: LeafOptions | None = None) -> ArrayDataset:
    """LEAF's JSON users (dataset_options.path), one writer_id per training sample."""
    assert options is not None  # load_dataset validates dataset_options into LeafOptions
    return _leaf(options.path, options.image_size)


register_builtin("leaf", leaf, options=LeafOptions)


@functools.lru_cache(maxsize=2)
def _leaf(path: str, size: tuple[int, int] | None) -> ArrayDataset:
    base = _data_folder(Path(path))
    source = f"leaf: {base}"
    (x_train, y_train, writers), (x_test, y_test, _) = (read_split(base / split, source) for split in ("train", "test"))
    name = base.parent.name if base.name == "data" else base.name
    if x_train.dtype == np.int64 or x_test.dtype == np.int64:  # character ids: Shakespeare
        check_text(f"{source}: x", x_train, y_train, x_test, y_test, LEAF_CHARACTERS)
        classes = len(LEAF_CHARACTERS)  # every character may come next, seen in training or not (check_text)
        return ArrayDataset(
            name, x_train, y_train, x_test, y_test, classes, columns_train={WRITER: writers}, vocab=LEAF_CHARACTERS
        )
    shape = image_shape(source, x_train.shape[1], size)
    if x_test.shape[1] != x_train.shape[1]:
        raise ValueError(f"{source}: train x rows hold {x_train.shape[1]} values but test rows {x_test.shape[1]}")
    pixels = [x.reshape(-1, 1, *shape) * np.float32(255) for x in (x_train, x_test)]  # standardise reads 0..255
    scaled = standardise(*pixels)
    arrays = {"x_train": scaled[0], "y_train": y_train, "x_test": scaled[1], "y_test": y_test}
    x_tr, y_tr, x_te, y_te, classes = check_arrays(f"{source}: y", arrays)
    return ArrayDataset(name, x_tr, y_tr, x_te, y_te, classes, columns_train={WRITER: writers})


def _data_folder(path: Path) -> Path:
    """`path`, or its data/ folder (LEAF's dataset folder), whichever holds train/ and test/."""
    for folder in (path, path / "data"):
        if (folder / "train").is_dir() and (folder / "test").is_dir():
            return folder
    raise FileNotFoundError(f"leaf: no train/ and test/ folders under {path} (dataset_options.path); expected {LAYOUT}")


def image_shape(source: str, length: int, size: tuple[int, int] | None) -> tuple[int, int]:
    """(H, W) of a row of `length` values: `size` where given (it must match), else the square."""
    if size is not None:
        if size[0] * size[1] != length:
            raise ValueError(
                f"{source}: dataset_options.image_size {size} is {size[0] * size[1]} values, x rows hold {length}"
            )
        return size
    side = math.isqrt(length)
    if side * side != length:
        raise ValueError(f"{source}: x rows hold {length} values, not a square image; set dataset_options.image_size")
    return side, side


def read_split(folder: Path, source: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A split's JSON files in name order, users in each file's order: x (N, L) float32 (ids int64 for text), y
    (N,), writer (N,)."""
    files = sorted(folder.glob("*.json"))
    if not files:
        raise FileNotFoundError(f"{source}: no .json files under {folder}; expected {LAYOUT}")
    xs, ys, writers = [], [], []
    for file in files:
        for user, x, y in read_users(file):
            xs.append(x)
            ys.append(y)
            writers.extend([user] * len(y))
    if not writers:
        raise ValueError(f"{source}: the files under {folder} hold no samples")
    if len({x.dtype for x in xs}) > 1:
        raise ValueError(f"{source}: the users under {folder} mix images (numbers) and text (strings) in x")
    lengths = sorted({x.shape[1] for x in xs})
    if len(lengths) > 1:
        raise ValueError(f"{source}: x rows under {folder} differ in length ({', '.join(map(str, lengths))})")
    return np.concatenate(xs), np.concatenate(ys), np.asarray(writers)


def read_users(file: Path) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """(user, x (n, L) float32 in [0, 1] or int64 ids, y (n,)) for each user of one LEAF JSON file, checked against
    num_samples."""
    try:
        data = json.loads(file.read_text())
        users, counts, user_data = data["users"], data["num_samples"], data["user_data"]
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise ValueError(
            f"leaf: {file} is not a LEAF JSON file ({type(error).__name__}: {error}); expected {LAYOUT}"
        ) from None
    if len(counts) != len(users):
        raise ValueError(f"leaf: {file}: {len(users)} users but {len(counts)} num_samples")
    read = []
    for user, count in zip(users, counts):
        where = f"leaf: {file}: user {user!r}"
        samples = user_data.get(user)
        if not isinstance(samples, dict) or "x" not in samples or "y" not in samples:
            raise ValueError(f"{where} has no x and y in user_data")
        if count == 0 and not samples["x"] and not samples["y"]:
            continue  # a user without samples adds nothing
        x, y = user_arrays(samples["x"], samples["y"], where)
        if len(y) != count:
            raise ValueError(f"{where}: num_samples says {count}, x and y hold {len(y)}")
        read.append((str(user), x, y))
    return read


def user_arrays(x: object, y: object, where: str) -> tuple[np.ndarray, np.ndarray]:
    """A user's samples: images (rows of pixels in [0, 1]) as float32 rows, or Shakespeare's text (x strings of
    one length, y single characters) as int64 ids over LEAF's 80 characters."""
    if isinstance(x, list) and x and isinstance(x[0], str):
        if not isinstance(y, list) or len(y) != len(x) or not all(isinstance(c, str) for c in y):
            raise ValueError(
                f"{where}: x holds strings, so y must hold as many next characters (Shakespeare's); CelebA's image "
                "names and Sent140 are not read"
            )
        return encode(x, LEAF_CHARACTERS, f"{where}: x"), encode_labels(y, LEAF_CHARACTERS, f"{where}: y")
    try:
        rows = np.asarray(x, dtype=np.float32)
    except (ValueError, TypeError):
        raise ValueError(
            f"{where}: x is not rows of numbers of one length, nor strings (Shakespeare); Sent140's word lists and "
            "CelebA's image names are not read"
        ) from None
    labels = np.asarray(y)
    if rows.ndim != 2 or labels.ndim != 1 or len(rows) != len(labels):
        raise ValueError(
            f"{where}: x must be rows of pixel values and y one label per row, got {rows.shape} and {labels.shape}"
        )
    if len(rows) and (not np.isfinite(rows).all() or rows.min() < 0 or rows.max() > 1):
        raise ValueError(f"{where}: x holds values outside [0, 1]; LEAF's images are pixels / 255")
    return rows, labels
