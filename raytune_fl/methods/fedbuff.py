"""FedBuff: asynchronous buffered aggregation. Clients train on whatever model version was current when
they started; the round driver (engine/fedbuff.py) applies every `buffer_size` arrivals as one round.

Concurrency (clients training at once) is participation x clients; client speeds, dropouts and step
budgets come from `base.system`, so staleness arises from simulated time and is the same on every run.
"""

from __future__ import annotations

from typing import Any

from raytune_fl.aggregators.fedbuff import fedbuff
from raytune_fl.methods.base import Method, MethodContext, MethodSpec, Param, Stateless, register


def build(params: dict[str, Any], context: MethodContext) -> Method:
    size, lr = params["buffer_size"], params["server_lr"]
    exponent = float(params["staleness_exponent"])
    aggregate = Stateless(lambda weights, updates: fedbuff(weights, updates, float(lr), exponent))
    return Method("fedbuff", (), aggregate, buffer_size=size)


register(
    MethodSpec(
        "fedbuff",
        {
            "buffer_size": Param(int, 3, "K: arrivals aggregated per server step", ge=1),
            "server_lr": Param(float, 1.0, "server step size on the buffer's weighted mean delta", gt=0),
            "staleness_exponent": Param(float, 0.5, "a: a delta tau versions stale is weighted (1 + tau)^-a", ge=0),
        },
        build,
        summary="asynchronous: apply every K arrivals, w <- w + server_lr * mean_i (1 + tau_i)^-a delta_i",
        as_fedavg=None,  # unweighted mean of a buffer of stale updates: no setting is FedAvg's round
    )
)
