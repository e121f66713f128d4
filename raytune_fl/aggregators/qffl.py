"""q-FFL / q-FedAvg, fair resource allocation (Li, Sanjabi, Beirami & Smith, ICLR 2020). Numpy only.

Client k reports F_k, the global model's mean loss on its training data. With L = 1/lr (the paper's
Lipschitz estimate) and delta_k = w_k - w_t over every float entry (flattened for the norm):

    dw_k    = L * (w_t - w_k) = -L * delta_k
    g_k     = dw_k / a_k                                   (lipschitz: per_step, the default)
            = dw_k                                         (lipschitz: paper)
    Delta_k = F_k^q * dw_k
    h_k     = q * F_k^(q-1) * ||g_k||^2 + L * F_k^q
    w       = w_t - sum_k p_k Delta_k / sum_k p_k h_k,        p_k = n_k / n

h_k bounds the Lipschitz constant of grad F_k^(q+1)/(q+1), L F^q + q F^(q-1) ||grad F_k||^2, with g_k standing
in for grad F_k. The paper writes g_k = dw_k, which is grad F_k only after one plain SGD step at rate 1/L
(q-FedSGD). After a_k momentum-effective local steps (raytune_fl.aggregators.fednova.effective_steps: tau
steps at momentum rho count ~tau / (1 - rho)) dw_k is ~a_k times the mean gradient, so ||dw_k||^2 counts it
a_k^2 times over and the slope term swamps L F^q: on mnist5k with SGD at momentum 0.9 (a_k up to ~87) the
server step is ~1% of FedAvg's and the model does not train (docs/explanation/fidelity.md, "q-FFL"). per_step
uses the mean gradient dw_k / a_k; at one plain step (a_k = 1) both forms are the paper's.

Li et al. sample clients with probability p_k and then sum uniformly; we weight the participating
clients by p_k instead, so that q = 0 (Delta_k = dw_k, h_k = L) is FedAvg exactly, not only in
expectation. Larger q puts more weight on clients where the global model does badly.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from raytune_fl.aggregators.fedavg import is_running_statistic, scaled_fedavg
from raytune_fl.aggregators.fednova import effective_steps
from raytune_fl.types import ClientUpdate, Weights

LIPSCHITZ_FORMS = ("per_step", "paper")  # h_k's gradient estimate: dw_k / a_k, or dw_k as Algorithm 2 writes it


def squared_norm(delta: Weights) -> float:
    """Over the model's parameters: BatchNorm running statistics are not part of the update direction."""
    return float(
        sum(np.sum(np.square(value, dtype=np.float64)) for key, value in delta.items() if not is_running_statistic(key))
    )


def qffl(
    global_weights: Weights,
    updates: Sequence[ClientUpdate],
    losses: Sequence[float],
    q: float,
    lr: float,
    momentum: float = 0.0,
    lipschitz: str = "per_step",
) -> Weights:
    """q-FedAvg's update; `losses[k]` is F_k for `updates[k]`, `lr` and `momentum` the clients' SGD settings
    (L = 1/lr; a_k from `updates[k].num_steps` and `momentum`), `lipschitz` one of LIPSCHITZ_FORMS.

    Guards: a client with F_k = 0 and q < 1 (where F^(q-1) is infinite) has nothing to be fair about
    and contributes nothing; a client that took no step has no gradient estimate (no slope term);
    if every h_k is 0 the weights stay w_t.
    """
    if not updates:
        raise ValueError("cannot aggregate zero client updates")
    if len(losses) != len(updates):
        raise ValueError(f"q-FFL got {len(losses)} losses for {len(updates)} updates")
    if not (q >= 0 and math.isfinite(q)):
        raise ValueError(f"q: must be a finite number >= 0 (got {q!r})")
    if not lr > 0:
        raise ValueError(f"q-FFL needs a positive client lr (got {lr!r})")
    if lipschitz not in LIPSCHITZ_FORMS:
        raise ValueError(f"lipschitz: must be one of {', '.join(map(repr, LIPSCHITZ_FORMS))} (got {lipschitz!r})")
    lipschitz_constant = 1.0 / lr
    # Dividing Delta_k and h_k by L keeps q = 0 free of rounding: Delta_k / L = -F_k^q delta_k, h_k / L = 1.
    numerators, denominators = [], []  # F_k^q and h_k / L
    for update, loss in zip(updates, losses):
        loss = float(loss)
        if not (loss >= 0 and math.isfinite(loss)):
            raise ValueError(f"q-FFL: client {update.client_id} reported a loss of {loss!r}")
        if q == 0.0:  # F^0 = 1 and no slope term, even at F = 0
            power, slope = 1.0, 0.0
        elif loss == 0.0 and q < 1.0:  # the singular slope term: drop the client
            power, slope = 0.0, 0.0
        else:
            power, slope = loss**q, q * loss ** (q - 1.0)
        gradient = 0.0  # ||g_k||^2 / L = L * ||delta_k||^2 / a_k^2
        steps = 1.0 if lipschitz == "paper" else effective_steps(update.num_steps, momentum)
        if slope and steps > 0:  # a client that took no step saw no gradient
            gradient = lipschitz_constant * squared_norm(update.delta) / steps**2
        denominators.append(slope * gradient + power)
        numerators.append(power)
    n = [u.num_samples for u in updates]
    total = sum(n)
    if total <= 0:
        raise ValueError("client updates carry no samples")
    weighted_h = sum(n_k * h_k for n_k, h_k in zip(n, denominators))  # n * sum_k p_k h_k / L
    if weighted_h <= 0:  # no client carries any signal: keep w_t
        return scaled_fedavg(global_weights, updates, [0.0] * len(updates))
    # w = w_t + sum_k p_k s_k delta_k with s_k = F_k^q / (sum_j p_j h_j / L): s_k = 1.0 exactly when q = 0
    return scaled_fedavg(global_weights, updates, [total * f_q / weighted_h for f_q in numerators])
