"""``dataset: hf``: a Hugging Face ``datasets`` table (an image column, or a text column, and a label column) as
arrays.

``path`` is read offline when it is a local file or folder: a parquet, CSV or JSON file (one split, ``train``),
a folder ``datasets.load_dataset`` reads (parquet, CSV or JSON files named by split: ``train-*.parquet``,
``test/...``; an imagefolder tree ``train/<class>/<image>``), or a ``save_to_disk`` folder (``load_from_disk``).
Anything else is a hub id, fetched only with ``download: true`` into ``<root>/huggingface`` (the project's opt-in
downloads: off, a run never reaches the network). Images (PIL images, ``{bytes, path}`` records, PNG bytes, file
paths, of any mode) become one channel when every image is grayscale, else RGB (alpha dropped; 16-bit grayscale
scaled to 8 bits), resized to ``image_size`` where given (else one size is required), standardised per channel
with the train split's statistics as every image loader is. Labels: a ``ClassLabel``'s ids and names; integers
as given (K = the largest + 1, as npz's); strings numbered in sorted order, the strings kept as class names.
``text`` (in place of ``image``) reads a column of strings of one length as character ids over ``vocab`` (LEAF
Shakespeare's 80 characters unless set), its label column the next character (data/text.py).
``columns`` are kept, per training sample, in ``columns_train`` (what ``partition_by`` names). ``datasets`` is
imported inside the loader: importing this module stays light.
"""

from __future__ import annotations

import functools
import io
import re
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import Field, ValidationInfo, field_validator, model_validator

from raytune_fl.data.datasets import ArrayDataset, check_arrays, register_builtin
from raytune_fl.data.files import _absolute, _Options
from raytune_fl.data.text import LEAF_CHARACTERS, check_text, encode, encode_labels

GRAY_MODES = frozenset({"1", "L", "LA", "La"})
WIDE_MODES = frozenset({"I;16", "I;16L", "I;16B", "I;16N"})  # 16-bit grayscale: scaled to 8 bits
BUILDERS = {".parquet": "parquet", ".csv": "csv", ".json": "json", ".jsonl": "json", ".arrow": "arrow"}
HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?")
SAVED_MARKERS = ("dataset_dict.json", "state.json")  # what save_to_disk writes (a DatasetDict, a Dataset)
HUB_CACHE = "huggingface"  # the folder under root a hub dataset is cached in
Format = Literal["parquet", "csv", "json", "arrow", "imagefolder", "saved"]


def is_hub_id(path: str) -> bool:
    """`path` names no local file or folder (from the working directory) and looks like `owner/name`."""
    if Path(path).expanduser().exists() or path.startswith((".", "~", "/")):
        return False
    return HUB_ID.fullmatch(path) is not None and Path(path).suffix.lower() not in BUILDERS


