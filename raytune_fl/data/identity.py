"""What data a run trained on, as a tracker records it: a readable name, a content digest, where it came from,
and the partition settings (plain Python and numpy; tracking/ turns it into an MLflow dataset input).

Two runs have the same digest exactly when they saw the same images, labels and client split (train and
validation shares), so filtering runs by digest never mixes partitions, seeds or data roots.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from raytune_fl.data.datasets import ArrayDataset

DIGEST_CHARS = 16  # MLflow caps a dataset digest at 36 characters; 64 bits tell partitions apart


@dataclass(frozen=True)
class DataIdentity:
    name: str  # e.g. mnist5k/dirichlet-0.1/10-clients: filterable in MLflow (dataset.name LIKE 'mnist5k/%')
    digest: str
    source: dict[str, Any]  # the registered loader and, for file-backed data, its root
    partition: dict[str, Any]  # the partition settings as configured
    sizes: dict[str, int] = field(default_factory=dict)  # train / validation / test samples, clients
    shape: tuple[int, ...] = ()  # one image: (C, H, W)
    num_classes: int = 0
    layout: str = ""  # how the source laid its images out (npz, a plugin's arrays): nchw or nhwc; "" not read

    @property
    def profile(self) -> dict[str, Any]:
        """What the MLflow UI shows for the dataset: the split sizes, the class count, one image's shape (and the
        source's layout, where one was read), the partition settings."""
        shown = {"num_classes": self.num_classes, "image_shape": list(self.shape)}
        return {**self.sizes, **shown, **({"layout": self.layout} if self.layout else {}), "partition": self.partition}


def partition_label(partition: dict[str, Any]) -> str:
    """dirichlet-0.1/10-clients, shards-2/20-clients, iid/10-clients, flwr-IidPartitioner/10-clients: the partition in
    a dataset name."""
    kind = str(partition["kind"])
    if kind in ("dirichlet", "quantity_skew"):
        kind = f"{kind}-{partition['alpha']:g}"
    elif kind == "shards":
        kind = f"{kind}-{partition['classes_per_client']}"
    elif kind == "flwr":  # flwr-NaturalIdPartitioner/62-clients
        kind = f"{kind}-{partition['partitioner']}"
    return f"{kind}/{partition['clients']}-clients"  # not-a-metric: the partition's setting


def data_identity(
    dataset: ArrayDataset,
    train_parts: list[np.ndarray],
    val_parts: list[np.ndarray],
    partition: dict[str, Any],
    root: str | None = None,
    options: dict[str, Any] | None = None,
    test_parts: list[np.ndarray] | None = None,
) -> DataIdentity:
    """The identity of a dataset split among clients; `partition` is the partition config as a dict, `root` and
    `options` (dataset_options: an npz's path) where the data was read from, `test_parts` the clients' own test
    parts (partition.test_fraction; none or empty: the identity is the one without them)."""
    test_parts = list(test_parts or []) if any(len(part) for part in test_parts or []) else []
    digest = hashlib.blake2b(digest_size=DIGEST_CHARS // 2)
    for array in (dataset.x_train, dataset.y_train, dataset.x_test, dataset.y_test):
        digest.update(str((array.dtype.str, array.shape)).encode())
        digest.update(np.ascontiguousarray(array).data)
    # the split itself: which sample went to which client, and to what
    for parts in (train_parts, val_parts, test_parts):
        for part in parts:
            digest.update(np.asarray(part, dtype=np.int64).tobytes())
            digest.update(b"|")
    read_from: dict[str, object] = {
        **({"root": root} if root else {}),
        **({"options": dict(options)} if options else {}),
    }
    source = {"dataset": dataset.name, **(read_from or {"embedded": True})}
    sizes = {
        "train_samples": int(sum(len(p) for p in train_parts)),
        "val_samples": int(sum(len(p) for p in val_parts)),
        "test_samples": len(dataset.y_test),
        "clients": len(train_parts),  # not-a-metric: the data set's profile
        **({"client_test_samples": int(sum(len(p) for p in test_parts))} if test_parts else {}),
    }
    return DataIdentity(
        name=f"{dataset.name}/{partition_label(partition)}",
        digest=digest.hexdigest(),
        source=source,
        partition=dict(partition),
        sizes=sizes,
        shape=tuple(int(s) for s in dataset.x_train.shape[1:]),
        num_classes=dataset.num_classes,
        layout=dataset.layout,
    )


def source_text(identity: DataIdentity) -> str:
    return json.dumps(identity.source, sort_keys=True)
