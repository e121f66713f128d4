"""UniVarFL: classifier variance (variance hinge) + hyperspherical energy of normalised z.

Hyperparameters: lambda (variance weight; None = D/4), mu (energy weight), eps (energy's
denominator offset, not given in the paper), include_diagonal (the paper's sum includes i = j,
a constant 1/eps per sample with no useful gradient: excluded by default).
"""

from __future__ import annotations

from typing import Any

from raytune_fl.methods.base import Method, MethodContext, MethodSpec, Param, Stateless, active, hyperparameters
from raytune_fl.methods.registry import register

MU = Param(float, 0.5, "weight of the hyperspherical energy term", name="mu", ge=0)
LAMBDA = Param(float, None, "weight of the classifier variance hinge (None: D/4)", name="lambda", ge=0)
EPS = Param(float, 1e-2, "added to distances in the energy, against division by zero", name="eps", gt=0)
INCLUDE_DIAGONAL = Param(bool, False, "count each point's self-distance in the energy", name="include_diagonal")


def build(params: dict[str, Any], context: MethodContext) -> Method:
    from raytune_fl.aggregators import fedavg
    from raytune_fl.methods.impl.feduv import ClassifierVariance
    from raytune_fl.methods.impl.univarfl import HypersphericalEnergy

    given = LAMBDA.of(params)
    variance_weight = context.num_classes / 4.0 if given is None else given  # lambda = None: D/4
    terms = [
        ClassifierVariance(variance_weight, "var"),
        HypersphericalEnergy(MU.of(params), EPS.of(params), INCLUDE_DIAGONAL.of(params)),
    ]
    return Method(SPEC.name, active(terms), Stateless(fedavg))


SPEC = register(
    MethodSpec(
        "univarfl",
        hyperparameters(MU, LAMBDA, EPS, INCLUDE_DIAGONAL),
        build,
        derived={LAMBDA.name: "D/4"},
        summary="classifier variance hinge + hyperspherical energy",
        as_fedavg={MU.name: 0.0, LAMBDA.name: 0.0},
        per_sample="its variance and energy terms are statistics of the whole batch (a variance, pairs of samples)",
    )
)