class HfOptions(_Options):
    path: str = Field(
        description="a hub id (owner/name: read only with download: true), or a local parquet/CSV/JSON file, a "
        "folder of them named by split, an imagefolder tree or a save_to_disk folder (made absolute)"
    )
    image: str = Field("image", description="the column of images (PIL images, {bytes, path}, PNG bytes or paths)")
    label: str = Field("label", description="the column of labels: a ClassLabel, integers 0..K-1 or strings")
    text: str | None = Field(
        None,
        description="a column of strings in place of images (all of one length L), read as characters over vocab: "
        "x (N, L) token ids, and the label column one character each (the next character: Shakespeare's task)",
    )
    vocab: str | None = Field(
        None,
        description="the characters a text column is encoded over, id = position (a character outside it is "
        "refused); unset: LEAF Shakespeare's 80 characters",
    )
    train_split: str = Field("train", description="the split the clients train on")
    test_split: str | None = Field(
        "test", description="the split the global model is tested on (one the data holds; or set test_fraction)"
    )
    test_fraction: float | None = Field(
        None,
        gt=0,
        lt=1,
        description="carve the test set from train_split instead (a seeded random share of its rows), for data "
        "with one split (a single file, FEMNIST on the hub); unset: test_split is read",
    )
    split_seed: int = Field(0, description="the seed of test_fraction's draw")
    columns: tuple[str, ...] = Field(
        (), description="per-sample columns kept for the training split (e.g. [writer_id]): what partition_by names"
    )
    image_size: int | tuple[int, int] | None = Field(
        None, description="resize every image to this size (one number: square); unset: the images must share one"
    )
    format: Format | None = Field(
        None,
        description="how to read a local path: parquet, csv, json, arrow, imagefolder (datasets' builders) or saved "
        "(save_to_disk); unset: from the file's suffix, or the folder's contents",
    )
    config: str | None = Field(None, description="a hub dataset's configuration name, where it has several")
    download: bool = Field(
        False,
        description="fetch a hub dataset into <root>/huggingface (off: path must be local, and a run never reaches "
        "the network)",
    )

    @field_validator("path")
    @classmethod
    def _local_made_absolute(cls, value: str) -> str:
        return value if is_hub_id(value) else _absolute(value)

    @field_validator("vocab")
    @classmethod
    def _distinct(cls, value: str | None) -> str | None:
        if value is not None and (len(value) < 2 or len(set(value)) != len(value)):
            raise ValueError("must hold at least 2 characters, each once")
        return value

    @field_validator("image_size")
    @classmethod
    def _positive(cls, value: int | tuple[int, int] | None, info: ValidationInfo) -> int | tuple[int, int] | None:
        sizes = (value,) if isinstance(value, int) else value or ()
        if any(size < 1 for size in sizes):
            raise ValueError(f"must be positive (got {value})")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> HfOptions:
        if is_hub_id(self.path) and not self.download:
            raise ValueError(
                f"path {self.path!r} is not a local file or folder, so it names a Hugging Face hub dataset, fetched "
                "only with dataset_options.download: true (into <base.root>/huggingface); or give a local path"
            )
        if self.test_split is None and self.test_fraction is None:
            raise ValueError("test_split: null needs test_fraction, the share of train_split to test on")
        if self.test_fraction is not None and "test_split" in self.model_fields_set and self.test_split is not None:
            raise ValueError("test_fraction carves the test set from train_split: set test_split: null, or drop one")
        return self


def hf(root: str | None = None, options: HfOptions | None = None) -> ArrayDataset:
    """A Hugging Face dataset (dataset_options.path: local files, or a hub id with download: true)."""
    assert options is not None  # load_dataset validates dataset_options into HfOptions
    if is_hub_id(options.path) and root is None:
        raise FileNotFoundError(
            f"hf: {options.path}: download: true needs base.root, the folder the hub's files are cached in"
        )
    return _hf(options.model_dump_json(exclude_unset=True), None if root is None else _absolute(root))


register_builtin("hf", hf, options=HfOptions)


@functools.lru_cache(maxsize=4)
def _hf(options_json: str, root: str | None) -> ArrayDataset:
    options = HfOptions.model_validate_json(options_json)
    splits = read_splits(options, root)
    name = Path(options.path).stem if not is_hub_id(options.path) else options.path.rsplit("/", 1)[-1]
    return to_arrays(splits, options, name)


# ------------------------------------------------------------------------------------------------ reading


def read_splits(options: HfOptions, root: str | None) -> dict[str, Any]:
    """split name -> its `datasets.Dataset`, held in memory (a local load's Arrow cache is a temporary folder)."""
    import datasets

    datasets.disable_progress_bars()
    path = options.path
    try:
        if is_hub_id(path):
            assert root is not None  # hf() refuses a hub id without root
            cache = str(Path(root) / HUB_CACHE)
            return _as_splits(datasets.load_dataset(path, options.config, cache_dir=cache))
        source = Path(path)
        if not source.exists():
            raise FileNotFoundError(f"hf: no such file or folder: {source} (dataset_options.path)")
        if options.format == "saved" or (options.format is None and _saved(source)):
            return _as_splits(datasets.load_from_disk(str(source), keep_in_memory=True))
        builder, where = _builder(source, options.format)
        with tempfile.TemporaryDirectory(prefix="raytune-fl-hf-") as cache:
            return _as_splits(datasets.load_dataset(builder, **where, cache_dir=cache, keep_in_memory=True))
    except (datasets.exceptions.DatasetsError, ValueError, OSError) as error:
        if str(error).startswith("hf: "):
            raise
        kind = FileNotFoundError if isinstance(error, FileNotFoundError) else ValueError
        raise kind(f"hf: {path} (dataset_options.path) could not be read: {str(error).splitlines()[0]:.300}") from None


