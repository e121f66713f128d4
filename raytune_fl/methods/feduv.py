"""FedUV (Son et al., CVPR 2024): classifier variance (std hinge) + RBF uniformity of z.

Hyperparameters: lambda (variance weight; None = D/4 as in the paper, 2.5 as in the official code),
mu (uniformity weight), sigma (RBF bandwidth; "median" = the batch's median squared distance),
fidelity ("paper", or "official" for the official code's kernel exp(-d^2/sigma), its median bandwidth kept
in the graph and taken over non-zero distances only, and lambda = 2.5).
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
from raytune_fl.methods.losses import classifier_variance, rbf_uniformity


class ClassifierVariance(LocalTerm):
    name = "variance"

    def __init__(self, weight: float, statistic: str) -> None:
        super().__init__(weight)
        self.statistic = statistic

    def loss(self, batch: Batch) -> Tensor:
        return classifier_variance(batch.logits, self.statistic)


# rbf_uniformity's options per fidelity (METHODS.md, "Gaussian (RBF) uniformity")
KERNEL_OPTIONS: dict[str, dict[str, Any]] = {
    "paper": {},
    "official": {"scale": 1.0, "detach_median": False, "drop_zero_distances": True},
}
OFFICIAL_LAMBDA = 2.5  # the official code's fixed variance weight


class RbfUniformity(LocalTerm):
    name = "uniformity"

    def __init__(self, weight: float, sigma: float | str, fidelity: str = "paper") -> None:
        super().__init__(weight)
        self.sigma, self.fidelity = sigma, fidelity

    def loss(self, batch: Batch) -> Tensor:
        return rbf_uniformity(batch.z, self.sigma, **KERNEL_OPTIONS[self.fidelity])


def resolve_lambda(params: dict[str, Any], num_classes: int) -> float:
    """lambda = None: D/4 (paper), or 2.5 with fidelity "official" (UniVarFL has no fidelity key: paper)."""
    if params["lambda"] is not None:
        return params["lambda"]
    return OFFICIAL_LAMBDA if params.get("fidelity", "paper") == "official" else num_classes / 4.0


def build(params: dict[str, Any], context: MethodContext) -> Method:
    params = {**params, "lambda": resolve_lambda(params, context.num_classes)}
    terms = [
        ClassifierVariance(params["lambda"], "std"),
        RbfUniformity(params["mu"], params["sigma"], params["fidelity"]),
    ]
    return Method("feduv", active(terms), Stateless(fedavg))
