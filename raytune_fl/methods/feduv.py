"""FedUV (Son et al., CVPR 2024): classifier variance (std hinge) + RBF uniformity of z.

Hyperparameters: lambda (variance weight; None = D/4 as in the paper, the official code fixes 2.5),
mu (uniformity weight), sigma (RBF bandwidth; "median" = the batch's median squared distance).
"""

from __future__ import annotations

from typing import Any

from torch import Tensor

from raytune_fl.aggregators import fedavg
from raytune_fl.methods.base import (
    METHODS,
    Batch,
    LocalTerm,
    Method,
    MethodContext,
    MethodSpec,
    Stateless,
    active,
    require_non_negative,
)
from raytune_fl.methods.losses import classifier_variance, rbf_uniformity


class ClassifierVariance(LocalTerm):
    name = "variance"

    def __init__(self, weight: float, statistic: str) -> None:
        super().__init__(weight)
        self.statistic = statistic

    def loss(self, batch: Batch) -> Tensor:
        return classifier_variance(batch.logits, self.statistic)


class RbfUniformity(LocalTerm):
    name = "uniformity"

    def __init__(self, weight: float, sigma: float | str) -> None:
        super().__init__(weight)
        self.sigma = sigma

    def loss(self, batch: Batch) -> Tensor:
        return rbf_uniformity(batch.z, self.sigma)


def resolve_lambda(params: dict[str, Any], num_classes: int) -> float:
    return num_classes / 4.0 if params["lambda"] is None else params["lambda"]


def build(params: dict[str, Any], context: MethodContext) -> Method:
    params = {**params, "lambda": resolve_lambda(params, context.num_classes)}
    require_non_negative(params, "mu", "lambda")
    sigma = params["sigma"]
    if sigma != "median" and (isinstance(sigma, bool) or not isinstance(sigma, (int, float)) or sigma <= 0):
        raise ValueError(f"sigma: must be 'median' or a number > 0 (got {sigma!r})")
    terms = [ClassifierVariance(params["lambda"], "std"), RbfUniformity(params["mu"], sigma)]
    return Method("feduv", active(terms), Stateless(fedavg))


METHODS.register("feduv")(
    MethodSpec(
        "feduv",
        {"mu": 0.5, "lambda": None, "sigma": "median"},
        build,
        summary="classifier std hinge + RBF uniformity",
        derived={"lambda": "D/4"},
    )
)
