"""FedBuff: asynchronous buffered aggregation. Clients train on whatever model version was current when
they started; the round driver (engine/fedbuff.py) applies every `buffer_size` arrivals as one round.

Concurrency (clients training at once) is participation x clients; client speeds, dropouts and step
budgets come from `base.system`, so staleness arises from simulated time and is the same on every run.
"""

from __future__ import annotations

from typing import Any

from raytune_fl.aggregators.fedbuff import fedbuff
from raytune_fl.methods.base import METHODS, Method, MethodContext, MethodSpec, Stateless, require_non_negative


def build(params: dict[str, Any], context: MethodContext) -> Method:
    size, lr = params["buffer_size"], params["server_lr"]
    if not isinstance(size, int) or isinstance(size, bool) or size < 1:
        raise ValueError(f"buffer_size: must be an integer >= 1 (got {size!r})")
    if not isinstance(lr, (int, float)) or isinstance(lr, bool) or not 0 < lr < float("inf"):
        raise ValueError(f"server_lr: must be a finite number > 0 (got {lr!r})")
    require_non_negative(params, "staleness_exponent")
    exponent = float(params["staleness_exponent"])
    aggregate = Stateless(lambda weights, updates: fedbuff(weights, updates, float(lr), exponent))
    return Method("fedbuff", (), aggregate, buffer_size=size)


METHODS.register("fedbuff")(
    MethodSpec(
        "fedbuff",
        {"buffer_size": 3, "server_lr": 1.0, "staleness_exponent": 0.5},
        build,
        summary="asynchronous: apply every K arrivals, w <- w + server_lr * mean_i (1 + tau_i)^-a delta_i",
        as_fedavg=None,  # unweighted mean of a buffer of stale updates: no setting is FedAvg's round
    )
)
