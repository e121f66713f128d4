"""FedAdagrad: Adagrad on the server, without momentum (the official runs' and Flower's); fedopt.py explains it."""

from __future__ import annotations

from raytune_fl.methods.fedopt import server_optimiser_spec
from raytune_fl.methods.registry import register

SPEC = register(
    server_optimiser_spec(
        "adagrad",
        summary="Adagrad on the server: v <- v + Delta^2, w <- w + eta m / (sqrt(v) + tau)",
        # the paper's best CIFAR-10 server_lr and tau for FedAdagrad; beta1 0: no server momentum (official, Flower)
        server_lr=0.1,
        beta1=0.0,
        tau=0.01,
    )
)
