"""FedDyn's server step (Acar et al., ICLR 2021), in the stable form of the official code. Numpy only.

The paper's server keeps h and computes w_{t+1} = mean_k w_k - h / alpha. The stable form keeps the
clients' summed drift instead, D = sum over all clients of lambda_k (lambda_k: the sum of client k's
deltas over the rounds it took part in; D = -M h / alpha), so it never divides by alpha:

    D       <- D + sum_{k in S_t} Delta_k
    w_{t+1} =  w_t + (1/|S_t|) sum_{k in S_t} Delta_k + D / M

with Delta_k = w_k - w_t, M the number of all clients (not |S_t|: clients that sit a round out still
count through the drift they added before) and unweighted means, as in the paper. Both forms give the
same weights (checked against the paper form in tests/methods/test_feddyn.py).

- Only trainable floating-point entries get this step and have a D. BatchNorm running statistics
  (`is_running_statistic`) get FedAvg's sample-weighted mean and never D / M; integer buffers
  (num_batches_tracked) are copied from the lowest client id, never averaged or scaled, as in FedAvg.
- D / M is not damped: it is an extra step on top of the mean. With alpha -> 0 (no local pull) and full
  participation it is an undamped heavy-ball step, w_{t+1} = w_t + Delta_t + sum_{s<=t} Delta_s. The
  clients' alpha terms are what keep FedDyn stable, so no alpha makes it FedAvg's round.
- `server_correction=False` (a test switch, not FedDyn) leaves out D / M: the plain unweighted mean delta.
  D is still tracked.
- D is kept in float64 (a running sum over every round and client); each step is computed in float64 and
  the weights are cast back to their dtype. An empty D means zeros.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from raytune_fl.aggregators.fedavg import is_running_statistic, weighted_mean_delta
from raytune_fl.types import ClientUpdate, Weights


def feddyn(
    global_weights: Weights,
    updates: Sequence[ClientUpdate],
    drift: Mapping[str, np.ndarray],
    num_clients: int,
    *,
    server_correction: bool = True,
) -> tuple[Weights, Weights]:
    """One FedDyn server step: (w_{t+1}, the new D). `drift` holds D before this round; it is not modified."""
    if num_clients <= 0:
        raise ValueError(f"FedDyn needs num_clients >= 1 (got {num_clients})")
    if len(updates) > num_clients:
        raise ValueError(f"FedDyn got {len(updates)} updates from at most {num_clients} clients")
    weighted = weighted_mean_delta(updates)  # BatchNorm statistics' mean; also refuses zero updates and samples
    ordered = sorted(updates, key=lambda u: u.client_id)  # sums in client order, whatever the arrival order
    first = ordered[0]
    new: Weights = {}
    new_drift: Weights = {key: np.array(value, np.float64, copy=True) for key, value in drift.items()}
    for key, value in global_weights.items():
        if key not in weighted:  # integer buffers: the lowest client id's, as FedAvg
            new[key] = first.buffers.get(key, value)
            continue
        if is_running_statistic(key):  # BatchNorm statistics: FedAvg's mean, never D / M
            new[key] = np.asarray(value + weighted[key])
            continue
        total = np.zeros(np.shape(value), np.float64)
        for update in ordered:
            total += update.delta[key]
        d = new_drift.get(key, 0.0) + total
        new_drift[key] = np.asarray(d, np.float64)
        step = total / len(ordered)
        if server_correction:
            step = step + d / num_clients
        new[key] = np.asarray(np.asarray(value, np.float64) + step, value.dtype)
    return new, new_drift


def track_latest(
    total: Mapping[str, np.ndarray],
    latest: Mapping[int, Weights],
    initial: Weights,
    global_weights: Weights,
    updates: Sequence[ClientUpdate],
) -> tuple[Weights, dict[int, Weights]]:
    """The official code's `avg` bookkeeping: every client's latest model and their float64 sum over all M clients.

    `total` is the sum of the M latest models (a client that never took part counts as `initial`, the model
    before round 1), `latest` the models of clients that took part. Client k's new model is w_t + Delta_k (its
    float entries; BatchNorm statistics included, as the official code averages its whole parameter vector).
    Returns the new (total, latest); the inputs are not modified. The mean is total / M.
    """
    new_total = {key: np.array(value, np.float64, copy=True) for key, value in total.items()}
    new_latest = dict(latest)
    for update in sorted(updates, key=lambda u: u.client_id):
        old = latest.get(update.client_id, initial)
        model = {key: np.asarray(global_weights[key] + delta) for key, delta in update.delta.items()}
        for key, value in model.items():
            new_total[key] += np.asarray(value, np.float64) - old[key]
        new_latest[update.client_id] = model
    return new_total, new_latest
