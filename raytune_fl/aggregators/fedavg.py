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


def weighted_mean_delta(updates: Sequence[ClientUpdate]) -> Weights:
    if not updates:
        raise ValueError("cannot aggregate zero client updates")
    total = sum(u.num_samples for u in updates)
    if total <= 0:
        raise ValueError("client updates carry no samples")
    # sorted by client id: float sums then do not depend on the order replies arrived in
    ordered = sorted(updates, key=lambda u: u.client_id)
    mean: Weights = {}
    for key in ordered[0].delta:
        acc = np.zeros_like(ordered[0].delta[key], dtype=np.float64)
        for update in ordered:
            acc += (update.num_samples / total) * update.delta[key]
        mean[key] = acc.astype(ordered[0].delta[key].dtype)
    return mean


def fedavg(global_weights: Weights, updates: Sequence[ClientUpdate]) -> Weights:
    mean = weighted_mean_delta(updates)
    first = min(updates, key=lambda u: u.client_id)
    new: Weights = {}
    for key, value in global_weights.items():
        if key in mean:
            new[key] = value + mean[key]
        else:  # integer buffers (BatchNorm's num_batches_tracked) are not averaged: take the first client's
            new[key] = first.buffers.get(key, value)
    return new
