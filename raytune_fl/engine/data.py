"""The federation's data: the dataset split among clients, each share split into training and held-out parts."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from raytune_fl.config import ConfigError, ExperimentConfig, PartitionConfig
from raytune_fl.data import ArrayDataset, PartitionError, load_dataset, partition, train_val_split, train_val_test_split
from raytune_fl.data.flwr import KIND as FLWR
from raytune_fl.data.flwr import flwr_partition
from raytune_fl.data.identity import DataIdentity, data_identity
from raytune_fl.engine.system import epoch_steps


@dataclass(frozen=True)
class FederatedData:
    dataset: ArrayDataset
    train_parts: list[np.ndarray]  # per client: positions in dataset.x_train used for local training
    val_parts: list[np.ndarray]  # per client: held-out positions; their union is the validation set
    # per client: its own test part (partition.test_fraction), positions in dataset.x_train; empty: no test split
    test_parts: list[np.ndarray] = field(default_factory=list)

    @property
    def num_clients(self) -> int:
        return len(self.train_parts)

    @property
    def client_test_parts(self) -> list[np.ndarray]:
        """Each client's test part: empty ones without a test split."""
        return self.test_parts or [part[:0] for part in self.train_parts]

    @property
    def val_indices(self) -> np.ndarray:
        return np.sort(np.concatenate(self.val_parts))

    @property
    def client_parts(self) -> list[np.ndarray]:
        """Each client's whole share (train, validation and test), as the partitioner made it."""
        return [np.sort(np.concatenate(p)) for p in zip(self.train_parts, self.val_parts, self.client_test_parts)]


def prepare_data(experiment: ExperimentConfig) -> FederatedData:
    dataset = load_dataset(experiment.dataset, root=experiment.root, options=experiment.dataset_settings)
    spec = experiment.partition
    if spec.kind == FLWR:
        parts = flwr_parts(spec, dataset)
    else:
        parts = partition(
            spec.kind,
            dataset.y_train,
            spec.clients,
            seed=spec.seed,
            min_size=spec.min_size,
            domains=dataset.domains_train,
            **partition_kwargs(spec),
        )
    splits = [split_client(spec, cid, part) for cid, part in enumerate(parts)]
    tests = [test for _, _, test in splits] if spec.test_fraction > 0 else []
    data = FederatedData(dataset, [train for train, _, _ in splits], [val for _, val, _ in splits], tests)
    check_steps(experiment, data)
    return data


