"""MOON, model-contrastive federated learning (Li, He & Song, CVPR 2021).

Adds `mu * l_con` to the cross-entropy, where for each sample

    l_con = -log( exp(cos(z, z_glob)/tau) / (exp(cos(z, z_glob)/tau) + exp(cos(z, z_prev)/tau)) )

pulls the local representation z towards the global model's (z_glob) and away from the one this
client's model produced after its previous local round (z_prev). Both reference models are frozen,
in eval mode and run without gradients. A client's first round has no previous model: the term is 0.
The previous model travels as per-client state (its full state_dict as numpy arrays).
Aggregator: FedAvg.
"""

from __future__ import annotations

from typing import Any

from raytune_fl.methods.base import Method, MethodContext, MethodSpec, Param, Stateless, active, hyperparameters
from raytune_fl.methods.registry import register

MU = Param(float, 1.0, "weight of the model-contrastive term (0: FedAvg)", name="mu", ge=0)
TAU = Param(float, 0.5, "temperature of the contrastive softmax", name="tau", gt=0)


def build(params: dict[str, Any], context: MethodContext) -> Method:
    from raytune_fl.aggregators import fedavg
    from raytune_fl.methods.impl.moon import ModelContrastiveTerm

    # mu = 0 drops the term entirely (no reference forwards, no state): plain FedAvg
    return Method(SPEC.name, active([ModelContrastiveTerm(MU.of(params), TAU.of(params))]), Stateless(fedavg))


SPEC = register(
    MethodSpec(
        "moon",
        hyperparameters(MU, TAU),
        build,
        summary="model-contrastive term: z near the global model's, away from the client's previous",
        as_fedavg={MU.name: 0.0},
        sequential="each step also runs the global and the client's previous model (whole modules)",
    )
)
