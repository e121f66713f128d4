"""FedProx (Li et al. 2020): adds (mu/2) * ||w - w_t||^2 over trainable parameters."""

from __future__ import annotations

from typing import Any

from raytune_fl.methods.base import Method, MethodContext, MethodSpec, Param, Stateless, active, hyperparameters
from raytune_fl.methods.registry import register

MU = Param(float, 0.01, "weight of the proximal term (0: FedAvg)", name="mu", ge=0)


def build(params: dict[str, Any], context: MethodContext) -> Method:
    from raytune_fl.aggregators import fedavg
    from raytune_fl.methods.impl.fedprox import ProximalTerm

    # proximal() is already 0.5 * ||w - w_t||^2, so the term weight is mu itself
    return Method(SPEC.name, active([ProximalTerm(MU.of(params))]), Stateless(fedavg))


SPEC = register(
    MethodSpec("fedprox", hyperparameters(MU), build, "proximal term (mu/2)||w - w_t||^2", as_fedavg={MU.name: 0.0})
)
