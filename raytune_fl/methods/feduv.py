"""FedUV (Son et al., CVPR 2024): classifier variance (std hinge) + RBF uniformity of z.

Hyperparameters: lambda (variance weight; None = D/4 as in the paper, 2.5 as in the official code),
mu (uniformity weight), sigma (RBF bandwidth; "median" = the batch's median squared distance),
fidelity ("paper", or "official" for the official code's kernel exp(-d^2/sigma), its median bandwidth kept
in the graph and taken over non-zero distances only, and lambda = 2.5).
"""

from __future__ import annotations

from typing import Any

from raytune_fl.methods.base import (
    PAPER_OR_OFFICIAL,
    Method,
    MethodContext,
    MethodSpec,
    Param,
    Stateless,
    active,
    hyperparameters,
)
from raytune_fl.methods.registry import register

MU = Param(float, 0.5, "weight of the RBF uniformity term", name="mu", ge=0)
LAMBDA = Param(float, None, "weight of the classifier std hinge (None: derived)", name="lambda", ge=0)
SIGMA = Param(float, "median", "RBF width ('median': the batch's median)", name="sigma", gt=0, special=("median",))
FIDELITY = Param(str, "paper", "follow the paper or the official code", name="fidelity", choices=PAPER_OR_OFFICIAL)

OFFICIAL_LAMBDA = 2.5  # the official code's fixed variance weight


def variance_weight(params: dict[str, Any], num_classes: int) -> float:
    """lambda = None: D/4 (paper), or 2.5 with fidelity "official"."""
    given = LAMBDA.of(params)
    if given is not None:
        return given
    return OFFICIAL_LAMBDA if FIDELITY.of(params) == "official" else num_classes / 4.0


def build(params: dict[str, Any], context: MethodContext) -> Method:
    from raytune_fl.aggregators import fedavg
    from raytune_fl.methods.impl.feduv import ClassifierVariance, RbfUniformity

    terms = [
        ClassifierVariance(variance_weight(params, context.num_classes), "std"),
        RbfUniformity(MU.of(params), SIGMA.of(params), FIDELITY.of(params)),
    ]
    return Method(SPEC.name, active(terms), Stateless(fedavg))


SPEC = register(
    MethodSpec(
        "feduv",
        hyperparameters(MU, LAMBDA, SIGMA, FIDELITY),
        build,
        summary="classifier std hinge + RBF uniformity",
        derived={LAMBDA.name: "D/4 (paper) or 2.5 (official)"},
        as_fedavg={MU.name: 0.0, LAMBDA.name: 0.0},
        per_sample="its variance and uniformity terms are statistics of the whole batch (a variance, pairwise kernels)",
    )
)
