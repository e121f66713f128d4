"""The ablation grid's pure parsing and labelling (raytune_fl/ablation/grid.py): axes from `--grid` items, the
settings they span, and the splits a cell trains on, checked by hand."""

from __future__ import annotations

import pytest

from raytune_fl.ablation.grid import as_fields, check_partition_seeds, parse_grid, settings, split_label, splits
from raytune_fl.config import ConfigError, parse_space
from tests.support import tiny_space


def test_an_item_becomes_an_axis_of_yaml_values_named_as_written():
    (axis,) = parse_grid(["alpha=0.01,1"])
    assert (axis.name, axis.field, axis.values) == ("alpha", "partition.alpha", (0.01, 1))
    assert [a.name for a in as_fields([axis])] == ["partition.alpha"]  # the label names the field either way


@pytest.mark.parametrize(
    ("item", "message"),
    [
        ("alpha", r"^--grid 'alpha': expected KEY=V1,V2"),
        ("seed=1,2", r"^--grid seed: base.seed cannot be a grid axis \(use --seeds\)"),
        ("nonsense=1", r"^--grid nonsense: not a setting"),
        ("alpha=0.1,0.1", r"^--grid alpha: a value is repeated"),
    ],
)
def test_a_bad_item_is_refused_naming_it_first(item, message):
    with pytest.raises(ConfigError, match=message):
        parse_grid([item])


def test_the_same_field_twice_is_refused():
    with pytest.raises(ConfigError, match=r"^--grid partition.alpha: base.partition.alpha is given twice"):
        parse_grid(["alpha=0.1", "partition.alpha=0.5"])


def test_settings_span_every_combination_and_splits_label_each_partition_seed():
    space = parse_space(tiny_space())
    found = settings(space, parse_grid(["alpha=0.1,0.5"]))
    assert list(found) == ["alpha=0.1", "alpha=0.5"]
    assert [e.partition.alpha for e in found.values()] == [0.1, 0.5]
    base_seed = space.base.partition.seed
    split = splits(found, partition_seeds=2)
    assert list(split) == [split_label(s, base_seed + k) for s in found for k in (0, 1)]
    assert list(split)[1] == f"split{base_seed + 1}/alpha=0.1"
    assert [e.partition.seed for e in split.values()] == [base_seed, base_seed + 1] * 2
    assert splits(found) == found  # one split: the settings themselves


def test_partition_seeds_below_one_are_refused():
    with pytest.raises(ConfigError, match=r"^--partition-seeds"):
        check_partition_seeds(0, [])


def test_a_number_is_labelled_as_its_field_holds_it_however_it_was_typed():
    # YAML reads 1e-1 as text and 1 as an integer; alpha holds floats, rounds integers
    space = parse_space(tiny_space())
    found = settings(space, as_fields(parse_grid(["alpha=1e-1,1"], "--per-setting")), "--per-setting")
    assert list(found) == ["partition.alpha=0.1", "partition.alpha=1.0"]
    assert [experiment.partition.alpha for experiment in found.values()] == [0.1, 1.0]
    assert list(settings(space, parse_grid(["rounds=2,3"]))) == ["rounds=2", "rounds=3"]


def test_two_spellings_of_one_number_are_refused_as_one_setting():
    space = parse_space(tiny_space())
    with pytest.raises(ConfigError) as error:
        settings(space, parse_grid(["alpha=0.1,1e-1"]))
    assert str(error.value) == (
        "--grid alpha=1e-1: the same setting as alpha=0.1 (alpha=0.1: numbers are compared as numbers); give each "
        "value once"
    )
