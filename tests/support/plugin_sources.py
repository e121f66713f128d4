"""Plugin modules the tests write to disk: a method with a FedAvgM-like server momentum (`velocity` is state), lost
across a resume when kept in a plain attribute, kept when it goes through state_dict/load_state_dict."""

from __future__ import annotations

_MOMENTUM = """
import numpy as np
from raytune_fl import Method, MethodSpec, ServerAggregator, apply_delta, register_method, weighted_mean_delta


class Momentum(ServerAggregator):
    def __init__(self):
        self.velocity = {}

    def aggregate(self, global_weights, updates):
        mean = weighted_mean_delta(updates)
        self.velocity = {k: np.asarray(0.9 * self.velocity.get(k, 0) + v, v.dtype) for k, v in mean.items()}
        return apply_delta(global_weights, self.velocity, updates)
EXTRA

def build(params, context):
    return Method("NAME", (), Momentum())


register_method(MethodSpec("NAME", {}, build, as_fedavg=None))
"""

_KEEPS_IT = """
    def state_dict(self):
        return {"velocity": self.velocity}

    def load_state_dict(self, state):
        self.velocity = dict(state["velocity"])
"""


def momentum_plugin(name: str, keeps_state: bool) -> str:
    """The source of a plugin module registering method `name`."""
    return _MOMENTUM.replace("NAME", name).replace("EXTRA", _KEEPS_IT.strip("\n") if keeps_state else "")
