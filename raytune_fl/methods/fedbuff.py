"""FedBuff: asynchronous buffered aggregation. Clients train on whatever model version was current when
they started; the round driver (engine/fedbuff.py) applies every `buffer_size` arrivals as one round.

Concurrency (clients training at once) is participation x clients; client speeds, dropouts and step
budgets come from `base.system`, so staleness arises from simulated time and is the same on every run.
"""

from __future__ import annotations

from typing import Any

from raytune_fl.methods.base import Method, MethodContext, MethodSpec, Param, Stateless, hyperparameters
from raytune_fl.methods.registry import register

BUFFER_SIZE = Param(int, 3, "K: arrivals aggregated per server step", name="buffer_size", ge=1)
SERVER_LR = Param(float, 1.0, "server step size on the buffer's weighted mean delta", name="server_lr", gt=0)
STALENESS_EXPONENT = Param(
    float, 0.5, "a: a delta tau versions stale is weighted (1 + tau)^-a", name="staleness_exponent", ge=0
)


def build(params: dict[str, Any], context: MethodContext) -> Method:
    from raytune_fl.aggregators.fedbuff import fedbuff

    size, lr = BUFFER_SIZE.of(params), SERVER_LR.of(params)
    exponent = STALENESS_EXPONENT.of(params)
    aggregate = Stateless(lambda weights, updates: fedbuff(weights, updates, lr, exponent))
    return Method(SPEC.name, (), aggregate, buffer_size=size)


SPEC = register(
    MethodSpec(
        "fedbuff",
        hyperparameters(BUFFER_SIZE, SERVER_LR, STALENESS_EXPONENT),
        build,
        summary="asynchronous: apply every K arrivals, w <- w + server_lr * mean_i (1 + tau_i)^-a delta_i",
        as_fedavg=None,  # unweighted mean of a buffer of stale updates: no setting is FedAvg's round
        sequential="asynchronous: clients are dispatched and aggregated one arrival at a time",
        asynchronous=True,
        central_privacy="its buffered asynchronous rounds aggregate arrivals, not a Poisson-sampled cohort",
    )
)
