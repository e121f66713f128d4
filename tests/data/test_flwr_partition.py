"""data/flwr.py: every horizontal partitioner of Flower Datasets (found by introspection, so a new upstream one is
covered or fails `test_every_horizontal_partitioner_has_its_options_here`) splits the digits labels into disjoint
in-range clients; hand-checked splits on tiny tables; options refused with what the partitioner takes; vertical
and abstract classes refused; seeds."""

from __future__ import annotations

import inspect
import re
import warnings

import numpy as np
import pytest

from raytune_fl.data import PartitionError, load_dataset
from raytune_fl.data.flwr import check_options, count_from_data, flwr_partition, horizontal_partitioners

# the [data] extra; imported at collection (about 3 s of CPU, once per run), skipped where it is not installed
flwr_partitioners = pytest.importorskip("flwr_datasets.partitioner")

CLIENTS = 5

# each partitioner's own arguments (num_partitions and seed are the project's: partition.clients, partition.seed)
OPTIONS: dict[str, dict] = {
    "ContinuousPartitioner": {"strictness": 0.5},
    "DirichletPartitioner": {"alpha": 0.5},
    # (classes, num_unique_labels_per_partition x clients / classes), its clients a multiple of the classes
    "DistributionPartitioner": {
        "distribution_array": [[1.0, 2.0]] * 10,
        "num_unique_labels_per_partition": 2,
        "preassigned_num_samples_per_label": 5,
    },
    "ExponentialPartitioner": {},
    "GroupedNaturalIdPartitioner": {"partition_by": "writer_id", "group_size": 2},
    "IdToSizeFncPartitioner": {"partition_id_to_size_fn": lambda cid: cid + 1},
    "IidPartitioner": {},
    "InnerDirichletPartitioner": {"partition_sizes": [100] * CLIENTS, "alpha": 0.5},
    "LinearPartitioner": {},
    "NaturalIdPartitioner": {"partition_by": "writer_id"},
    "PathologicalPartitioner": {"num_classes_per_partition": 2},
    "ShardPartitioner": {"num_shards_per_partition": 2},
    "SizePartitioner": {"partition_sizes": [100, 200, 300]},
    "SquarePartitioner": {},
}
# clients asked of a partitioner that needs another count than CLIENTS
CLIENTS_ASKED = {"DistributionPartitioner": 10}
# how many clients each makes from digits with 7 writers: num_partitions where it takes one, else its data's
CLIENTS_MADE = {**CLIENTS_ASKED, "GroupedNaturalIdPartitioner": 4, "NaturalIdPartitioner": 7, "SizePartitioner": 3}


def upstream_horizontal() -> list[str]:
    """flwr_datasets.partitioner's concrete partitioner classes, but the vertical ones (they split columns)."""
    base = flwr_partitioners.Partitioner
    classes = {name: getattr(flwr_partitioners, name) for name in flwr_partitioners.__all__}
    return sorted(
        name
        for name, cls in classes.items()
        if isinstance(cls, type) and issubclass(cls, base) and not inspect.isabstract(cls)
        if not name.startswith("Vertical")
    )


@pytest.fixture(scope="module")
def digits():
    data = load_dataset("digits")  # 1,437 training samples, classes 0..9
    return data.y_train, {"writer_id": np.arange(len(data.y_train)) % 7}


def split(name, labels, columns=None, options=None, clients=CLIENTS, seed=0, min_size=1):
    with warnings.catch_warnings():  # flwr's notes on its own settings (classes left unused, pyarrow's)
        warnings.simplefilter("ignore")
        return flwr_partition(
            name, OPTIONS[name] if options is None else options, labels, clients, seed=seed, min_size=min_size,
            columns=columns,
        )  # fmt: skip


def test_every_horizontal_partitioner_has_its_options_here():
    assert sorted(horizontal_partitioners()) == upstream_horizontal()
    assert len(upstream_horizontal()) >= 14  # flwr-datasets 0.6: 14 horizontal, 2 vertical
    assert set(OPTIONS) == set(upstream_horizontal()), "give the new partitioner its options in OPTIONS"


@pytest.mark.parametrize("name", upstream_horizontal())
def test_every_horizontal_partitioner_splits_digits_into_disjoint_in_range_clients(name, digits):
    labels, columns = digits
    clients = CLIENTS_ASKED.get(name, CLIENTS)
    parts = split(name, labels, columns, clients=clients)
    assert len(parts) == CLIENTS_MADE.get(name, CLIENTS)
    assert all(p.dtype == np.int64 and np.array_equal(p, np.unique(p)) for p in parts)  # sorted, no repeats
    everything = np.concatenate(parts)
    assert len(everything) == len(np.unique(everything))  # each sample with at most one client
    assert everything.min() >= 0 and everything.max() < len(labels)
    assert all(np.array_equal(a, b) for a, b in zip(parts, split(name, labels, columns, clients=clients)))  # same seed


