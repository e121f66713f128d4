"""FedYogi: Yogi on the server (fedopt.py explains the family and its defaults)."""

from __future__ import annotations

from raytune_fl.methods.fedopt import server_optimiser_spec
from raytune_fl.methods.registry import register

SPEC = register(
    server_optimiser_spec(
        "yogi",
        summary="Yogi on the server: v <- v - (1 - b2) Delta^2 sign(v - Delta^2), w <- w + eta m / (sqrt(v) + tau)",
    )
)
