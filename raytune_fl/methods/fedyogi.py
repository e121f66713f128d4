"""FedYogi: Yogi on the server (fedopt.py explains the family and its defaults)."""

from __future__ import annotations

from typing import Any

from raytune_fl.methods.base import Method, MethodContext, MethodSpec, hyperparameters
from raytune_fl.methods.fedopt import (
    BETA1,
    BETA2,
    FEDAVG_LIMIT,
    SERVER_LR,
    TAU,
    WEIGHTING,
    bias_correction,
    build_server_optimiser,
)
from raytune_fl.methods.registry import register


def build(params: dict[str, Any], context: MethodContext) -> Method:
    return build_server_optimiser("yogi", params, context)


SPEC = register(
    MethodSpec(
        "fedyogi",
        hyperparameters(SERVER_LR, BETA1, BETA2, TAU, WEIGHTING, bias_correction("yogi")),
        build,
        summary="Yogi on the server: v <- v - (1 - b2) Delta^2 sign(v - Delta^2), w <- w + eta m / (sqrt(v) + tau)",
        as_fedavg=dict(FEDAVG_LIMIT),
    )
)
