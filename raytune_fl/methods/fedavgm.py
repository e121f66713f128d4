"""FedAvgM (Hsu, Qi & Brown, 2019): FedAvg's mean delta drives a server-side momentum.

    v <- server_momentum * v + mean_delta;   w <- w_t + server_lr * v

Local training is plain cross-entropy. The velocity v is server state (checkpointed with
state_dict); server_momentum = 0 with server_lr = 1 is FedAvg.
"""

from __future__ import annotations

from typing import Any

from raytune_fl.methods.base import Method, MethodContext, MethodSpec, Param, hyperparameters
from raytune_fl.methods.registry import register

SERVER_MOMENTUM = Param(float, 0.9, "beta: the server velocity's decay (0: FedAvg)", name="server_momentum", ge=0, lt=1)
SERVER_LR = Param(float, 1.0, "server step size on the velocity", name="server_lr", gt=0)


def build(params: dict[str, Any], context: MethodContext) -> Method:
    from raytune_fl.methods.impl.fedavgm import ServerMomentum

    return Method(SPEC.name, (), ServerMomentum(SERVER_MOMENTUM.of(params), SERVER_LR.of(params)))


SPEC = register(
    MethodSpec(
        "fedavgm",
        hyperparameters(SERVER_MOMENTUM, SERVER_LR),
        build,
        summary="server momentum on FedAvg's mean delta: v <- beta v + delta, w <- w + server_lr v",
        as_fedavg={SERVER_MOMENTUM.name: 0.0},
    )
)
