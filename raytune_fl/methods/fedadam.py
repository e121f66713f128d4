"""FedAdam: Adam on the server (fedopt.py explains the family and its defaults)."""

from __future__ import annotations

from raytune_fl.methods.fedopt import server_optimiser_spec
from raytune_fl.methods.registry import register

SPEC = register(
    server_optimiser_spec(
        "adam", summary="Adam on the server: v <- b2 v + (1 - b2) Delta^2, w <- w + eta m / (sqrt(v) + tau)"
    )
)
