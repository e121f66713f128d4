"""FedBuff (Nguyen et al., 2022): the server applies a buffer of K asynchronous client updates.

    w <- w + server_lr * (1/K) * sum_i s(tau_i) * delta_i,    s(tau) = (1 + tau) ** -staleness_exponent

tau_i is the update's staleness: server versions between the model the client started from and the
one it is applied to. An exponent of 0.5 is the paper's 1/sqrt(1 + tau); 0 weights every update alike.
Unweighted by sample counts, as in the paper. BatchNorm running statistics get the plain mean.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from raytune_fl.aggregators.fedavg import apply_delta, is_running_statistic
from raytune_fl.types import ClientUpdate, Weights


def staleness_weight(staleness: int, exponent: float) -> float:
    return float((1.0 + staleness) ** -exponent)


def fedbuff(
    global_weights: Weights, updates: Sequence[ClientUpdate], server_lr: float, staleness_exponent: float
) -> Weights:
    if not updates:
        raise ValueError("cannot aggregate an empty buffer")
    ordered = sorted(updates, key=lambda u: u.client_id)  # float sums independent of arrival order
    scales = [staleness_weight(u.staleness, staleness_exponent) for u in ordered]
    k = len(ordered)
    mean: Weights = {}
    for key, first in ordered[0].delta.items():
        acc = np.zeros_like(first, dtype=np.float64)
        plain = is_running_statistic(key)
        for update, scale in zip(ordered, scales):
            acc += (1.0 if plain else scale) * update.delta[key]
        mean[key] = ((1.0 if plain else server_lr) * acc / k).astype(first.dtype)
    return apply_delta(global_weights, mean, ordered)