def test_iid_cuts_1437_samples_into_2_clients_of_288_and_3_of_287_covering_all(digits):
    labels, _ = digits
    parts = split("IidPartitioner", labels)
    assert [len(p) for p in parts] == [288, 288, 287, 287, 287]  # 1437 = 5 x 287 + 2
    assert np.array_equal(np.sort(np.concatenate(parts)), np.arange(1437))


def test_natural_ids_are_exactly_the_writers_rows():
    labels = np.array([0, 1, 0, 1, 0, 1])
    writers = np.array(["a", "b", "a", "c", "b", "a"])
    parts = split("NaturalIdPartitioner", labels, {"writer_id": writers}, clients=99)  # clients: the data's
    assert sorted(map(tuple, parts)) == [(0, 2, 5), (1, 4), (3,)]
    assert count_from_data("NaturalIdPartitioner") and count_from_data("SizePartitioner")
    assert not count_from_data("DirichletPartitioner")


def test_shards_of_one_class_each_give_every_client_one_class():
    labels = np.repeat(np.arange(4), 10)
    parts = split("ShardPartitioner", labels, options={"shard_size": 10, "num_shards_per_partition": 1}, clients=4)
    assert sorted(tuple(np.unique(labels[p])) for p in parts) == [(0,), (1,), (2,), (3,)]
    assert [len(p) for p in parts] == [10] * 4


def test_pathological_deterministic_gives_client_i_the_classes_i_and_i_plus_1(digits):
    labels, _ = digits
    options = {"num_classes_per_partition": 2, "class_assignment_mode": "deterministic"}
    parts = split("PathologicalPartitioner", labels, options=options)
    assert [np.unique(labels[p]).tolist() for p in parts] == [[i, i + 1] for i in range(CLIENTS)]


@pytest.mark.parametrize("name", ["DirichletPartitioner", "IidPartitioner", "ShardPartitioner"])
def test_another_seed_gives_another_split(name, digits):
    labels, columns = digits
    first, second = split(name, labels, columns, seed=0), split(name, labels, columns, seed=1)
    assert any(not np.array_equal(a, b) for a, b in zip(first, second))


def test_a_client_under_min_size_is_refused_with_the_smallest_size(digits):
    labels, _ = digits
    sizes = [len(p) for p in split("ExponentialPartitioner", labels)]
    assert min(sizes) == 16  # the smallest of 5 exponentially growing clients of 1,437 samples
    with pytest.raises(PartitionError, match=r"^partition\.min_size: .*client 0\) has 16 samples < min_size=20"):
        split("ExponentialPartitioner", labels, min_size=20)


def test_a_partition_by_column_the_data_lacks_is_named_with_the_columns_it_has(digits):
    labels, columns = digits
    with pytest.raises(PartitionError, match=r"^partition\.options\.partition_by: .*'user'.* it has: label, writer_id"):
        split("NaturalIdPartitioner", labels, columns, options={"partition_by": "user"})


@pytest.mark.parametrize(
    ("name", "options", "message"),
    [
        ("DirichletPartitioner", {"alpha": 1, "alpah": 1}, r"options\.alpah: not an argument of DirichletPartitioner"),
        ("DirichletPartitioner", {}, r"options\.alpha: required by DirichletPartitioner"),
        ("DirichletPartitioner", {"alpha": 1, "seed": 3}, r"options\.seed: set by partition\.seed"),
        ("IidPartitioner", {"num_partitions": 3}, r"options\.num_partitions: set by partition\.clients"),
    ],
)
def test_options_are_checked_against_the_classes_signature(name, options, message):
    with pytest.raises(PartitionError, match=rf"^partition\.{message}") as error:
        check_options(name, options)
    takes = str(error.value).split("takes: ")[1]
    expected = "partition_by, alpha, min_partition_size, self_balancing, shuffle" if name != "IidPartitioner" else ""
    assert takes == (expected or "no options")


def test_partition_by_may_be_set_and_defaults_to_the_label():
    check_options("DirichletPartitioner", {"alpha": 1, "partition_by": "writer_id"})
    check_options("DirichletPartitioner", {"alpha": 1})


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("VerticalEvenPartitioner", "is a vertical partitioner"),
        ("VerticalSizePartitioner", "is a vertical partitioner"),
        ("Partitioner", "is the abstract base"),
        ("DirichletPartitoner", "unknown partitioner"),
    ],
)
def test_vertical_abstract_and_unknown_classes_are_refused_listing_the_horizontal_ones(name, why):
    with pytest.raises(PartitionError, match=rf"^partition\.partitioner: .*{why}") as error:
        check_options(name, {})
    listed = str(error.value).split("the horizontal ones: ")[1].split(", ")
    assert listed == upstream_horizontal()


def test_a_value_the_partitioner_refuses_names_the_options():
    with pytest.raises(PartitionError, match=re.escape("partition.options: DirichletPartitioner refused them")):
        split("DirichletPartitioner", np.zeros(10, np.int64), options={"alpha": -1.0})
