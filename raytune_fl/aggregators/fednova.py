"""FedNova, normalised averaging (Wang et al., NeurIPS 2020). Numpy only.

Client i took tau_i local SGD steps with momentum rho; its effective step count is

    a_i = sum_{k=1..tau_i} (1 - rho^k) / (1 - rho)        (rho = 0: a_i = tau_i)

and, with p_i = n_i / n over the participating clients,

    w <- w_t + (sum_i p_i a_i) * sum_i p_i delta_i / a_i.

So a client that ran more steps no longer pulls the average towards its own optimum. When every
a_i is equal this is FedAvg, and `scaled_fedavg` makes that bit-exact. Weight decay is ignored in
a_i, as in the paper's main setting.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from raytune_fl.aggregators.fedavg import scaled_fedavg
from raytune_fl.types import ClientUpdate, Weights


def effective_steps(steps: int, momentum: float) -> float:
    """a_i: the sum of the momentum buffer's geometric weights over `steps` steps."""
    if not 0.0 <= momentum < 1.0:
        raise ValueError(f"client momentum must be in [0, 1) for the effective step count (got {momentum!r})")
    k = np.arange(1, steps + 1, dtype=np.float64)
    return float(np.sum((1.0 - momentum**k) / (1.0 - momentum)))


def fednova(global_weights: Weights, updates: Sequence[ClientUpdate], momentum: float = 0.0) -> Weights:
    """FedNova's update; `momentum` is the clients' SGD momentum rho. A client with no steps contributes nothing."""
    if not updates:
        raise ValueError("cannot aggregate zero client updates")
    a = [effective_steps(u.num_steps, momentum) for u in updates]
    n = [u.num_samples for u in updates]
    total = sum(n)
    if total <= 0:
        raise ValueError("client updates carry no samples")
    # s_i = (sum_j p_j a_j) / a_i, written as sum_j n_j (a_j / a_i) / n so that equal a's give exactly 1.0
    scales = [sum(n_j * (a_j / a_i) for n_j, a_j in zip(n, a)) / total if a_i > 0 else 0.0 for a_i in a]
    return scaled_fedavg(global_weights, updates, scales)
