"""FedAdagrad, FedAdam and FedYogi: adaptive server optimisers (Reddi et al., ICLR 2021, Alg. 2). Numpy only.

Per coordinate of every trainable floating-point parameter, with Delta_t the clients' mean delta
(w_k - w_t), which is minus the pseudo-gradient:

    m_t = beta1 m_{t-1} + (1 - beta1) Delta_t                               (m_{-1} = 0)
    v_t = v_{t-1} + Delta_t^2                                               adagrad
    v_t = beta2 v_{t-1} + (1 - beta2) Delta_t^2                             adam
    v_t = v_{t-1} - (1 - beta2) Delta_t^2 sign(v_{t-1} - Delta_t^2)         yogi (sign(0) = 0)
    w_{t+1} = w_t + server_lr m_t / (sqrt(v_t) + tau)

- Delta_t is the unweighted mean over the clients that took part (the paper); `weighting="samples"`
  weights client k by its sample count n_k instead (Flower, FL-bench).
- v_{-1} = 0, as in the official experiments (the paper's analysis asks for v_{-1} >= tau^2). With v = 0
  and a tiny tau, the first step moves every coordinate by about server_lr, whatever |Delta| is.
- No bias correction in the paper (`bias_correction="none"`). "keras" reproduces the official runs
  (Keras Adam and their Yogi): the step is server_lr sqrt(1 - beta2^t) / (1 - beta1^t), with t counting
  server steps from 1, and tau is still added to the uncorrected sqrt(v_t); Adagrad is never corrected.
  "flower" (Adam only) reproduces Flower's FedAdam, which uses the exponent t + 1: one round off, so its
  first step is scaled by 0.742 at 0.9 / 0.99. torch.optim.Adam matches none of these (it corrects v
  before adding eps).
- FedAvg is a limit, not a setting: beta1 = 0, tau >> |Delta| and server_lr = s tau give FedAvg with
  server step s, with relative error at most sqrt(v_t) / tau (for Adam, sqrt(1 - beta2) |Delta| / tau).
- BatchNorm running statistics are not gradients: they get FedAvg's sample-weighted mean, never the
  adaptive step (a sign-like step of size server_lr can push a running variance below zero, NaN at
  evaluation), and have no m or v. Integer buffers (num_batches_tracked) are copied from the lowest
  client id, never averaged, as in FedAvg.

m and v are server state keyed like the trainable float parameters; an empty dict means zeros. They
are kept in each parameter's dtype; every step is computed in float64.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from raytune_fl.aggregators.fedavg import is_running_statistic, weighted_mean_delta
from raytune_fl.types import ClientUpdate, Weights

Rule = Literal["adagrad", "adam", "yogi"]
Weighting = Literal["uniform", "samples"]
BiasCorrection = Literal["none", "keras", "flower"]

WEIGHTINGS: tuple[Weighting, ...] = ("uniform", "samples")
# which bias corrections each rule has: Adagrad is never corrected, Flower corrects only FedAdam
BIAS_CORRECTIONS: dict[str, tuple[BiasCorrection, ...]] = {
    "adagrad": ("none",),
    "adam": ("none", "keras", "flower"),
    "yogi": ("none", "keras"),
}


def mean_delta(updates: Sequence[ClientUpdate], weighting: Weighting = "uniform") -> Weights:
    """Delta_t for every float entry: the unweighted mean over clients (paper) or the n_k-weighted one ("samples").

    BatchNorm running statistics always get FedAvg's sample-weighted mean. Sums run in client-id order.
    """
    if weighting not in WEIGHTINGS:
        raise ValueError(f"weighting must be one of {', '.join(map(repr, WEIGHTINGS))} (got {weighting!r})")
    weighted = weighted_mean_delta(updates)  # also refuses zero updates and zero samples
    if weighting == "samples":
        return weighted
    ordered = sorted(updates, key=lambda u: u.client_id)
    mean: Weights = {}
    for key, value in weighted.items():
        if is_running_statistic(key):
            mean[key] = value
            continue
        acc = np.zeros_like(value, dtype=np.float64)
        for update in ordered:
            acc += update.delta[key]
        mean[key] = np.asarray(acc / len(ordered), value.dtype)
    return mean


def second_moment(rule: Rule, previous: np.ndarray | None, delta: np.ndarray, beta2: float) -> np.ndarray:
    """v_t from v_{t-1} (None: zeros) and Delta_t, in float64, by the rule's update."""
    d2 = np.square(np.asarray(delta, np.float64))
    v = np.zeros_like(d2) if previous is None else np.asarray(previous, np.float64)
    if rule == "adagrad":
        return v + d2
    if rule == "adam":
        return beta2 * v + (1.0 - beta2) * d2
    if rule == "yogi":
        return v - (1.0 - beta2) * d2 * np.sign(v - d2)
    raise ValueError(f"rule must be 'adagrad', 'adam' or 'yogi' (got {rule!r})")


