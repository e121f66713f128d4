"""SCAFFOLD's control-variate maths, option II (Karimireddy et al., ICML 2020). Numpy only.

Control variates are dicts of arrays keyed by trainable parameter name; a missing entry means zeros
(a client's first round, the server's first broadcast). The model weights themselves are aggregated
as FedAvg's sample-weighted mean (the paper averages the client deltas unweighted, with global step 1).

Client momentum: the paper's clients run plain SGD, where (w_t - w) / (K lr) is the mean corrected
gradient. With SGD momentum rho the same K steps move the weights by about a_K / K times more
(a_K: FedNova's effective step count, up to 1 / (1 - rho)), so dividing by K would inflate c_i by
that factor; the correction then feeds back through the momentum and the control variates diverge
(seen with rho = 0.9 and 10 local steps). We divide by a_K * lr instead, which is K * lr at rho = 0.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from raytune_fl.aggregators.fednova import effective_steps
from raytune_fl.types import Weights


def client_control_update(
    c_i: Mapping[str, np.ndarray],
    c: Mapping[str, np.ndarray],
    start: Mapping[str, np.ndarray],
    end: Mapping[str, np.ndarray],
    steps: int,
    lr: float,
    momentum: float = 0.0,
) -> Weights:
    """Option II: c_i+ = c_i - c + (w_t - w) / (a_K * lr), for every parameter in `start` (w_t).

    a_K = K without momentum; with momentum, FedNova's effective step count (see the module docstring).
    K = 0 (no local step) leaves c_i as it was: there is no gradient information to estimate from.
    """
    if steps <= 0:
        return {key: np.array(c_i[key], copy=True) for key in start}
    if lr <= 0:
        raise ValueError(f"SCAFFOLD needs a positive client lr (got {lr!r})")
    scale = 1.0 / (effective_steps(steps, momentum) * lr)
    new: Weights = {}
    for key, w_t in start.items():
        # float64 inside: (w_t - w) / (a_K lr) divides a small difference by a small number
        value = np.asarray(c_i[key], np.float64) - c[key] + (np.asarray(w_t, np.float64) - end[key]) * scale
        new[key] = np.asarray(value, w_t.dtype)  # an array even for a 0-d parameter
    return new


def server_control_update(
    c: Mapping[str, np.ndarray], deltas: Sequence[Mapping[str, np.ndarray]], num_clients: int
) -> Weights:
    """c <- c + (|S| / N) * mean_{i in S} (c_i+ - c_i): the unweighted mean, scaled by the share of clients seen."""
    if num_clients <= 0:
        raise ValueError(f"SCAFFOLD needs num_clients >= 1 (got {num_clients})")
    if len(deltas) > num_clients:
        raise ValueError(f"SCAFFOLD got {len(deltas)} control deltas from at most {num_clients} clients")
    new = {key: np.array(value, copy=True) for key, value in c.items()}
    if not deltas:
        return new
    share = len(deltas) / num_clients
    for key, first in deltas[0].items():
        mean = np.zeros_like(first, dtype=np.float64)
        for delta in deltas:
            mean += delta[key]
        mean /= len(deltas)
        previous = np.asarray(c[key], np.float64) if key in c else 0.0
        new[key] = np.asarray(previous + share * mean, first.dtype)
    return new
