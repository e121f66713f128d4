"""pFedMe's server step (T. Dinh, Tran & Nguyen, NeurIPS 2020, Algorithm 1): w <- (1 - beta) w_t + beta * mean_i w_i.

The mean is sample-weighted, as the official code's `persionalized_aggregate_parameters` takes it (the paper writes
the plain mean over the sampled clients). Written as w_t + beta * sum_i (n_i / n) (w_i - w_t), the same number:
beta = 1 is FedAvg. BatchNorm running statistics are averaged (FedAvg's), never extrapolated by beta.
"""

from __future__ import annotations

from collections.abc import Sequence

from raytune_fl.aggregators.fedavg import scaled_fedavg
from raytune_fl.types import ClientUpdate, Weights


def pfedme(global_weights: Weights, updates: Sequence[ClientUpdate], beta: float) -> Weights:
    """(1 - beta) w_t + beta * the sample-weighted mean of the client models."""
    return scaled_fedavg(global_weights, updates, [beta] * len(updates))