def step_size(server_lr: float, beta1: float, beta2: float, t: int, bias_correction: BiasCorrection = "none") -> float:
    """The server step at server step t (counted from 1): server_lr, times the bias correction if any."""
    if t < 1:
        raise ValueError(f"server steps are counted from 1 (got t={t})")
    if bias_correction == "none":
        return float(server_lr)
    if bias_correction == "keras":
        power = t
    elif bias_correction == "flower":
        power = t + 1  # Flower's FedAdam: round r (from 1) uses the exponent r + 1
    else:
        raise ValueError(f"bias_correction must be 'none', 'keras' or 'flower' (got {bias_correction!r})")
    return float(server_lr * np.sqrt(1.0 - beta2**power) / (1.0 - beta1**power))


@dataclass(frozen=True)
class ServerRule:
    """An adaptive server step's settings: the update rule, the server learning rate, the moments' decays, the
    adaptivity tau, how the clients' deltas are weighted and the bias correction."""

    rule: Rule
    server_lr: float
    beta1: float
    beta2: float
    tau: float
    weighting: Weighting = "uniform"
    bias_correction: BiasCorrection = "none"


def fedopt(
    global_weights: Weights,
    updates: Sequence[ClientUpdate],
    m: Mapping[str, np.ndarray],
    v: Mapping[str, np.ndarray],
    t: int,
    server: ServerRule,
) -> tuple[Weights, Weights, Weights]:
    """One adaptive server step by `server`'s rule: (new global weights, m_t, v_t). `t` is this step's number,
    from 1.

    `m` and `v` hold m_{t-1} and v_{t-1} (missing keys: zeros); they are not modified.
    """
    rule, beta1, beta2, tau, bias_correction = (
        server.rule,
        server.beta1,
        server.beta2,
        server.tau,
        server.bias_correction,
    )
    if rule not in BIAS_CORRECTIONS:
        raise ValueError(f"rule must be 'adagrad', 'adam' or 'yogi' (got {rule!r})")
    if bias_correction not in BIAS_CORRECTIONS[rule]:
        raise ValueError(
            f"bias_correction for {rule} must be one of {', '.join(map(repr, BIAS_CORRECTIONS[rule]))} "
            f"(got {bias_correction!r})"
        )
    if tau <= 0:
        raise ValueError(f"tau must be > 0 (got {tau!r})")
    delta = mean_delta(updates, server.weighting)
    eta = step_size(server.server_lr, beta1, beta2, t, bias_correction)
    first = min(updates, key=lambda u: u.client_id)
    new: Weights = {}
    new_m: Weights = {}
    new_v: Weights = {}
    for key, value in global_weights.items():
        if key not in delta:  # integer buffers: the lowest client id's, as FedAvg
            new[key] = first.buffers.get(key, value)
            continue
        if is_running_statistic(key):  # BatchNorm statistics: FedAvg's mean, no adaptive step
            new[key] = np.asarray(value + delta[key])
            continue
        d = np.asarray(delta[key], np.float64)
        previous = m.get(key)
        m_t = (1.0 - beta1) * d if previous is None else beta1 * np.asarray(previous, np.float64) + (1.0 - beta1) * d
        v_t = second_moment(rule, v.get(key), d, beta2)
        step = eta * m_t / (np.sqrt(v_t) + tau)
        new[key] = np.asarray(np.asarray(value, np.float64) + step, value.dtype)
        new_m[key] = np.asarray(m_t, value.dtype)
        new_v[key] = np.asarray(v_t, value.dtype)
    return new, new_m, new_v
