"""Principal-gradient aggregation of FedLD (Zeng et al., MICCAI 2024). Pure numpy; specified in
docs/explanation/methods.md#principal-gradient.

Client "gradients" are the deltas g_i = w_i - w_t, the columns of G (d x m):

1. eigen-decompose G^T G / m (m x m, never the d x d matrix); directions v_z = G e_z;
2. orient each v_z so that <v_z, mean_i g_i> >= 0;
3. keep the top L = max(1, floor(fraction * m)) directions;
4. g_i^rev = sum_l (||g_i|| / ||g'_{i,l}||) * (lambda_l / sum_k lambda_k) * g'_{i,l}, g'_{i,l} the projection of g_i
   on v_l; the paper sums k over the L kept eigenvalues, the official code over all m;
5. g = sum_i p_i g_i^rev (paper p_i = n_i / n, official 1 / m); w_{t+1} = w_t + g.

Everything happens in the m-dimensional coefficient space: with S = G^T G, ||v_l||^2 = m lambda_l and the
projection of g_i on v_l is e_{l,i} v_l, so g = G a for an m-vector a. Only S (a sum over tensors) and the
final combination touch d-dimensional data, one tensor at a time: no d x m float64 copy of the model.

Granularity. Paper: the whole model is one vector, except BatchNorm running statistics, which are averaged as
in FedAvg: they are not gradients, and their scale would otherwise dominate the principal directions. Official
code: each float tensor separately (running statistics included), an unweighted mean in the first round and
for scalar tensors.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import numpy as np

from raytune_fl.aggregators.fedavg import is_running_statistic
from raytune_fl.types import ClientUpdate, Weights

Fidelity = Literal["paper", "official"]
FIDELITIES = ("paper", "official")

# |cos(g_i, v_l)| below this is rounding noise of an exactly orthogonal pair. The formula's ||g_i|| / ||g'_{i,l}||
# rescales any non-zero projection to the client's whole norm, so noise must not count as a projection.
_ORTHOGONAL_COS = 1e-9


def kept_directions(m: int, fraction: float) -> int:
    """L = floor(fraction * m), at least 1: the official floor gives L = 0 for m = 1, which freezes the model.

    The 1e-9 keeps products like 0.29 * 100 = 28.999999999999996 from losing a direction to rounding.
    """
    return max(1, math.floor(fraction * m + 1e-9))


def principal_coefficients(
    inner: np.ndarray, weights: np.ndarray, fraction: float, denominator: Literal["kept", "all"] = "kept"
) -> np.ndarray:
    """The m-vector a with g = G a (steps 1-5), from the inner products inner = G^T G and client weights p_i."""
    inner = np.asarray(inner, dtype=np.float64)
    m = inner.shape[0]
    lam, vecs = np.linalg.eigh(inner / m)  # step 1 (ascending order)
    order = np.argsort(-lam, kind="stable")
    lam, vecs = lam[order], vecs[:, order]
    # eigenvalues at rounding level (a rank-deficient G) are zeros: their directions are noise
    lam = np.where(lam > max(lam[0], 0.0) * m * np.finfo(np.float64).eps, lam, 0.0)
    # step 2: <v_z, mean_i g_i> = e_z^T S 1 / m (the result does not depend on the sign; kept for fidelity)
    vecs[:, vecs.T @ inner.sum(axis=1) / m < 0] *= -1.0
    kept = kept_directions(m, fraction)  # step 3
    total = lam[:kept].sum() if denominator == "kept" else lam.sum()
    norms = np.sqrt(np.clip(np.diag(inner), 0.0, None))
    a = np.zeros(m)
    if total <= 0.0:  # all-zero updates: the model stays where it is
        return a
    for z in range(kept):
        if lam[z] == 0.0:
            continue
        v_norm = math.sqrt(m * lam[z])  # ||v_z||^2 = e_z^T S e_z = m lambda_z
        e = vecs[:, z]  # g'_{i,z} = e_{z,i} v_z, so ||g'_{i,z}|| = |e_{z,i}| ||v_z||
        with np.errstate(divide="ignore", invalid="ignore"):
            cos = np.where(norms > 0.0, e * v_norm / norms, 0.0)
        use = np.abs(cos) > _ORTHOGONAL_COS  # skips zero updates and zero projections
        # step 4: client i adds ||g_i|| * share_z * sign(e_{z,i}) * v_z / ||v_z||; step 5 weights it by p_i
        along = np.sum(weights[use] * norms[use] * np.sign(e[use]))
        a += along * (lam[z] / total) / v_norm * e
    return a


def _stack(updates: Sequence[ClientUpdate], key: str) -> np.ndarray:
    """The clients' deltas of one tensor as rows (m x d_key), float64."""
    return np.stack([np.asarray(u.delta[key], dtype=np.float64).ravel() for u in updates])


def _inner(rows: np.ndarray) -> np.ndarray:
    return rows @ rows.T


def principal_gradient(
    global_weights: Weights,
    updates: Sequence[ClientUpdate],
    *,
    fraction: float = 0.8,
    fidelity: Fidelity = "paper",
    first_round: bool = False,
) -> Weights:
    """w_{t+1} = w_t + g. `first_round` only matters to the official per-tensor variant (a plain mean then)."""
    if not updates:
        raise ValueError("cannot aggregate zero client updates")
    if fidelity not in FIDELITIES:
        raise ValueError(f"fidelity: must be one of 'paper', 'official' (got {fidelity!r})")
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"fraction: must be a number in (0, 1] (got {fraction!r})")
    ordered = sorted(updates, key=lambda u: u.client_id)  # float sums then do not depend on arrival order
    m = len(ordered)
    keys = list(ordered[0].delta)
    steps: dict[str, np.ndarray] = {}
    if fidelity == "paper":
        total = sum(u.num_samples for u in ordered)
        if total <= 0:
            raise ValueError("client updates carry no samples")
        p = np.array([u.num_samples / total for u in ordered])
        grads = [k for k in keys if not is_running_statistic(k)]
        inner = sum((_inner(_stack(ordered, k)) for k in grads), np.zeros((m, m)))  # S = G^T G over all tensors
        a = principal_coefficients(inner, p, fraction, "kept")
        for key in keys:  # running statistics: FedAvg's weighted mean
            steps[key] = (a if key in grads else p) @ _stack(ordered, key)
    else:
        p = np.full(m, 1.0 / m)
        for key in keys:
            rows = _stack(ordered, key)
            plain = first_round or rows.shape[1] <= 1
            steps[key] = (p if plain else principal_coefficients(_inner(rows), p, fraction, "all")) @ rows
    first = ordered[0]
    new: Weights = {}
    for key, value in global_weights.items():
        if key in steps:
            new[key] = (value.astype(np.float64) + steps[key].reshape(value.shape)).astype(value.dtype)
        else:  # integer buffers (num_batches_tracked): the lowest client id's, as in FedAvg
            new[key] = first.buffers.get(key, value)
    return new
