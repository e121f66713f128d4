"""FedGH: gradient harmonization of conflicting client deltas (Zhang, Sun, Chen 2023, arXiv 2309.06692). Numpy only.

This is the FedGH that FedLD's paper compares against (not the "generalized global header" FedGH of Yi et al.).
With Delta_k = w_k - w_t, all trainable floating-point entries of client k flattened into one vector:

1. for every pair of participating clients (i, j), i < j in client-id order, whose ORIGINAL deltas conflict
   (<Delta_i, Delta_j> < 0), remove from each the component along the other's original delta:
       Delta_i' <- Delta_i' - <Delta_i', Delta_j> / ||Delta_j||^2 * Delta_j
       Delta_j' <- Delta_j' - <Delta_j', Delta_i> / ||Delta_i||^2 * Delta_i
   where Delta' starts as Delta and carries the projections of earlier pairs, so the pair order matters
   with three or more clients;
2. w_{t+1} = w_t + sum_k p_k Delta_k', p_k = n_k / sum n (sample weights).

Choices where the paper leaves room: whether a pair conflicts is decided on the original deltas; the
direction projected out is always the other client's original delta; a zero delta conflicts with nothing.
If no pair conflicts (identical deltas, for instance) the result is FedAvg's, bit for bit; two exactly opposite deltas
of equal norm and weight give a zero update.

Every Delta_k' is a linear combination of the original deltas, Delta_k' = sum_l C[k, l] Delta_l, and every
inner product needed is one of the Gram matrix S = G^T G (G's columns the original deltas). So the
projections run on m x m coefficients, and only S (a sum over tensors) and the final combination touch the
model's tensors: no flattened float64 copy of the model.

BatchNorm running statistics are not gradients: they get FedAvg's sample-weighted mean and are never
projected (nor counted in the inner products). Integer buffers (num_batches_tracked) are copied from the
lowest client id, never averaged, as in FedAvg.

`fedgh_official` is the FedGH of FedLD's code (its "pcgrad_hierarchy"), a named fidelity option. Per float
state-dict tensor separately (BatchNorm running statistics included, as in that code), unweighted:

- while the server has no history for the tensor (the first round): the plain mean delta; the history
  becomes that mean;
- after that: the deltas are ranked by their projection <Delta_k, h> / ||h|| on the history h, the highest
  is paired with the lowest, the second highest with the second lowest, ... (with an odd count the middle one
  passes alone). A pair whose inner product is negative has each member projected off the other (both with
  the values before the pair, an eps = 1e-7 added to the squared norms); each pair is replaced by its sum.
  This repeats, re-ranking the sums, until two remain; those two are projected as a pair too, but the
  second is projected off the first's already projected value (the code's order), then summed and divided
  by the number of clients M (all clients, the code's `num_users`; = |S_t| with full participation).
  The history becomes the EMA 0.99 h + 0.01 step.

Choices where the code is silent or fails: ties in the ranking keep client-id order (a stable sort); a zero
history ranks every delta 0 (the code divides 0 by 0); one participating client gives its delta / M (the
code stops with an assertion). Sums run in float64, the code's in float32.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from raytune_fl.aggregators.fedavg import fedavg, is_running_statistic
from raytune_fl.types import ClientUpdate, Weights


def _rows(updates: Sequence[ClientUpdate], key: str) -> np.ndarray:
    """The clients' deltas of one tensor as rows (m x d_key), float64."""
    return np.stack([np.asarray(u.delta[key], dtype=np.float64).ravel() for u in updates])


def harmonized_coefficients(inner: np.ndarray) -> np.ndarray:
    """C (m x m) with Delta_k' = sum_l C[k, l] Delta_l, from the Gram matrix inner = G^T G of the original deltas.

    Rows and columns are in client-id order; pairs (i, j), i < j, are visited in that order.
    """
    inner = np.asarray(inner, dtype=np.float64)
    m = inner.shape[0]
    coeffs = np.eye(m)
    norms2 = np.diag(inner)
    for i in range(m):
        for j in range(i + 1, m):
            if not inner[i, j] < 0.0 or norms2[i] <= 0.0 or norms2[j] <= 0.0:
                continue
            # <Delta_i', Delta_j> = C[i] @ S[:, j]; both projections use the values from before this pair
            along_j = coeffs[i] @ inner[:, j] / norms2[j]
            along_i = coeffs[j] @ inner[:, i] / norms2[i]
            coeffs[i, j] -= along_j
            coeffs[j, i] -= along_i
    return coeffs


