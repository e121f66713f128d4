"""FedBuff: asynchronous buffered aggregation. Clients train on whatever model version was current when
they started; the round driver (engine/fedbuff.py) applies every `buffer_size` arrivals as one round.

Concurrency (clients training at once) is participation x clients; client speeds, dropouts and step
budgets come from `base.system`, so staleness arises from simulated time and is the same on every run.
"""

from __future__ import annotations

from typing import Any

from raytune_fl.aggregators.fedbuff import fedbuff
from raytune_fl.methods.base import Method, MethodContext, Stateless


def build(params: dict[str, Any], context: MethodContext) -> Method:
    size, lr = params["buffer_size"], params["server_lr"]
    exponent = float(params["staleness_exponent"])
    aggregate = Stateless(lambda weights, updates: fedbuff(weights, updates, float(lr), exponent))
    return Method("fedbuff", (), aggregate, buffer_size=size)
