"""The methods by name. Light to import (no torch): every name is declared here with its module,
`raytune_fl/methods/<name>.py`, which registers its `SPEC` when it is first looked up (`METHODS.get`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from raytune_fl.methods.base import Method, MethodContext, MethodSpec
from raytune_fl.registry import Registry

NAMES = (
    # FedAvg and server-side variants
    "fedavg",
    "fedavgm",
    "fedbuff",
    "fednova",
    "qffl",
    "fedgh",
    "fedadagrad",
    "fedadam",
    "fedyogi",
    # local terms and client hooks
    "fedprox",
    "moon",
    "scaffold",
    "fedbn",
    "freeze",
    "feddyn",
    "fedalign",
    "fedpac",
    # personalised: each client's own head (FedPer, FedRep), a head fine-tuned at evaluation (FedBABU)
    "fedper",
    "fedrep",
    "fedbabu",
    # a second model per client (issue 61's personalised methods)
    "ditto",
    "apfl",
    "pfedme",
    # the representation methods this platform ablates
    "feduv",
    "univarfl",
    "fedld",
    # FedDecorr, alone and stacked on FedProx, FedAvgM and MOON
    "feddecorr",
    "fedprox_decorr",
    "fedavgm_decorr",
    "moon_decorr",
)

METHODS: Registry[MethodSpec] = Registry("method", homes={name: f"raytune_fl.methods.{name}" for name in NAMES})


def register(spec: MethodSpec) -> MethodSpec:
    """Register a method under its own name (in its module: `SPEC = register(MethodSpec(...))`)."""
    return METHODS.register(spec.name)(spec)


def build_method(name: str, params: Mapping[str, Any], context: MethodContext | int) -> Method:
    """Build a method from hyperparameters resolved by its spec (defaults filled, names, types and bounds checked).

    `context` may be just the number of classes where nothing else matters (tests, validation).
    """
    spec = METHODS.get(name)
    if isinstance(context, int):
        context = MethodContext(num_classes=context)
    return spec.build(spec.resolve(params), context)
