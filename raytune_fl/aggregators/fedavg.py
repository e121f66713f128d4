"""FedAvg: w <- w_t + sum_i (n_i / n) * (w_i - w_t), i.e. the sample-weighted mean of client models."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from raytune_fl.types import ClientUpdate, Weights

RUNNING_STATISTICS = ("running_mean", "running_var")


def is_running_statistic(key: str) -> bool:
    """BatchNorm running statistics: averaged by every server rule, never scaled, projected or given momentum.

    They are not gradients: a server learning rate, momentum or extrapolation can push a running
    variance below zero (NaN at evaluation).
    """
    return key.endswith(RUNNING_STATISTICS)


def weighted_mean_delta(updates: Sequence[ClientUpdate], scales: Sequence[float] | None = None) -> Weights:
    """sum_i (n_i / n) * s_i * delta_i (s_i = 1 without `scales`; always 1 for BatchNorm running statistics).

    With every s_i == 1.0 the arithmetic is FedAvg's bit for bit, which FedNova and q-FFL rely on.
    """
    if not updates:
        raise ValueError("cannot aggregate zero client updates")
    if scales is not None and len(scales) != len(updates):
        raise ValueError(f"{len(scales)} scales for {len(updates)} updates")
    total = sum(u.num_samples for u in updates)
    if total <= 0:
        raise ValueError("client updates carry no samples")
    # sorted by client id: float sums then do not depend on the order replies arrived in
    pairs = sorted(zip(updates, scales or [1.0] * len(updates)), key=lambda pair: pair[0].client_id)
    first = pairs[0][0]
    mean: Weights = {}
    for key in first.delta:
        acc = np.zeros_like(first.delta[key], dtype=np.float64)
        plain = is_running_statistic(key)  # BatchNorm statistics: FedAvg's mean, never rescaled
        for update, scale in pairs:
            acc += ((update.num_samples / total) * (1.0 if plain else scale)) * update.delta[key]
        mean[key] = acc.astype(first.delta[key].dtype)
    return mean


def apply_delta(global_weights: Weights, delta: Weights, updates: Sequence[ClientUpdate]) -> Weights:
    """w_t + delta on float entries; integer buffers (num_batches_tracked) from the lowest client id, not averaged."""
    first = min(updates, key=lambda u: u.client_id)
    return {
        key: value + delta[key] if key in delta else first.buffers.get(key, value)
        for key, value in global_weights.items()
    }


def fedavg(global_weights: Weights, updates: Sequence[ClientUpdate]) -> Weights:
    """FedAvg's rule: the global weights plus the sample-weighted mean of the client deltas."""
    return apply_delta(global_weights, weighted_mean_delta(updates), updates)


def scaled_fedavg(global_weights: Weights, updates: Sequence[ClientUpdate], scales: Sequence[float]) -> Weights:
    """w_t + sum_i (n_i / n) * s_i * delta_i: FedNova's and q-FFL's update shape."""
    return apply_delta(global_weights, weighted_mean_delta(updates, scales), updates)


def plain_mean_statistics(global_weights: Weights, aggregated: Weights, updates: Sequence[ClientUpdate]) -> Weights:
    """`aggregated` with each BatchNorm running statistic set to the plain mean of the clients' own,
    w_t + (1/m) sum_i delta_i, whatever the method did with them (`batchnorm.aggregate: mean`)."""
    pairs = sorted(updates, key=lambda u: u.client_id)  # float sums independent of arrival order
    out = dict(aggregated)
    for key, value in global_weights.items():
        if not is_running_statistic(key) or key not in pairs[0].delta:
            continue
        acc = np.zeros_like(value, dtype=np.float64)
        for update in pairs:
            acc += update.delta[key]
        out[key] = value + (acc / len(pairs)).astype(value.dtype)
    return out
