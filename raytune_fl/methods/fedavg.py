"""FedAvg (McMahan et al. 2017): cross-entropy only, sample-weighted mean of client models."""

from __future__ import annotations

from typing import Any

from raytune_fl.methods.base import Method, MethodContext, MethodSpec, Stateless
from raytune_fl.methods.registry import register


def build(params: dict[str, Any], context: MethodContext) -> Method:
    from raytune_fl.aggregators import fedavg

    return Method(SPEC.name, (), Stateless(fedavg))


SPEC = register(MethodSpec("fedavg", {}, build, "cross-entropy only"))