def _saved(folder: Path) -> bool:
    return folder.is_dir() and any((folder / marker).is_file() for marker in SAVED_MARKERS)


def _builder(source: Path, format: str | None) -> tuple[str, dict[str, str]]:
    """load_dataset's arguments: a file through its builder (one split, train); a folder as datasets reads it
    (its builder and splits from the files' suffixes and names), or through `format`'s builder."""
    if source.is_file():
        builder = format or BUILDERS.get(source.suffix.lower())
        if builder is None:
            raise ValueError(
                f"hf: {source}: unknown file type {source.suffix!r}; set dataset_options.format ("
                f"{', '.join(sorted(set(BUILDERS.values())))})"
            )
        return builder, {"data_files": str(source)}
    return (format, {"data_dir": str(source)}) if format else (str(source), {})


def _as_splits(loaded: Any) -> dict[str, Any]:
    import datasets

    if isinstance(loaded, datasets.DatasetDict):
        return dict(loaded)
    return {"train": loaded}  # a single Dataset (save_to_disk of one split)


# ------------------------------------------------------------------------------------------------ arrays


def to_arrays(splits: Mapping[str, Any], options: HfOptions, name: str) -> ArrayDataset:
    """The chosen splits' image and label columns as the array contract, `options.columns` kept for training."""
    source = f"hf: {options.path}"
    tables = pick_splits(splits, options, source)
    if options.text is not None:
        return text_arrays(tables, options, name, source)
    for split, table in tables.items():
        _need(table, options.image, "image", split, source)
        _need(table, options.label, "label", split, source)
    for column in options.columns:
        _need(tables["train"], column, "columns", "train", source)
    size = (options.image_size, options.image_size) if isinstance(options.image_size, int) else options.image_size
    base = Path(options.path) if Path(options.path).is_dir() else Path(options.path).parent  # of relative paths
    decoded = {split: decode_images(table, options.image, base, size, f"{source}: {split} split") for split, table
               in tables.items()}  # fmt: skip
    pixels = stack_images(decoded, options.image, source)
    labels, class_names, classes = label_ids(tables, options.label, source)
    columns = {column: column_values(tables["train"], column, source) for column in options.columns}
    if options.test_fraction is not None:  # one split: the test set carved from it
        train, test = carve(len(labels["train"]), options.test_fraction, options.split_seed, source)
        pixels = {"train": pixels["train"][train], "test": pixels["train"][test]}
        labels = {"train": labels["train"][train], "test": labels["train"][test]}
        columns = {column: values[train] for column, values in columns.items()}
    arrays = {
        "x_train": pixels["train"],
        "y_train": labels["train"],
        "x_test": pixels["test"],
        "y_test": labels["test"],
    }
    where = f"{source}: label column {options.label!r}"  # check_arrays refuses only labels here: pixels are uint8
    x_train, y_train, x_test, y_test, count = check_arrays(
        where, arrays, num_classes=classes, scale_uint8=True, class_names=class_names
    )
    names = class_names if len(class_names) == count else ()
    return ArrayDataset(name, x_train, y_train, x_test, y_test, count, columns_train=columns, class_names=names)


def text_arrays(tables: Mapping[str, Any], options: HfOptions, name: str, source: str) -> ArrayDataset:
    """The text column as (N, L) character ids over the vocabulary and the label column's single characters as
    the next character's id (K = the vocabulary's size), `options.columns` kept for training."""
    assert options.text is not None
    vocab = tuple(options.vocab) if options.vocab is not None else LEAF_CHARACTERS
    x, y = {}, {}
    for split, table in tables.items():
        _need(table, options.text, "text", split, source)
        _need(table, options.label, "label", split, source)
        where = f"{source}: {split} split"
        x[split] = encode(list(table[options.text]), vocab, f"{where}, column {options.text!r} (dataset_options.text)")
        y[split] = encode_labels(list(table[options.label]), vocab, f"{where}, column {options.label!r}")
    for column in options.columns:
        _need(tables["train"], column, "columns", "train", source)
    columns = {column: column_values(tables["train"], column, source) for column in options.columns}
    if options.test_fraction is not None:  # one split: the test set carved from it
        train, test = carve(len(y["train"]), options.test_fraction, options.split_seed, source)
        x, y = (
            {"train": x["train"][train], "test": x["train"][test]},
            {"train": y["train"][train], "test": y["train"][test]},
        )
        columns = {column: values[train] for column, values in columns.items()}
    check_text(source, x["train"], y["train"], x["test"], y["test"], vocab)
    return ArrayDataset(
        name, x["train"], y["train"], x["test"], y["test"], len(vocab), columns_train=columns, vocab=vocab
    )


