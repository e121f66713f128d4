"""A plugin that registers a method, `fedtrim`: a new local loss term plus a new server aggregator.

- Client side, `FeatureNormTerm`: lam * mean over the batch of ||z||^2 / D, which keeps the representation z from
  growing on a client's few classes (added to the cross-entropy by the one training loop; the method never writes
  its own loop).
- Server side, `TrimmedMean`: the coordinate-wise trimmed mean of the client updates (Yin et al., 2018): per weight,
  drop the `trim` fraction of the largest and of the smallest client values, average the rest (unweighted).
  trim = 0 is the plain mean of the updates.

Both hyperparameters are declared once, as `Param`s, so YAML can fix or search them and MLflow logs them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from raytune_fl import (
    Batch,
    ClientUpdate,
    LocalTerm,
    Method,
    MethodContext,
    MethodSpec,
    Param,
    ServerAggregator,
    Weights,
    active,
    apply_delta,
    hyperparameters,
    register_method,
)

LAM = Param(float, 0.01, "weight of the feature-norm term (0: off)", name="lam", ge=0)
TRIM = Param(float, 0.1, "fraction of client values dropped at each end, per weight", name="trim", ge=0, lt=0.5)


class FeatureNormTerm(LocalTerm):
    name = "feature_norm"  # logged per round as term_feature_norm

    def loss(self, batch: Batch) -> torch.Tensor:
        return batch.z.pow(2).sum(dim=1).mean() / batch.z.shape[1]


def trimmed_mean(values: np.ndarray, trim: float) -> np.ndarray:
    """Mean over axis 0 after dropping floor(trim * K) of the K values at each end, per coordinate."""
    cut = int(trim * len(values))
    kept = np.sort(values, axis=0)[cut : len(values) - cut]
    return kept.mean(axis=0)


class TrimmedMean(ServerAggregator):
    # No state across rounds, so no state_dict: a server momentum or a running sum would be returned by
    # state_dict() and restored by load_state_dict() to survive a trial's resume (test_my_method.py checks it)
    def __init__(self, trim: float) -> None:
        self.trim = trim

    def aggregate(self, global_weights: Weights, updates: Sequence[ClientUpdate]) -> Weights:
        delta = {
            key: trimmed_mean(np.stack([u.delta[key] for u in updates]), self.trim).astype(value.dtype)
            for key, value in updates[0].delta.items()
        }
        return apply_delta(global_weights, delta, updates)  # integer buffers as FedAvg treats them


def build(params: dict[str, Any], context: MethodContext) -> Method:
    # active(): a term with weight 0 is left out, so lam = 0 costs nothing
    return Method(SPEC.name, active([FeatureNormTerm(LAM.of(params))]), TrimmedMean(TRIM.of(params)))


SPEC = register_method(
    MethodSpec(
        "fedtrim",
        hyperparameters(LAM, TRIM),
        build,
        "feature-norm term lam * ||z||^2 / D + coordinate-wise trimmed mean of the updates",
        as_fedavg=None,  # an unweighted mean is not FedAvg's sample-weighted one, even at trim = 0
    )
)
