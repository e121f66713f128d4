"""Split a labelled training set across federated clients (pure numpy, deterministic per seed).

Every partitioner has the signature
``fn(labels, num_clients, *, seed, min_size=1, **kind_specific) -> list[np.ndarray]`` and returns one
sorted int64 array of positions into ``labels`` per client; the parts are disjoint and cover every
position. ``dirichlet`` reproduces WORKLOAD.md "Partition" exactly for the benchmark settings.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from raytune_fl.registry import Registry


class PartitionError(ValueError):
    """A partition request that is invalid or cannot be met; the message says which field and why."""


PARTITIONERS: Registry[Callable[..., list[np.ndarray]]] = Registry("partitioner")


def _check(labels: np.ndarray, num_clients: int, min_size: int) -> np.ndarray:
    labels = np.asarray(labels)
    if labels.ndim != 1 or not (labels.size == 0 or np.issubdtype(labels.dtype, np.integer)):
        raise PartitionError(f"labels must be a 1-D integer array, got shape {labels.shape} {labels.dtype}")
    if labels.size and labels.min() < 0:
        raise PartitionError(f"labels must be non-negative class ids, got min {labels.min()}")
    if isinstance(num_clients, bool) or not isinstance(num_clients, (int, np.integer)) or num_clients < 1:
        raise PartitionError(f"num_clients must be an integer >= 1, got {num_clients!r}")
    if isinstance(min_size, bool) or not isinstance(min_size, (int, np.integer)) or min_size < 0:
        raise PartitionError(f"min_size must be an integer >= 0, got {min_size!r}")
    if num_clients * min_size > len(labels):
        raise PartitionError(
            f"impossible: num_clients={num_clients} x min_size={min_size} = {num_clients * min_size} "
            f"exceeds the {len(labels)} samples; lower num_clients or min_size"
        )
    return labels


@PARTITIONERS.register("iid")
def iid(labels: np.ndarray, num_clients: int, *, seed: int, min_size: int = 1) -> list[np.ndarray]:
    """Shuffle all positions and cut them into ``num_clients`` near-equal parts."""
    labels = _check(labels, num_clients, min_size)
    perm = np.random.default_rng(seed).permutation(len(labels))
    parts = [np.sort(p).astype(np.int64) for p in np.array_split(perm, num_clients)]
    smallest = min(len(p) for p in parts)
    if smallest < min_size:  # unreachable after _check (parts differ by <= 1), kept as a guard
        raise PartitionError(f"iid: smallest client has {smallest} samples < min_size={min_size}")
    return parts


@PARTITIONERS.register("dirichlet")
def dirichlet(
    labels: np.ndarray,
    num_clients: int,
    *,
    seed: int,
    alpha: float,
    min_size: int = 1,
    max_redraws: int = 1000,
) -> list[np.ndarray]:
    """Per-class Dirichlet(alpha) shares, redrawn until every client has >= ``min_size`` samples.

    Smaller alpha means more skewed (non-IID) clients. Draw order and cut arithmetic follow
    WORKLOAD.md so that seed 0 / 10 clients / alpha 0.1 / min_size 10 gives its exact sizes.
    """
    labels = _check(labels, num_clients, min_size)
    if (
        isinstance(alpha, bool)
        or not isinstance(alpha, (int, float, np.number))
        or not (math.isfinite(alpha) and alpha > 0)
    ):
        raise PartitionError(f"alpha must be a finite number > 0, got {alpha!r}")
    if max_redraws < 1:
        raise PartitionError(f"max_redraws must be >= 1, got {max_redraws!r}")

    num_classes = int(labels.max()) + 1 if labels.size else 0
    by_class = [np.flatnonzero(labels == c) for c in range(num_classes)]  # ascending positions
    rng = np.random.default_rng(seed)
    best = -1
    for _ in range(max_redraws):
        # Draw all classes first and check sizes from the cut points alone; build parts only on success.
        all_cuts = []
        sizes = np.zeros(num_clients, dtype=np.int64)
        for idx_c in by_class:
            p = rng.dirichlet(alpha * np.ones(num_clients))
            cuts = (np.cumsum(p) * len(idx_c)).astype(int)[:-1]
            all_cuts.append(cuts)
            sizes += np.diff(np.concatenate(([0], np.clip(cuts, 0, len(idx_c)), [len(idx_c)])))
        best = max(best, int(sizes.min()))
        if sizes.min() >= min_size:
            parts: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
            for idx_c, cuts in zip(by_class, all_cuts):
                for j, chunk in enumerate(np.split(idx_c, cuts)):
                    parts[j].append(chunk)
            return [np.sort(np.concatenate(q)).astype(np.int64) if q else np.zeros(0, np.int64) for q in parts]
    raise PartitionError(
        f"dirichlet: no draw in {max_redraws} gave every client >= min_size={min_size} samples "
        f"(alpha={alpha}, num_clients={num_clients}, {len(labels)} samples; smallest client size in the "
        f"best draw: {best}); raise alpha or lower min_size / num_clients"
    )


def partition(
    kind: str, labels: np.ndarray, num_clients: int, *, seed: int, min_size: int = 1, **kwargs: Any
) -> list[np.ndarray]:
    """Partition with the partitioner registered under ``kind`` (extra kwargs are kind-specific)."""
    return PARTITIONERS.get(kind)(labels, num_clients, seed=seed, min_size=min_size, **kwargs)
