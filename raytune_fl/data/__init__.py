"""Datasets (in-memory numpy arrays) and client partitioners for federated simulation."""

from raytune_fl.data.datasets import DATASETS, ArrayDataset, load_dataset
from raytune_fl.data.partition import PARTITIONERS, PartitionError, dirichlet, iid, partition
from raytune_fl.data.split import label_histogram, train_val_split

__all__ = [
    "DATASETS",
    "PARTITIONERS",
    "ArrayDataset",
    "PartitionError",
    "dirichlet",
    "iid",
    "label_histogram",
    "load_dataset",
    "partition",
    "train_val_split",
]
