"""FedAdagrad: Adagrad on the server, without momentum (the official runs' and Flower's); fedopt.py explains it."""

from __future__ import annotations

import dataclasses
from typing import Any

from raytune_fl.methods.base import Method, MethodContext, MethodSpec, hyperparameters
from raytune_fl.methods.fedopt import BETA1, FEDAVG_LIMIT, SERVER_LR, TAU, WEIGHTING, build_server_optimiser
from raytune_fl.methods.registry import register


def build(params: dict[str, Any], context: MethodContext) -> Method:
    return build_server_optimiser("adagrad", params, context)


SPEC = register(
    MethodSpec(
        "fedadagrad",
        hyperparameters(
            dataclasses.replace(SERVER_LR, default=0.1),
            dataclasses.replace(BETA1, default=0.0),
            dataclasses.replace(TAU, default=0.01),
            WEIGHTING,
        ),
        build,
        summary="Adagrad on the server: v <- v + Delta^2, w <- w + eta m / (sqrt(v) + tau)",
        as_fedavg=dict(FEDAVG_LIMIT),
    )
)
