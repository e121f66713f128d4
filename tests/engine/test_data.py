"""engine/data.py's check_steps: a partition with a client that can take no local step under the batch settings is
refused before Ray, naming the fields and the clients, and each fix it suggests is one that passes."""

from __future__ import annotations

import importlib.util
import re

import numpy as np
import pytest

from raytune_fl.config import ConfigError, ExperimentConfig
from raytune_fl.engine.data import prepare_data
from raytune_fl.engine.local import LocalSettings, pass_batches
from raytune_fl.engine.system import epoch_steps

BASE = {
    "dataset": "digits",  # 1,437 training samples
    "partition": {"kind": "dirichlet", "alpha": 0.5, "clients": 3, "min_size": 20, "seed": 0},
    "batch_size": 32,
}


# the [data] extra: imported at collection where installed (its 3 s import is no test's CPU); else its tests skip
HAS_FLWR = importlib.util.find_spec("flwr_datasets") is not None
if HAS_FLWR:
    import flwr_datasets.partitioner  # noqa: F401
needs_flwr = pytest.mark.skipif(not HAS_FLWR, reason="flwr-datasets (raytune-fl[data]) is not installed")


def experiment(**changes) -> ExperimentConfig:
    partition = {**BASE["partition"], **changes.pop("partition", {})}
    if partition["kind"] == "iid":  # a kind without alpha refuses one
        partition.pop("alpha", None)
    return ExperimentConfig.model_validate({**BASE, **changes, "partition": partition})


def test_the_rule_is_the_local_loops():
    """No step by check_steps' count exactly when the local loop's pass has no batch."""
    for n in range(0, 12):
        for batch_size in range(2, 7):
            for drop_last in (False, True):
                settings = LocalSettings(1, batch_size, 0.1, 0.0, 0.0, drop_last=drop_last)
                no_batch = not pass_batches(n, settings)
                assert (epoch_steps(n, batch_size, 1, drop_last) == 0) == no_batch, (n, batch_size, drop_last)


def test_a_batch_larger_than_a_clients_training_part_with_drop_last_is_refused_with_fixes_that_work():
    sizes = [len(part) for part in prepare_data(experiment()).train_parts]
    assert sizes == [364, 318, 612]
    with pytest.raises(ConfigError) as error:
        prepare_data(experiment(batch_size=500, drop_last=True))
    message = str(error.value)
    assert message == (
        "base.batch_size: 2 of 3 clients would take no local step: with base.drop_last: true a step takes a full "
        "batch of base.batch_size 500, and their training parts hold client 0: 364, client 1: 318 samples; set "
        "base.batch_size <= 318, or base.drop_last: false, or base.partition.clients <= 2 with "
        "base.partition.min_size >= 556"
    )
    prepare_data(experiment(batch_size=318, drop_last=True))  # the bound it names
    prepare_data(experiment(batch_size=500))  # drop_last off: the short last batch is a step
    prepare_data(experiment(batch_size=500, drop_last=True, partition={"clients": 2, "min_size": 556}))


def test_a_client_of_one_training_sample_is_refused_naming_min_size():
    with pytest.raises(ConfigError) as error:
        prepare_data(experiment(partition={"kind": "iid", "clients": 700, "min_size": 1}))
    message = str(error.value)
    assert message.startswith(
        "base.partition.min_size: 663 of 700 clients would take no local step: a step takes at least 2 samples"
    )
    assert "client 37: 1, client 38: 1" in message and "(663 in all)" in message
    fix = re.search(r"base.partition.clients <= (\d+) with base.partition.min_size >= (\d+)$", message)
    assert fix is not None, message
    clients, min_size = map(int, fix.groups())
    data = prepare_data(experiment(partition={"kind": "iid", "clients": clients, "min_size": min_size}))
    assert min(len(part) for part in data.train_parts) >= 2


# ---- kind flwr: a Flower Datasets partitioner builds the federation (data/flwr.py)


def flwr_experiment(partitioner: str, options: dict, **partition) -> ExperimentConfig:
    spec = {"kind": "flwr", "partitioner": partitioner, "options": options, "min_size": 20, **partition}
    return ExperimentConfig.model_validate({**BASE, "partition": spec})


@needs_flwr
def test_a_flwr_partitioner_builds_the_federation_and_its_record_names_it():
    from raytune_fl.engine.data import data_identity_of

    iid = flwr_experiment("IidPartitioner", {}, clients=3)
    data = prepare_data(iid)
    assert data.num_clients == 3 and [len(p) for p in data.client_parts] == [479, 479, 479]  # 1437 = 3 x 479
    identity = data_identity_of(iid, data)
    assert identity.partition["partitioner"] == "IidPartitioner" and identity.partition["options"] == {}
    assert identity.name == "digits/flwr-IidPartitioner/3-clients"
    dirichlet = flwr_experiment("DirichletPartitioner", {"alpha": 0.5}, clients=3)
    other = data_identity_of(dirichlet, prepare_data(dirichlet))
    assert other.partition["options"] == {"alpha": 0.5} and other.digest != identity.digest


@needs_flwr
def test_natural_clients_are_as_many_as_the_writers_and_a_different_clients_set_is_refused():
    import dataclasses

    from raytune_fl.data import load_dataset
    from raytune_fl.engine.data import flwr_parts

    digits = load_dataset("digits")
    dataset = dataclasses.replace(digits, columns_train={"writer_id": np.arange(1437) % 4})
    natural = flwr_experiment("NaturalIdPartitioner", {"partition_by": "writer_id"})
    assert natural.partition.clients_from_data
    parts = flwr_parts(natural.partition, dataset)
    assert [len(p) for p in parts] == [360, 359, 359, 359]  # 1437 = 4 x 359 + 1
    assert all(np.all(np.asarray(p) % 4 == np.asarray(p)[0] % 4) for p in parts)  # one writer each
    wrong = flwr_experiment("NaturalIdPartitioner", {"partition_by": "writer_id"}, clients=10)
    with pytest.raises(ConfigError, match=r"^base\.partition\.clients: 10 is set, but NaturalIdPartitioner made 4"):
        flwr_parts(wrong.partition, dataset)
    flwr_parts(flwr_experiment("NaturalIdPartitioner", {"partition_by": "writer_id"}, clients=4).partition, dataset)
    with pytest.raises(ConfigError, match=r"^base\.partition\.options\.partition_by: .*it has: label$"):
        prepare_data(natural)  # digits itself has no writer column
