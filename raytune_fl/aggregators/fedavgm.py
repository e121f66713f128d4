"""FedAvgM, server momentum (Hsu, Qi & Brown, 2019). Numpy only.

    v <- beta * v + mean_delta          (mean_delta: FedAvg's sample-weighted mean of w_i - w_t)
    w <- w_t + server_lr * v

The velocity v is server state, keyed like the float weights; an empty dict means zeros. With
beta = 0 and server_lr = 1 this is FedAvg bit for bit. BatchNorm running statistics get FedAvg's
mean: with momentum or a server lr > 1 a running variance could overshoot below zero.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from raytune_fl.aggregators.fedavg import is_running_statistic, weighted_mean_delta
from raytune_fl.types import ClientUpdate, Weights


def fedavgm(
    global_weights: Weights,
    updates: Sequence[ClientUpdate],
    velocity: Mapping[str, np.ndarray],
    server_momentum: float,
    server_lr: float,
) -> tuple[Weights, Weights]:
    """(new global weights, new velocity); integer buffers from the lowest client id, as in FedAvg."""
    mean = weighted_mean_delta(updates)
    first = min(updates, key=lambda u: u.client_id)
    new_velocity: Weights = {}
    new: Weights = {}
    for key, value in global_weights.items():
        if key not in mean:
            new[key] = first.buffers.get(key, value)
            continue
        if is_running_statistic(key):  # BatchNorm statistics: FedAvg's mean, no momentum, no server lr
            new[key] = np.asarray(value + mean[key])
            continue
        previous = velocity.get(key)
        # a fresh velocity is zero, so v = mean exactly (no 0 * v rounding to reason about)
        v = mean[key] if previous is None else np.asarray(server_momentum * previous + mean[key], mean[key].dtype)
        new_velocity[key] = v
        new[key] = np.asarray(value + server_lr * v)
    return new, new_velocity
