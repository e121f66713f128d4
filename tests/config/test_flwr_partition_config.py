"""partition.partitioner and partition.options: kind flwr's alone, checked against the Flower class at load (before
any data or Ray), each error naming its field on the first line; natural clients' counts checked once known."""

from __future__ import annotations

import pytest

from raytune_fl.config import ConfigError, ExperimentConfig, check_client_count, parse_space

# the [data] extra; imported at collection (its 3 s import is no test's CPU), skipped where it is not installed
pytest.importorskip("flwr_datasets.partitioner")


def load(partition: dict, **base) -> ExperimentConfig:
    data = {"dataset": "digits", "partition": partition, **base}
    return parse_space({"name": "t", "base": data, "variants": {"fedavg": {"method": "fedavg"}}}).base


def test_the_briefs_example_loads():
    options = {"alpha": 0.5, "partition_sizes": [100] * 10}
    base = load({"kind": "flwr", "partitioner": "InnerDirichletPartitioner", "options": options, "clients": 10})
    assert (base.partition.partitioner, base.partition.options) == ("InnerDirichletPartitioner", options)


@pytest.mark.parametrize(
    ("partition", "first_line"),
    [
        ({"kind": "iid", "partitioner": "IidPartitioner"}, "base.partition.partitioner: is set, but only kind flwr"),
        ({"kind": "dirichlet", "options": {"alpha": 1}}, "base.partition.options: is set, but only kind flwr"),
        ({"kind": "flwr"}, "base.partition.partitioner: kind flwr needs a Flower Datasets partitioner's class name"),
        ({"kind": "flwr", "partitioner": "Iid"}, "base.partition.partitioner: unknown partitioner 'Iid'"),
        ({"kind": "flwr", "partitioner": "VerticalSizePartitioner"}, "base.partition.partitioner: 'VerticalSize"),
        (
            {"kind": "flwr", "partitioner": "DirichletPartitioner", "options": {"alpha": 1, "beta": 2}},
            "base.partition.options.beta: not an argument of DirichletPartitioner; DirichletPartitioner takes: "
            "partition_by, alpha, min_partition_size, self_balancing, shuffle",
        ),
        (
            {"kind": "flwr", "partitioner": "ShardPartitioner", "options": {"seed": 1}},
            "base.partition.options.seed: set by partition.seed, not in options",
        ),
        (
            {"kind": "flwr", "partitioner": "IidPartitioner", "alpha": 0.5},
            "base.partition.alpha: 0.5 is set, but kind 'flwr' does not use it",
        ),
    ],
)
def test_a_bad_flwr_setting_is_refused_at_load_naming_the_field(partition, first_line):
    with pytest.raises(ConfigError) as error:
        load(partition)
    assert str(error.value).splitlines()[0].startswith(first_line)


def test_kind_flwr_is_listed_with_the_kinds():
    with pytest.raises(ConfigError, match=r"partition\.kind: unknown partitioner 'flwrr'; did you mean 'flwr'\?"):
        load({"kind": "flwrr"})


def test_natural_clients_leave_the_count_checks_to_the_data():
    """participation 0.05 of the default 10 clients is half a client: refused where partition.clients counts them,
    left to check_data's count where the data decides it (62 writers: 3.1 clients)."""
    with pytest.raises(ConfigError, match=r"^base\.participation: 0\.05 of 10 clients"):
        load({"kind": "flwr", "partitioner": "IidPartitioner"}, participation=0.05)
    natural = load({"kind": "flwr", "partitioner": "NaturalIdPartitioner"}, participation=0.05)
    check_client_count(natural, 62)
    with pytest.raises(ValueError, match=r"^participation: 0\.05 of 4 clients is 0\.2 of a client"):
        check_client_count(natural, 4)
    killing = load({"kind": "flwr", "partitioner": "NaturalIdPartitioner"}, faults={"inject_kills": [[1, 4]]})
    with pytest.raises(ValueError, match=r"^faults\.inject_kills: client 4 is outside 0\.\.3 \(4 writers\)"):
        check_client_count(killing, 4, "4 writers")
