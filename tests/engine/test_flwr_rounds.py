"""Every horizontal Flower Datasets partitioner, as `partition: {kind: flwr, ...}` names it, splits the built-in
digits and trains a 2-round federation on that split in this process (the Tune path: tests/system/
test_flwr_partitions.py). Natural clients come from the label column here: digits has no writers."""

from __future__ import annotations

import math

import pytest

from raytune_fl.config import ExperimentConfig
from raytune_fl.engine.federation import Federation
from raytune_fl.metrics import ROUND, TRAIN_LOSS, VAL_ACC
from tests.support import tiny_space

pytest.importorskip("flwr_datasets.partitioner")  # the [data] extra; its import (seconds) at collection
flwr = pytest.importorskip("raytune_fl.data.flwr")

# the settings each takes beside partition.clients (5) and partition.seed; a new upstream one fails until given here
OPTIONS: dict[str, dict] = {
    "ContinuousPartitioner": {"partition_by": "label", "strictness": 0.5},
    "DirichletPartitioner": {"alpha": 1.0, "min_partition_size": 30},
    "DistributionPartitioner": {
        "distribution_array": [[1.0, 2.0]] * 10,  # 10 classes x (2 labels a client x 10 clients / 10 classes)
        "num_unique_labels_per_partition": 2,
        "preassigned_num_samples_per_label": 5,
    },
    "ExponentialPartitioner": {},
    "GroupedNaturalIdPartitioner": {"partition_by": "label", "group_size": 2},  # 10 classes: 5 clients of 2
    "IdToSizeFncPartitioner": {"partition_id_to_size_fn": lambda cid: 100 * (cid + 1)},
    "IidPartitioner": {},
    "InnerDirichletPartitioner": {"partition_sizes": [200] * 5, "alpha": 0.5},
    "LinearPartitioner": {},
    "NaturalIdPartitioner": {"partition_by": "label"},  # a client per class
    "PathologicalPartitioner": {"num_classes_per_partition": 2},
    "ShardPartitioner": {"num_shards_per_partition": 2},
    "SizePartitioner": {"partition_sizes": [100, 200, 300]},
    "SquarePartitioner": {},
}
CLIENTS_ASKED = {"DistributionPartitioner": 10}  # its clients a multiple of the classes
CLIENTS_MADE = {**CLIENTS_ASKED, "GroupedNaturalIdPartitioner": 5, "NaturalIdPartitioner": 10, "SizePartitioner": 3}


def test_every_horizontal_partitioner_has_its_settings_here():
    assert set(OPTIONS) == set(flwr.horizontal_partitioners())


@pytest.mark.parametrize("name", sorted(OPTIONS))
def test_a_flwr_split_trains_two_rounds(name, one_thread):
    partition = {"kind": "flwr", "partitioner": name, "options": OPTIONS[name], "min_size": 10, "seed": 0}
    if not flwr.count_from_data(name):
        partition["clients"] = CLIENTS_ASKED.get(name, 5)
    base = {**tiny_space()["base"], "partition": partition, "rounds": 2, "participation": 1.0}
    experiment = ExperimentConfig.model_validate({**base, "resources": {"actors": 0}})
    rows: list = []
    federation = Federation(experiment, "fedavg", {})
    federation.run(rows.append)
    assert federation.data.num_clients == CLIENTS_MADE.get(name, 5)
    assert [row[ROUND] for row in rows] == [1, 2]
    assert all(math.isfinite(row[TRAIN_LOSS]) and 0.0 <= row[VAL_ACC] <= 1.0 for row in rows)