def pick_splits(splits: Mapping[str, Any], options: HfOptions, source: str) -> dict[str, Any]:
    """{"train": .., "test": ..} (no test where test_fraction carves it), each named split refused where the data
    lacks it or it is empty, the message listing the splits the data has."""
    wanted = {"train": options.train_split}
    if options.test_fraction is None:
        wanted["test"] = str(options.test_split)
    tables = {}
    for role, split in wanted.items():
        if split not in splits:
            hint = "; or set dataset_options.test_fraction to carve a test set from train_split" * (role == "test")
            raise ValueError(
                f"{source}: no split {split!r} (dataset_options.{role}_split); the data has: {', '.join(splits)}{hint}"
            )
        if len(splits[split]) == 0:
            raise ValueError(f"{source}: split {split!r} (dataset_options.{role}_split) is empty")
        tables[role] = splits[split]
    return tables


def _need(table: Any, column: str, option: str, split: str, source: str) -> None:
    if column not in table.column_names:
        raise ValueError(
            f"{source}: the {split} split has no column {column!r} (dataset_options.{option}); its columns: "
            f"{', '.join(table.column_names)}"
        )


def decode_images(table: Any, column: str, base: Path, size: tuple[int, int] | None, where: str) -> list[np.ndarray]:
    """Each row's image as uint8 pixels: (H, W) where grayscale, else (H, W, 3); errors name the row."""
    import datasets

    if isinstance(table.features[column], datasets.Image):  # the raw {bytes, path}: decoded here, any mode
        table = table.cast_column(column, datasets.Image(decode=False))
    decoded = []
    for row, value in enumerate(table[column]):
        try:
            decoded.append(decode_image(value, base, size))
        except (OSError, ValueError) as error:
            raise type(error)(f"{where}, column {column!r} (dataset_options.image), row {row}: {error}") from None
    return decoded


