"""base.privacy at config validation: the section's own rules, a variant's privacy settings (fixed or searched like
hyperparameters, moved into the trial's experiment), and the refusals before Ray, the field on the first line."""

from __future__ import annotations

import pytest

from raytune_fl.config import ConfigError, VariantTrials, parse_space
from raytune_fl.config.privacy import PRIVACY_PARAMS, split_settings, with_settings
from raytune_fl.methods import METHODS
from tests.support import changed_space

CENTRAL = {"mechanism": "central", "clip_norm": 1.0}


def _refused(*changes: tuple[str, object]) -> str:
    with pytest.raises(ConfigError) as caught:
        parse_space(changed_space(*changes))
    return str(caught.value).splitlines()[0]


def test_a_searched_and_a_fixed_clip_norm_reach_the_trials_experiment_and_not_the_method():
    space = parse_space(
        changed_space(
            ("base.privacy", CENTRAL),
            ("variants.fedavg.search", {"privacy.clip_norm": {"loguniform": [0.1, 10.0]}}),
            ("variants.full.fixed", {"privacy.clip_norm": "5e-1", "privacy.noise_multiplier": 2}),
        )
    )
    trial = VariantTrials.of(space, "fedavg").trial({"privacy.clip_norm": 0.3})
    assert trial.experiment.privacy.clip_norm == 0.3 and trial.params == {}
    full = VariantTrials.of(space, "full").trial({"mu": 0.1, "lambda": 1.0})
    assert (full.experiment.privacy.clip_norm, full.experiment.privacy.noise_multiplier) == (0.5, 2.0)  # typed
    assert "privacy.clip_norm" not in full.params and full.params["mu"] == 0.1
    assert space.base.privacy.clip_norm == 1.0  # the base is untouched


def test_a_budget_per_variant_puts_several_epsilons_and_no_noise_in_one_study():
    space = parse_space(
        changed_space(
            ("base.privacy", {"mechanism": "central"}),
            ("variants.fedavg.fixed", {"privacy.target_epsilon": 2}),
            ("variants.free", {"method": "fedavg", "fixed": {"privacy.noise_multiplier": 0, "privacy.clip_norm": 1e6}}),
        )
    )
    two = VariantTrials.of(space, "fedavg").trial().experiment.privacy
    assert (two.target_epsilon, two.noise_multiplier) == (2.0, None)
    free = VariantTrials.of(space, "free").trial().experiment.privacy
    assert (free.noise_multiplier, free.clip_norm, free.target_epsilon) == (0.0, 1e6, None)


def test_split_and_with_settings_by_hand():
    assert split_settings({"mu": 1, "privacy.clip_norm": 2}) == ({"privacy.clip_norm": 2}, {"mu": 1})
    space = parse_space(changed_space(("base.privacy", CENTRAL)))
    assert with_settings(space.base, {}) is space.base
    with pytest.raises(ValueError, match="privacy.clip_norm: base.privacy is unset"):
        with_settings(parse_space(changed_space()).base, {"privacy.clip_norm": 1.0})


def test_no_method_declares_a_hyperparameter_under_a_privacy_settings_name():
    for name in METHODS.names():
        assert not set(METHODS.get(name).params) & set(PRIVACY_PARAMS), name


@pytest.mark.parametrize(
    ("changes", "first_line"),
    [
        (
            [("variants.fedavg.search", {"privacy.clip_norm": {"uniform": [0.1, 1.0]}})],
            "variants.fedavg.search.privacy.clip_norm: base.privacy is unset",
        ),
        (
            [("base.privacy", {"target_epsilon": 8.0}), ("variants.fedavg.fixed", {"privacy.noise_multiplier": 1.0})],
            "variants.fedavg.fixed.privacy.noise_multiplier: base.privacy's target_epsilon derives the noise",
        ),
        (
            [("base.privacy", CENTRAL), ("variants.fedavg.search", {"privacy.clip_norm": {"uniform": [0.0, 1.0]}})],
            "variants.fedavg.search.privacy.clip_norm: uniform value 0.0 is not allowed",
        ),
        (
            [("base.privacy", CENTRAL), ("variants.fedavg.method", "scaffold")],
            "base.privacy.mechanism: central DP-FedAvg's server sees only the noisy mean",
        ),
        (
            [("base.privacy", {"noise_multiplier": 1.0, "target_epsilon": 8.0})],
            "base.privacy.target_epsilon: set either noise_multiplier or target_epsilon",
        ),
        (
            [("base.privacy", {"target_epsilon": 1e-7})],
            "base.privacy.target_epsilon: out of reach, target epsilon 1e-07",
        ),
        ([("base.privacy", {"delta": 1.0})], "base.privacy.delta"),
        (
            [
                ("base.privacy", CENTRAL),
                ("variants.fedavg.fixed", {"privacy.target_epsilon": 2, "privacy.noise_multiplier": 1}),
            ],
            "variants.fedavg.fixed.privacy.noise_multiplier: the variant's target_epsilon derives the noise",
        ),
        (
            [("base.privacy", {"noise_multiplier": 1.0}), ("variants.fedavg.fixed", {"privacy.target_epsilon": 2})],
            "variants.fedavg.fixed.privacy.target_epsilon: base.privacy.noise_multiplier is set",
        ),
        (
            [("base.privacy", CENTRAL), ("variants.fedavg.fixed", {"privacy.target_epsilon": 1e-7})],
            "variants.fedavg.fixed.privacy.target_epsilon: out of reach",
        ),
        (  # tiny_space's variant 'full' is UniVarFL, whose variance and energy terms couple a batch's samples
            [("base.privacy", {"mechanism": "local"}), ("base.model", "simple_cnn_gn")],
            "base.privacy.mechanism: local DP-SGD clips each sample's gradient, and method 'univarfl'",
        ),
        (
            [("base.privacy", {"mechanism": "local"}), ("variants.full", {"method": "fedprox"})],
            "base.model: simple_cnn has BatchNorm",
        ),
        ([("base.privacy", {"mechanism": "shuffle"})], "base.privacy.mechanism"),
        ([("base.privacy", {"accountant": "moments"})], "base.privacy.accountant"),
    ],
)
def test_a_bad_privacy_setting_is_refused_naming_its_field_first(changes, first_line):
    assert first_line in _refused(*changes)


@pytest.mark.parametrize("name", [name for name in METHODS.names() if METHODS.get(name).central_privacy])
def test_every_method_that_declares_a_central_reason_is_refused_with_it(name):
    why = METHODS.get(name).central_privacy
    assert why in _refused(("base.privacy", CENTRAL), ("variants.fedavg.method", name))
