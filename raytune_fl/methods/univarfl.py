"""UniVarFL: classifier variance (variance hinge) + hyperspherical energy of normalised z.

Hyperparameters: lambda (variance weight; None = D/4), mu (energy weight), eps (energy's
denominator offset, not given in the paper), include_diagonal (the paper's sum includes i = j,
a constant 1/eps per sample with no useful gradient: excluded by default).
"""

from __future__ import annotations

from typing import Any

from torch import Tensor

from raytune_fl.aggregators import fedavg
from raytune_fl.methods.base import (
    Batch,
    LocalTerm,
    Method,
    MethodContext,
    Stateless,
    active,
)
from raytune_fl.methods.feduv import ClassifierVariance, resolve_lambda
from raytune_fl.methods.losses import hyperspherical_energy


class HypersphericalEnergy(LocalTerm):
    name = "energy"

    def __init__(self, weight: float, eps: float, include_diagonal: bool) -> None:
        super().__init__(weight)
        self.eps, self.include_diagonal = eps, include_diagonal

    def loss(self, batch: Batch) -> Tensor:
        return hyperspherical_energy(batch.z, self.eps, self.include_diagonal)


def build(params: dict[str, Any], context: MethodContext) -> Method:
    params = {**params, "lambda": resolve_lambda(params, context.num_classes)}
    terms = [
        ClassifierVariance(params["lambda"], "var"),
        HypersphericalEnergy(params["mu"], params["eps"], params["include_diagonal"]),
    ]
    return Method("univarfl", active(terms), Stateless(fedavg))
