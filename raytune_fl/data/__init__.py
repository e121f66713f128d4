"""Datasets (in-memory numpy arrays) and client partitioners for federated simulation."""

from raytune_fl.data import domains, files, hf, leaf, synthetic, vision  # noqa: F401  (registration)
from raytune_fl.data.datasets import (
    DATASET_OPTIONS,
    DATASETS,
    ArrayDataset,
    check_arrays,
    check_options,
    load_dataset,
    to_array_dataset,
)
from raytune_fl.data.partition import (
    PARTITIONERS,
    PartitionError,
    client_domains,
    dirichlet,
    domain,
    domain_split,
    iid,
    partition,
    quantity_skew,
    shards,
)
from raytune_fl.data.record import partition_heatmap, partition_table, save_partition_parquet
from raytune_fl.data.split import label_histogram, train_val_split, train_val_test_split

__all__ = [
    "DATASET_OPTIONS",
    "DATASETS",
    "check_arrays",
    "check_options",
    "to_array_dataset",
    "PARTITIONERS",
    "ArrayDataset",
    "client_domains",
    "domain",
    "domain_split",
    "partition_heatmap",
    "partition_table",
    "quantity_skew",
    "save_partition_parquet",
    "shards",
    "PartitionError",
    "dirichlet",
    "iid",
    "label_histogram",
    "load_dataset",
    "partition",
    "train_val_split",
    "train_val_test_split",
]
