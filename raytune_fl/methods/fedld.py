"""FedLD (Zeng et al., MICCAI 2024): margin control on the logits + principal-gradient aggregation.

Hyperparameters: lambda (margin weight, 0.03 = the paper's non-IID value), principal (True: the
principal-gradient aggregator, False: FedAvg), fraction (share of principal directions kept, in (0, 1]),
fidelity ("paper", or "official": the official code's margin on softmax probabilities and its per-tensor,
unweighted aggregation with a plain mean in the first round). lambda = 0 and/or principal = False give the
ablation none / margin / principal / both.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from raytune_fl.aggregators.principal import FIDELITIES as PRINCIPAL_FIDELITIES
from raytune_fl.methods.base import Method, MethodContext, MethodSpec, Param, Stateless, active, hyperparameters
from raytune_fl.methods.registry import register

if TYPE_CHECKING:
    from raytune_fl.aggregators.principal import Fidelity

LAMBDA = Param(float, 0.03, "weight of the logit margin-control term", name="lambda", ge=0)
PRINCIPAL = Param(bool, True, "principal-gradient aggregation (false: FedAvg's mean)", name="principal")
FRACTION = Param(
    float, 0.8, "share of the gradient spectrum the principal directions keep", name="fraction", gt=0, le=1
)
FIDELITY = Param(
    str, "paper", "follow the paper or the official code", name="fidelity", choices=tuple(PRINCIPAL_FIDELITIES)
)


def build(params: dict[str, Any], context: MethodContext) -> Method:
    from raytune_fl.aggregators.fedavg import fedavg
    from raytune_fl.methods.impl.fedld import MarginControl, PrincipalGradient

    fidelity = cast(
        "Fidelity", FIDELITY.of(params)
    )  # Param.of types a choice as str; the spec's choices checked the literal
    aggregator = PrincipalGradient(FRACTION.of(params), fidelity) if PRINCIPAL.of(params) else Stateless(fedavg)
    return Method(SPEC.name, active([MarginControl(LAMBDA.of(params), fidelity)]), aggregator)


SPEC = register(
    MethodSpec(
        "fedld",
        hyperparameters(LAMBDA, PRINCIPAL, FRACTION, FIDELITY),
        build,
        summary="logit margin control + principal-gradient aggregation",
        as_fedavg={LAMBDA.name: 0.0, PRINCIPAL.name: False},
        central_privacy="its principal-gradient server reads every client's delta, not only their mean",
    )
)
