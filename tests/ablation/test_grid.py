"""The ablation grid's pure parsing and labelling (raytune_fl/ablation/grid.py): axes from `--grid` items, the
settings they span, and the splits a cell trains on, checked by hand."""

from __future__ import annotations

import pytest

from raytune_fl.ablation.grid import (
    as_fields,
    check_not_overridden,
    check_partition_seeds,
    parse_grid,
    settings,
    split_label,
    splits,
)
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


def test_an_axis_a_variant_sets_itself_is_refused_naming_the_axis_and_the_variant():
    lr = parse_grid(["lr=0.01,0.1"])
    check_not_overridden(lr, {"fedavg": {"mu"}, "full": set()}, own_optimizer=[])  # nobody sets it: accepted
    with pytest.raises(ConfigError) as caught:
        check_not_overridden(lr, {"fedavg": set(), "full": {"optimizer.lr"}}, own_optimizer=[])
    assert str(caught.value).startswith(
        "--grid lr: variant 'full' sets optimizer.lr itself (fixed, searched or tuned), which would override"
    )
    with pytest.raises(ConfigError, match=r"^--per-setting lr: variant 'fedavg' sets its own optimizer section"):
        check_not_overridden(lr, {"fedavg": set()}, own_optimizer=["fedavg"], option="--per-setting")
    # an own optimizer leaves the other axes alone
    check_not_overridden(parse_grid(["alpha=0.1"]), {"fedavg": set()}, own_optimizer=["fedavg"])


def test_ablate_refuses_a_grid_over_a_rate_a_tuned_variant_set_and_tune_a_per_setting_one(tmp_path):
    from raytune_fl.ablation.plan import make_plan
    from raytune_fl.ablation.sources import variant_source
    from raytune_fl.cli.tune import _studies as studies
    from raytune_fl.cli.tune import build_parser
    from raytune_fl.tracking.store import StudyRecord

    data = tiny_space()
    data["variants"]["fedavg"]["search"] = {"optimizer.lr": {"loguniform": [0.01, 0.1]}}
    space = parse_space(data)
    study = StudyRecord("run1", "fedavg", {"optimizer.lr": 0.05}, {"best_val_acc": 0.5}, 0)
    sources = {"fedavg": variant_source(space, "fedavg", study), "full": variant_source(space, "full", None)}
    with pytest.raises(ConfigError, match=r"^--grid lr: variant 'fedavg' sets optimizer.lr itself"):
        make_plan(space, parse_grid(["lr=0.01,0.1"]), [1], sources)
    assert make_plan(space, parse_grid(["alpha=0.1"]), [1], sources).cells  # another axis: as before
    args = build_parser().parse_args(["--space", "x.yaml", "--per-setting", "lr=0.01,0.1"])
    with pytest.raises(ConfigError, match=r"^--per-setting optimizer.lr: variant 'fedavg' sets optimizer.lr"):
        studies(args, space, list(space.variants))
