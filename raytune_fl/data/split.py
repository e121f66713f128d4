"""Per-client helpers: a seeded train/validation(/test) split and label histograms of a partition."""

from __future__ import annotations

import numpy as np


def train_val_split(indices: np.ndarray, val_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Shuffle ``indices`` with ``seed`` and hold out about ``val_fraction`` of them; both parts sorted.

    Validation gets ``round(val_fraction * n)`` items, but at least 1 when ``val_fraction > 0`` and
    ``n >= 2`` (so a tuner always has something to score) and never all of them (training keeps >= 1).
    """
    if not 0.0 <= val_fraction < 1.0:
        raise ValueError(f"val_fraction must be in [0, 1), got {val_fraction!r}")
    indices = np.asarray(indices)
    n = len(indices)
    n_val = round(val_fraction * n)
    if val_fraction > 0 and n >= 2:
        n_val = max(n_val, 1)
    n_val = min(n_val, max(n - 1, 0))
    shuffled = np.random.default_rng(seed).permutation(indices)
    return np.sort(shuffled[n_val:]), np.sort(shuffled[:n_val])


def train_val_test_split(
    indices: np.ndarray, val_fraction: float, test_fraction: float, seed: int, test_seed: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`train_val_split`, then a test part carved out of its training part: train, validation, test, each sorted.

    Validation is exactly `train_val_split`'s (same seed, same samples), and with ``test_fraction`` 0 so is
    training: the test part only ever takes from training, with its own ``test_seed``. Test gets
    ``round(test_fraction * n)`` of the client's ``n`` samples, at least 1 when ``test_fraction > 0`` and training
    holds 2, and never all of training (training keeps >= 1).
    """
    if not 0.0 <= test_fraction < 1.0:
        raise ValueError(f"test_fraction must be in [0, 1), got {test_fraction!r}")
    train, val = train_val_split(indices, val_fraction, seed)
    if test_fraction == 0:
        return train, val, train[:0]
    n_test = max(round(test_fraction * len(np.asarray(indices))), 1 if len(train) >= 2 else 0)
    n_test = min(n_test, max(len(train) - 1, 0))
    shuffled = np.random.default_rng(test_seed).permutation(train)
    return np.sort(shuffled[n_test:]), val, np.sort(shuffled[:n_test])


def label_histogram(labels: np.ndarray, parts: list[np.ndarray], num_classes: int) -> np.ndarray:
    """Counts of each class per client: shape (len(parts), num_classes), int64."""
    labels = np.asarray(labels)
    if labels.size and not 0 <= labels.min() <= labels.max() < num_classes:
        raise ValueError(f"labels must lie in [0, {num_classes}), got {labels.min()}..{labels.max()}")
    hist = np.zeros((len(parts), num_classes), dtype=np.int64)
    for i, p in enumerate(parts):
        hist[i] = np.bincount(labels[np.asarray(p, dtype=np.int64)], minlength=num_classes)
    return hist
