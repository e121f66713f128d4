"""FedBN (Li, Jiang, Zhang, Kamp & Dou, ICLR 2021): BatchNorm layers stay local to each client.

Every BatchNorm module's state_dict entries (weight, bias, running_mean, running_var,
num_batches_tracked) are per-client state: at round start a returning client loads its own over
the global ones it was just sent; at round end it stores them again. Everything else is trained
from the global weights as usual.

The server runs plain FedAvg over every entry. The global model's BN entries are thus the average
of the participating clients' own, used only when the server evaluates the global model: a client
never trains from them after its first round (in its first round it has no state of its own yet,
so one round from a fresh state is exactly FedAvg). Because that averaged-BN global model is not
what any client uses, the round driver also reports `personal_*` metrics: each client's held-out
samples classified by the global weights with that client's own BatchNorm (FedBN's own protocol).
"""

from __future__ import annotations

from typing import Any

from raytune_fl.methods.base import Method, MethodContext, MethodSpec, Stateless
from raytune_fl.methods.registry import register


def build(params: dict[str, Any], context: MethodContext) -> Method:
    from raytune_fl.aggregators import fedavg
    from raytune_fl.methods.impl.fedbn import LocalBatchNorm, with_own_batchnorm

    return Method(SPEC.name, (), Stateless(fedavg), hooks=(LocalBatchNorm(),), personalise=with_own_batchnorm)


SPEC = register(
    MethodSpec(
        "fedbn",
        {},
        build,
        summary="BatchNorm weights and statistics stay per client; the rest is FedAvg",
        as_fedavg={},  # a client's first round trains from the global BN entries: exactly FedAvg
        image_model="it keeps each client's BatchNorm layers, which the text model has none of",
        personalises=True,
    )
)
