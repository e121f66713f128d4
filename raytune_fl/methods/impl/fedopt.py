"""The server optimiser of FedAdagrad, FedAdam and FedYogi, and its state (raytune_fl.methods.fedopt explains it)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from raytune_fl.aggregators.fedopt import BiasCorrection, Rule, ServerRule, Weighting, fedopt
from raytune_fl.methods.base import ServerAggregator
from raytune_fl.types import ClientUpdate, Weights


class AdaptiveServer(ServerAggregator):
    """The server optimiser's state: first moment m, second moment v (empty: zeros) and t, the steps taken."""

    def __init__(
        self,
        rule: Rule,
        server_lr: float,
        beta1: float,
        beta2: float,
        tau: float,
        weighting: Weighting = "uniform",
        bias_correction: BiasCorrection = "none",
    ) -> None:
        self.rule = rule
        self.server_lr = float(server_lr)
        self.beta1 = float(beta1)
        self.beta2 = float(beta2)
        self.tau = float(tau)
        self.weighting = weighting
        self.bias_correction = bias_correction
        self.m: Weights = {}
        self.v: Weights = {}
        self.t = 0

    def aggregate(self, global_weights: Weights, updates: Sequence[ClientUpdate]) -> Weights:
        server = ServerRule(
            self.rule, self.server_lr, self.beta1, self.beta2, self.tau, self.weighting, self.bias_correction
        )
        new, self.m, self.v = fedopt(global_weights, updates, self.m, self.v, self.t + 1, server)
        self.t += 1
        return new

    def metrics(self) -> dict[str, float]:
        """The per-coordinate step size eta / (sqrt(v) + tau): its median and maximum over all coordinates."""
        if not self.v:
            return {}
        steps = self.server_lr / (np.sqrt(np.concatenate([v.ravel() for v in self.v.values()])) + self.tau)
        return {"server_step_median": float(np.median(steps)), "server_step_max": float(steps.max())}

    def state_dict(self) -> dict[str, Any]:
        return {
            "m": {key: value.copy() for key, value in self.m.items()},
            "v": {key: value.copy() for key, value in self.v.items()},
            "t": self.t,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.m = {key: np.array(value, copy=True) for key, value in state.get("m", {}).items()}
        self.v = {key: np.array(value, copy=True) for key, value in state.get("v", {}).items()}
        self.t = int(state.get("t", 0))
