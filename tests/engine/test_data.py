"""engine/data.py's check_steps: a partition with a client that can take no local step under the batch settings is
refused before Ray, naming the fields and the clients, and each fix it suggests is one that passes."""

from __future__ import annotations

import re

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