def fedgh(global_weights: Weights, updates: Sequence[ClientUpdate]) -> Weights:
    """w_t + sum_k p_k Delta_k' (the harmonized deltas); BatchNorm statistics averaged, integer buffers copied."""
    if not updates:
        raise ValueError("cannot aggregate zero client updates")
    ordered = sorted(updates, key=lambda u: u.client_id)  # pair order and float sums follow client ids
    total = sum(u.num_samples for u in ordered)
    if total <= 0:
        raise ValueError("client updates carry no samples")
    m = len(ordered)
    p = np.array([u.num_samples / total for u in ordered])
    keys = list(ordered[0].delta)
    trainable = [k for k in keys if not is_running_statistic(k)]
    inner = np.zeros((m, m))
    for key in trainable:  # S = G^T G over the whole flattened trainable delta
        rows = _rows(ordered, key)
        inner += rows @ rows.T
    coeffs = harmonized_coefficients(inner)
    if np.array_equal(coeffs, np.eye(m)):  # no pair conflicts: FedAvg's arithmetic, bit for bit
        return fedavg(global_weights, ordered)
    a = p @ coeffs  # sum_k p_k Delta_k' = sum_l a_l Delta_l
    first = ordered[0]
    new: Weights = {}
    for key, value in global_weights.items():
        if key not in ordered[0].delta:  # integer buffers (num_batches_tracked): the lowest client id's
            new[key] = first.buffers.get(key, value)
            continue
        step = (a if key in trainable else p) @ _rows(ordered, key)  # running statistics: FedAvg's mean
        new[key] = (np.asarray(value, np.float64) + step.reshape(np.shape(value))).astype(value.dtype)
    return new


OFFICIAL_EMA = 0.99  # the code's gamma: h <- gamma h + (1 - gamma) step
OFFICIAL_EPS = 1e-7  # added to the squared norms in every projection


def _project_pair(g0: np.ndarray, g1: np.ndarray, sequential: bool = False) -> np.ndarray:
    """g0' + g1' for one pair: each projected off the other when they conflict (the code's pair step).

    `sequential`: the final pair, where g1 is projected off the already projected g0 (the code's order).
    """
    inner = float(g0 @ g1)
    if inner < 0.0:
        g0_new = g0 - inner / (float(g1 @ g1) + OFFICIAL_EPS) * g1
        other = g0_new if sequential else g0
        g1 = g1 - inner / (float(other @ other) + OFFICIAL_EPS) * other
        g0 = g0_new
    return g0 + g1


def hierarchical_projection(rows: np.ndarray, history: np.ndarray, num_clients: int) -> np.ndarray:
    """One tensor's official step from the clients' deltas (rows, client-id order) and the EMA history."""
    rows = np.asarray(rows, np.float64)
    if len(rows) == 1:  # the code asserts here; a lone client's delta, divided like the rest
        return rows[0] / num_clients
    h = np.asarray(history, np.float64).ravel()
    h_norm = float(np.sqrt(h @ h))
    while len(rows) > 2:
        num = len(rows)
        project = rows @ h / h_norm if h_norm > 0.0 else np.zeros(num)
        ind = np.argsort(-project, kind="stable")  # descending; ties keep client-id order
        merged = [_project_pair(rows[ind[i]], rows[ind[num - 1 - i]]) for i in range(num // 2)]
        if num % 2:
            merged.append(rows[ind[num // 2]])
        rows = np.stack(merged)
    return _project_pair(rows[0], rows[1], sequential=True) / num_clients


def fedgh_official(
    global_weights: Weights, updates: Sequence[ClientUpdate], history: Mapping[str, np.ndarray], num_clients: int
) -> tuple[Weights, Weights]:
    """FedLD's code's FedGH: (w_{t+1}, the new history). `history` (empty: the first round) is not modified."""
    if not updates:
        raise ValueError("cannot aggregate zero client updates")
    if len(updates) > num_clients:
        raise ValueError(f"FedGH got {len(updates)} updates from at most {num_clients} clients")
    ordered = sorted(updates, key=lambda u: u.client_id)
    first = ordered[0]
    new: Weights = {}
    new_history: Weights = {key: np.array(value, np.float64, copy=True) for key, value in history.items()}
    for key, value in global_weights.items():
        if key not in first.delta:  # integer buffers (num_batches_tracked): the lowest client id's
            new[key] = first.buffers.get(key, value)
            continue
        rows = _rows(ordered, key)
        if key not in history:  # the first round: the plain mean, which starts the history
            step = rows.mean(axis=0)
            new_history[key] = step.reshape(np.shape(value))
        else:
            step = hierarchical_projection(rows, history[key], num_clients)
            new_history[key] = OFFICIAL_EMA * new_history[key] + (1.0 - OFFICIAL_EMA) * step.reshape(np.shape(value))
        new[key] = (np.asarray(value, np.float64) + step.reshape(np.shape(value))).astype(value.dtype)
    return new, new_history
