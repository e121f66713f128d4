"""config/local_dp.py: what local DP-SGD refuses before Ray starts, each problem naming its field first."""

from __future__ import annotations

import pytest

from raytune_fl.config import ExperimentConfig
from raytune_fl.config.local_dp import local_dp_problem
from raytune_fl.methods import METHODS

LOCAL = {"dataset": "digits", "model": "simple_cnn_gn", "privacy": {"mechanism": "local"}}


def _problem(method: str = "fedavg", **changes) -> str | None:
    return local_dp_problem(ExperimentConfig.model_validate({**LOCAL, **changes}), METHODS.get(method))


def test_a_per_sample_method_on_a_batchnorm_free_model_in_fp32_runs():
    assert _problem() is None
    assert _problem("fedprox") is None and _problem("scaffold") is None
    assert _problem("feduv", privacy={"mechanism": "central"}) is None  # the checks are local DP-SGD's only
    assert _problem("feduv", privacy=None) is None


@pytest.mark.parametrize("method", ["feduv", "univarfl", "feddecorr", "fedprox_decorr", "fedalign", "fedpac", "qffl"])
def test_a_method_without_per_sample_losses_is_refused(method):
    problem = _problem(method)
    assert problem is not None and problem.startswith("base.privacy.mechanism: local DP-SGD clips each sample's")
    assert f"method {method!r}" in problem and METHODS.get(method).per_sample in problem


def test_batchnorm_in_train_mode_is_refused_unless_it_runs_on_its_running_statistics():
    problem = _problem(model="simple_cnn")
    assert problem is not None and problem.startswith("base.model: simple_cnn has BatchNorm")
    assert "simple_cnn_gn" in problem and "batchnorm.local_training: running" in problem
    assert _problem(model="resnet18", batchnorm={"local_training": "running"}) is None


def test_a_precision_other_than_fp32_is_refused():
    assert (
        _problem(precision="bf16")
        == "base.precision: local DP-SGD (privacy.mechanism: local) runs in fp32 only, got bf16"
    )
