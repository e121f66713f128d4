"""FedAvg (McMahan et al. 2017): cross-entropy only, sample-weighted mean of client models."""

from __future__ import annotations

from typing import Any

from raytune_fl.aggregators import fedavg
from raytune_fl.methods.base import Method, MethodContext, Stateless


def build(params: dict[str, Any], context: MethodContext) -> Method:
    return Method("fedavg", (), Stateless(fedavg))
