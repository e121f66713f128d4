"""The federation's data: the dataset split among clients, each share split into training and held-out parts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from raytune_fl.config import ExperimentConfig, PartitionConfig
from raytune_fl.data import ArrayDataset, load_dataset, partition, train_val_split
from raytune_fl.data.identity import DataIdentity, data_identity


@dataclass(frozen=True)
class FederatedData:
    dataset: ArrayDataset
    train_parts: list[np.ndarray]  # per client: positions in dataset.x_train used for local training
    val_parts: list[np.ndarray]  # per client: held-out positions; their union is the validation set

    @property
    def num_clients(self) -> int:
        return len(self.train_parts)

    @property
    def val_indices(self) -> np.ndarray:
        return np.sort(np.concatenate(self.val_parts))

    @property
    def client_parts(self) -> list[np.ndarray]:
        """Each client's whole share (train and validation), as the partitioner made it."""
        return [np.sort(np.concatenate([t, v])) for t, v in zip(self.train_parts, self.val_parts)]


def prepare_data(experiment: ExperimentConfig) -> FederatedData:
    dataset = load_dataset(experiment.dataset, root=experiment.root, options=experiment.dataset_settings)
    spec = experiment.partition
    parts = partition(
        spec.kind,
        dataset.y_train,
        spec.clients,
        seed=spec.seed,
        min_size=spec.min_size,
        domains=dataset.domains_train,
        **partition_kwargs(spec),
    )
    splits = [
        train_val_split(part, spec.val_fraction, seed=spec.seed * 100_003 + cid) for cid, part in enumerate(parts)
    ]
    return FederatedData(dataset, [train for train, _ in splits], [val for _, val in splits])


def partition_kwargs(spec: PartitionConfig) -> dict[str, Any]:
    """The kind-specific settings a partitioner takes (a partitioner rejects ones it does not use)."""
    if spec.kind in ("dirichlet", "quantity_skew"):
        return {"alpha": spec.alpha}
    if spec.kind == "shards":
        return {"classes_per_client": spec.classes_per_client}
    if spec.kind == "domain_split" and "alpha" in spec.model_fields_set:
        return {"alpha": spec.alpha}
    return {}


def data_identity_of(experiment: ExperimentConfig, data: FederatedData) -> DataIdentity:
    """What a run of `experiment` trains on, for the tracker: the dataset, its split, the partition settings."""
    spec = experiment.partition
    settings = {
        "kind": spec.kind,
        **partition_kwargs(spec),
        "clients": spec.clients,
        "min_size": spec.min_size,
        "seed": spec.seed,
        "val_fraction": spec.val_fraction,
    }
    return data_identity(data.dataset, data.train_parts, data.val_parts, settings, experiment.root)