def split_client(spec: PartitionConfig, cid: int, part: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Client `cid`'s share as train, validation, test: validation as it always was (the seed below), and the test
    part, only where test_fraction > 0, from a seed of its own, so every split without it stays as it was."""
    seed = spec.seed * 100_003 + cid
    test_seed = int(np.random.SeedSequence([spec.seed, cid, TEST_STREAM]).generate_state(1)[0])
    return train_val_test_split(part, spec.val_fraction, spec.test_fraction, seed, test_seed)


TEST_STREAM = 61  # keys the test split's seeds apart from the validation split's


def flwr_parts(spec: PartitionConfig, dataset: ArrayDataset) -> list[np.ndarray]:
    """The clients of a Flower Datasets partitioner (data/flwr.py); where it decides their number from the data
    (natural clients), a partition.clients set in the file must match it. Errors are ConfigErrors naming the field."""
    assert spec.partitioner is not None  # PartitionConfig refuses kind flwr without one
    try:
        parts = flwr_partition(
            spec.partitioner,
            spec.options,
            dataset.y_train,
            spec.clients,
            seed=spec.seed,
            min_size=spec.min_size,
            columns=dataset.columns_train,
        )
    except PartitionError as error:  # its message starts "partition.<field>: "
        raise ConfigError(f"base.{error}") from None
    if "clients" in spec.model_fields_set and spec.clients != len(parts):  # not-a-metric: the field
        raise ConfigError(
            f"base.partition.clients: {spec.clients} is set, but {spec.partitioner} made {len(parts)} clients from "
            f"the data; remove partition.clients (it is read off the data) or set it to {len(parts)}"
        )
    return parts


def check_steps(experiment: ExperimentConfig, data: FederatedData) -> None:
    """Refuse a partition with a client that can take no optimiser step under the batch settings (its training
    share smaller than batch_size with drop_last, or of one sample): it would train nothing and report a loss of
    0.0, and a round of such clients alone would look trained. A ConfigError naming the fields."""
    size, drop_last = experiment.batch_size, experiment.drop_last
    train_sizes = [len(part) for part in data.train_parts]
    idle = [(cid, n) for cid, n in enumerate(train_sizes) if epoch_steps(n, size, 1, drop_last) == 0]
    if not idle:
        return
    spec = experiment.partition
    shown = ", ".join(f"client {cid}: {n}" for cid, n in idle[:5]) + (f", ... ({len(idle)} in all)" * (len(idle) > 5))
    smallest = min(n for _, n in idle)
    batch_bound = drop_last and smallest >= 2  # a smaller batch would do (base.batch_size is at least 2)
    field = "base.batch_size" if batch_bound else "base.partition.min_size"
    if spec.test_fraction > 0 and all(epoch_steps(n + len(data.test_parts[c]), size, 1, drop_last) for c, n in idle):
        field = "base.partition.test_fraction"  # the test parts took the samples these clients would step on
    why = (
        f"with base.drop_last: true a step takes a full batch of base.batch_size {size}"
        if drop_last
        else "a step takes at least 2 samples, as BatchNorm and the batch statistics need pairs"
    )
    fixes = [f"base.batch_size <= {smallest}", "base.drop_last: false"] if batch_bound else []
    if field.endswith("test_fraction"):
        fixes.insert(0, f"base.partition.test_fraction < {spec.test_fraction:g}")
    # a share whose training part takes a step (validation and test held out together: near enough for a hint)
    share = _share_for(size if drop_last else 2, spec.val_fraction + spec.test_fraction)
    samples = len(data.dataset.y_train)
    if len(train_sizes) * share <= samples:
        fixes.append(f"base.partition.min_size >= {share} (a client's share, before validation is held out)")
    elif samples >= share:
        fixes.append(f"base.partition.clients <= {samples // share} with base.partition.min_size >= {share}")
    raise ConfigError(
        f"{field}: {len(idle)} of {len(train_sizes)} clients would take no local step: {why}, and their training "
        f"parts hold {shown} samples; set {', or '.join(fixes)}"
    )


def _share_for(train: int, val_fraction: float) -> int:
    """The smallest client share whose training part, once train_val_split holds out validation, has `train`
    samples."""
    share = max(train, int(train / (1 - val_fraction)) - 2)  # near it: the split rounds
    while len(train_val_split(np.arange(share), val_fraction, seed=0)[0]) < train:
        share += 1
    return share


def partition_kwargs(spec: PartitionConfig) -> dict[str, Any]:
    """The kind-specific settings a partitioner takes (a partitioner rejects ones it does not use)."""
    if spec.kind in ("dirichlet", "quantity_skew"):
        return {"alpha": spec.alpha}
    if spec.kind == "shards":
        return {"classes_per_client": spec.classes_per_client}
    if spec.kind == "domain_split" and "alpha" in spec.model_fields_set:
        return {"alpha": spec.alpha}
    return {}


def flwr_settings(spec: PartitionConfig) -> dict[str, Any]:
    """A flwr split's partitioner and options, as the record and the fingerprint take them (a callable option by
    its qualified name: its repr would differ from run to run)."""
    if spec.kind != FLWR:
        return {}
    options = {k: getattr(v, "__qualname__", v) if callable(v) else v for k, v in spec.options.items()}
    return {"partitioner": spec.partitioner, "options": options}


def data_identity_of(experiment: ExperimentConfig, data: FederatedData) -> DataIdentity:
    """What a run of `experiment` trains on, for the tracker: the dataset, its split, the partition settings."""
    spec = experiment.partition
    settings = {
        "kind": spec.kind,
        **partition_kwargs(spec),
        **flwr_settings(spec),
        "clients": data.num_clients,  # not-a-metric: the partition's setting (natural clients: the data's count)
        "min_size": spec.min_size,
        "seed": spec.seed,
        "val_fraction": spec.val_fraction,
        # only where set: the records of runs without a test split stay as they were
        **({"test_fraction": spec.test_fraction} if spec.test_fraction > 0 else {}),
    }
    options = experiment.dataset_options or None  # synthetic's settings are its own section, in the params
    return data_identity(
        data.dataset, data.train_parts, data.val_parts, settings, experiment.root, options, data.test_parts
    )