def decode_image(value: Any, base: Path, size: tuple[int, int] | None) -> np.ndarray:
    """One image (a PIL image, {bytes, path}, bytes, or a path, relative to `base`) as 8-bit L or RGB pixels:
    grayscale stays one channel (16-bit scaled to 8), every other mode becomes RGB (alpha dropped)."""
    from PIL import Image

    with open_image(value, base) as image:
        if image.mode in WIDE_MODES:
            wide = np.asarray(image).astype(np.uint32)
            image = Image.fromarray(((wide * 255 + 32767) // 65535).astype(np.uint8))  # 0..65535 -> 0..255
        elif image.mode in ("I", "F"):
            raise ValueError(f"mode {image.mode} (32-bit pixels) has no fixed range; store 8- or 16-bit images")
        else:
            image = image.convert("L" if image.mode in GRAY_MODES else "RGB")
        if size is not None and image.size != (size[1], size[0]):
            image = image.resize((size[1], size[0]), Image.Resampling.BILINEAR)
        return np.asarray(image, dtype=np.uint8)


def open_image(value: Any, base: Path) -> Any:
    from PIL import Image

    if isinstance(value, Image.Image):
        return value
    data, path = (value.get("bytes"), value.get("path")) if isinstance(value, Mapping) else (None, None)
    if isinstance(value, bytes):
        data = value
    elif isinstance(value, str):
        path = value
    elif not isinstance(value, Mapping):
        raise ValueError(f"holds a {type(value).__name__}; images are PIL images, {{bytes, path}}, bytes or paths")
    if data:
        return Image.open(io.BytesIO(data))
    if not path:
        raise ValueError("an empty image (neither bytes nor a path)")
    file = Path(path) if Path(path).is_absolute() else base / path
    if not file.is_file():
        raise FileNotFoundError(f"no image file {file}")
    return Image.open(file)


def stack_images(decoded: Mapping[str, list[np.ndarray]], column: str, source: str) -> dict[str, np.ndarray]:
    """Each split's images as uint8 (N, C, H, W): one channel when every image of both splits is grayscale, else
    RGB (grayscale ones repeated); one size in each split and across them, else refused naming image_size."""
    colour = any(pixels.ndim == 3 for images in decoded.values() for pixels in images)
    stacked = {}
    for split, images in decoded.items():
        if colour:
            images = [np.repeat(p[..., None], 3, axis=2) if p.ndim == 2 else p for p in images]
        sizes = sorted({p.shape[:2] for p in images})
        if len(sizes) > 1:
            shown = ", ".join(f"{h}x{w}" for h, w in sizes[:4])
            raise ValueError(
                f"{source}: the {split} split's images (column {column!r}) differ in size (H x W: {shown}); set "
                "dataset_options.image_size to resize them"
            )
        array = np.stack(images)
        stacked[split] = array.transpose(0, 3, 1, 2) if colour else array[:, None]
    shapes = {split: array.shape[2:] for split, array in stacked.items()}
    if len(set(shapes.values())) > 1:
        raise ValueError(
            f"{source}: column {column!r}: train images are {shapes['train']} but test images {shapes['test']}; set "
            "dataset_options.image_size"
        )
    return stacked


def label_ids(
    tables: Mapping[str, Any], column: str, source: str
) -> tuple[dict[str, np.ndarray], tuple[str, ...], int | None]:
    """Each split's labels as ids, the class names and K: a ClassLabel's own; strings numbered in sorted order
    over both splits (the strings the names); numbers as they are (K from check_arrays: the largest + 1)."""
    import datasets

    feature = tables["train"].features[column]
    if isinstance(feature, datasets.ClassLabel):
        others = [t.features[column] for t in tables.values() if t.features[column] != feature]
        if others:
            raise ValueError(f"{source}: label column {column!r} is a ClassLabel of other names in the test split")
        ids = {split: np.asarray(list(table[column]), dtype=np.int64) for split, table in tables.items()}
        return ids, tuple(feature.names), len(feature.names)
    values = {split: list(table[column]) for split, table in tables.items()}
    every = [v for vs in values.values() for v in vs]
    if all(isinstance(v, str) for v in every):
        names = tuple(sorted(set(every)))
        index = {name: i for i, name in enumerate(names)}
        return {s: np.array([index[v] for v in vs], dtype=np.int64) for s, vs in values.items()}, names, len(names)
    if all(isinstance(v, int | float | np.number) for v in every):  # floats: check_arrays takes whole ones
        arrays = {split: np.asarray(vs) for split, vs in values.items()}
        return {s: a.astype(np.int64) if a.dtype == bool else a for s, a in arrays.items()}, (), None
    if any(v is None for v in every):
        kind = "empty labels (None)"
    elif all(isinstance(v, int | float | np.number | str) for v in every):
        kind = "both numbers and strings"
    else:
        kind = f"{type(next(v for v in every if not isinstance(v, int | float | np.number | str))).__name__} values"
    raise ValueError(
        f"{source}: label column {column!r} (dataset_options.label) holds {kind}; labels are a ClassLabel, integers "
        "0..K-1 or strings"
    )


def column_values(table: Any, column: str, source: str) -> np.ndarray:
    """A kept column of the training split as a 1-D array (numbers or strings), one value per sample."""
    values = np.asarray(list(table[column]))
    if values.ndim != 1 or values.dtype == object:
        raise ValueError(
            f"{source}: column {column!r} (dataset_options.columns) holds values of shape {values.shape[1:]} or "
            "empty ones; a column a partition_by names holds one number or string per sample"
        )
    return values


def carve(n: int, fraction: float, seed: int, source: str) -> tuple[np.ndarray, np.ndarray]:
    """(train rows, test rows) of a seeded permutation of n rows: round(n x fraction) to test, at least one each."""
    if n < 2:
        raise ValueError(f"{source}: dataset_options.test_fraction needs at least 2 rows in train_split, got {n}")
    order = np.random.default_rng(seed).permutation(n)
    n_test = min(n - 1, max(1, round(n * fraction)))
    return np.sort(order[n_test:]), np.sort(order[:n_test])
