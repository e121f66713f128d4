"""A variant's `optimizer.lr`, `optimizer.momentum` and `optimizer.weight_decay`, fixed or searched like a method's
hyperparameters: moved into the trial's experiment (never the method's params), over the variant's own optimiser,
and refused before Ray outside OptimizerConfig's bounds, the field on the first line."""

from __future__ import annotations

import pytest

from raytune_fl.config import ConfigError, VariantTrials, parse_space
from raytune_fl.config.privacy import VARIANT_SETTINGS, split_settings, with_settings
from raytune_fl.methods import METHODS
from tests.support import changed_space


def test_a_searched_lr_and_a_fixed_momentum_reach_the_trials_optimizer_and_not_the_method():
    space = parse_space(
        changed_space(
            ("variants.fedavg.search", {"optimizer.lr": {"loguniform": [0.001, 0.3]}}),
            ("variants.fedavg.fixed", {"optimizer.momentum": 0.5}),
        )
    )
    trial = VariantTrials.of(space, "fedavg").trial({"optimizer.lr": 0.05})
    optimizer = trial.experiment.optimizer
    assert (optimizer.lr, optimizer.momentum, optimizer.weight_decay) == (0.05, 0.5, space.base.optimizer.weight_decay)
    assert trial.params == {}
    assert space.base.optimizer.lr == 0.01 and space.base.optimizer.momentum == 0.9  # the base is untouched


def test_a_variants_own_optimizer_keeps_what_the_settings_do_not_name():
    space = parse_space(
        changed_space(
            ("variants.fedavg.optimizer", {"lr": 0.1, "momentum": 0.0, "schedule": {"kind": "cosine"}}),
            ("variants.fedavg.search", {"optimizer.lr": {"loguniform": [0.01, 0.3]}}),
        )
    )
    optimizer = VariantTrials.of(space, "fedavg").trial({"optimizer.lr": 0.2}).experiment.optimizer
    assert (optimizer.lr, optimizer.momentum, optimizer.schedule.kind) == (0.2, 0.0, "cosine")  # a schedule's base


def test_split_and_with_settings_by_hand():
    values = {"mu": 1, "optimizer.lr": "0.5", "privacy.clip_norm": 2}
    assert split_settings(values) == ({"optimizer.lr": "0.5", "privacy.clip_norm": 2}, {"mu": 1})
    base = parse_space(changed_space()).base
    assert with_settings(base, {}) is base
    assert with_settings(base, {"optimizer.lr": "0.5"}).optimizer.lr == 0.5  # typed


def test_no_method_declares_a_hyperparameter_under_a_settings_name():
    for name in METHODS.names():
        assert not set(METHODS.get(name).params) & set(VARIANT_SETTINGS), name


@pytest.mark.parametrize(
    ("changes", "first_line"),
    [
        (
            [("variants.fedavg.search", {"optimizer.momentum": {"uniform": [0.0, 1.0]}})],
            "variants.fedavg.search.optimizer.momentum: uniform value 1.0 is not allowed",
        ),
        (
            [("variants.fedavg.fixed", {"optimizer.lr": 0})],
            "variants.fedavg.fixed",
        ),
        (
            [("variants.fedavg.search", {"optimizer.learning_rate": {"loguniform": [0.01, 0.1]}})],
            "variants.fedavg.search.optimizer.learning_rate: method 'fedavg' has no hyperparameter",
        ),
        (  # the bare name is pointed to its dotted one
            [("variants.fedavg.search", {"lr": {"loguniform": [0.01, 0.1]}})],
            "variants.fedavg.search.lr: method 'fedavg' has no hyperparameter lr",
        ),
    ],
)
def test_a_bad_optimizer_setting_is_refused_naming_its_field_first(changes, first_line):
    with pytest.raises(ConfigError) as caught:
        parse_space(changed_space(*changes))
    assert str(caught.value).splitlines()[0].startswith(first_line), str(caught.value)


def test_a_bare_settings_name_is_pointed_to_its_dotted_name():
    with pytest.raises(ConfigError) as caught:
        parse_space(changed_space(("variants.fedavg.search", {"lr": {"loguniform": [0.01, 0.1]}})))
    assert str(caught.value).splitlines()[0].endswith("did you mean 'optimizer.lr'?")
