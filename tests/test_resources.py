"""What a trial reserves, and the fail-fast check before anything would pend forever."""

from __future__ import annotations

import pytest

from raytune_fl.config import ResourcesConfig
from raytune_fl.methods import METHODS
from raytune_fl.tune.resources import check_fits, trial_bundles


def test_a_driver_bundle_then_one_bundle_per_actor():
    bundles = trial_bundles(ResourcesConfig(actors=3, cpus_per_actor=0.5, gpus_per_actor=0.25, driver_cpus=1))
    assert bundles == [{"CPU": 1}, {"CPU": 0.5, "GPU": 0.25}, {"CPU": 0.5, "GPU": 0.25}, {"CPU": 0.5, "GPU": 0.25}]
    assert trial_bundles(ResourcesConfig(actors=2)) == [{"CPU": 0}, {"CPU": 1}, {"CPU": 1}]  # no GPU key on CPU
    assert trial_bundles(ResourcesConfig(actors=0, cpus_per_actor=2)) == [{"CPU": 2}]  # clients in the trial process


def test_a_trial_that_cannot_fit_fails_fast_with_the_fields_to_change():
    check_fits(ResourcesConfig(actors=2), {"CPU": 2.0})
    with pytest.raises(ValueError, match=r"needs 0.5 GPU .* the Ray cluster has 0; .*resources.gpus_per_actor"):
        check_fits(ResourcesConfig(actors=2, gpus_per_actor=0.25), {"CPU": 2.0})
    with pytest.raises(ValueError, match=r"needs 4 CPU .* has 2; lower resources.actors"):
        check_fits(ResourcesConfig(actors=4), {"CPU": 2.0})


def test_derived_defaults_are_described_not_none():
    assert METHODS.get("feduv").describe({"mu": 0.1}) == {
        "mu": 0.1,
        "lambda": "D/4 (paper) or 2.5 (official)",
        "sigma": "median",
        "fidelity": "paper",
    }
    assert METHODS.get("univarfl").describe({"lambda": 1.0})["lambda"] == 1.0
