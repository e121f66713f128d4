"""What local DP-SGD (privacy.mechanism: local) cannot run, found before Ray starts and without torch: a method
without per-sample losses, a model with BatchNorm in train mode, a precision other than fp32.

The trial checks the same again on the built client (engine/dp_sgd.py's `private_problem`), for what only the built
objects show: a plugin's model the caller did not pass, a term's batch-coupled form (FedLD's `fidelity: official`).
"""

from __future__ import annotations

from raytune_fl.config.experiment import ExperimentConfig
from raytune_fl.methods.base import MethodSpec
from raytune_fl.models.registry import BATCHNORM_FREE, MODELS


def local_dp_problem(experiment: ExperimentConfig, method: MethodSpec, model: object | None = None) -> str | None:
    """Why `experiment` cannot train `method` under local DP-SGD, the field first (None: it can, or privacy is not
    local). `model`: the experiment's model built, for a plugin's (a built-in one is known by name)."""
    privacy = experiment.privacy
    if privacy is None or experiment.privacy_mechanism != "local":
        return None
    if method.per_sample:
        return (
            f"base.privacy.mechanism: local DP-SGD clips each sample's gradient, and method {method.name!r} has no "
            f"per-sample loss: {method.per_sample}"
            + ("" if method.central_privacy else "; use privacy.mechanism: central")
        )
    if experiment.precision != "fp32":
        return f"base.precision: local DP-SGD (privacy.mechanism: local) runs in fp32 only, got {experiment.precision}"
    if experiment.batchnorm.local_training == "batch" and _has_batchnorm(experiment.model, model):
        return (
            f"base.model: {experiment.model} has BatchNorm, which in train mode normalises each sample with the "
            "batch's statistics, so no sample's gradient is its own under local DP-SGD; use simple_cnn_gn (GroupNorm), "
            "or batchnorm.local_training: running (BatchNorm in eval mode)"
        )
    return None


def _has_batchnorm(name: str, model: object | None) -> bool:
    """Whether the model `name` holds BatchNorm: a built-in one by name; a plugin's from its built `model`, assumed
    not where none is given (the trial's own check then finds it)."""
    if name in BATCHNORM_FREE:
        return False
    if name not in MODELS.user_names():
        return True
    if model is None:
        return False
    from torch import nn  # the caller built the model: torch is loaded already

    return isinstance(model, nn.Module) and any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules())
