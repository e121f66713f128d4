"""Privacy accounting: the epsilon that repeated Poisson-sampled Gaussian steps spend at a given delta.

The `rdp` accountant is written here from the Renyi-DP analysis of the sampled Gaussian mechanism (Mironov, Talwar &
Zhang 2019, "Renyi Differential Privacy of the Sampled Gaussian Mechanism", Sec. 3.3): for sampling rate q, noise
multiplier sigma and an order alpha, one step's RDP is log(A_alpha) / (alpha - 1), where A_alpha is the alpha-th
moment of the privacy-loss ratio of the mixture (1 - q) N(0, sigma^2) + q N(1, sigma^2) against N(0, sigma^2). For an
integer alpha A_alpha is a finite binomial sum; for a fractional one, two tail series that the paper derives (split at
z0 = sigma^2 log(1/q - 1) + 1/2). Steps compose by adding RDP; the conversion to (epsilon, delta) is Proposition 12 of
Canonne, Kamath & Steinke 2020 (the one Opacus and dp-accounting use), minimised over the orders.
`tests/privacy/test_accountant.py` checks the figures against both libraries.

The `prv` accountant (Gopi, Lee & Wutschitz 2021, numerically tighter) is Opacus's; it needs `opacus` installed.

Plain Python, numpy and scipy: no torch.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy import special

from raytune_fl.errors import RaytuneFLError

# fractional orders near 1 matter for large epsilons, large orders for small ones (dp-accounting's default set)
ORDERS: tuple[float, ...] = (
    *(1 + x / 10 for x in range(1, 100)),
    *range(11, 64),
    128,
    256,
    512,
    1024,
)
ACCOUNTANTS = ("rdp", "prv")
_MAX_TERMS = 100_000  # a fractional order's series that has not converged by then is left out
MAX_NOISE = 1.0e4  # a target epsilon that needs more noise than this is refused as unreachable


class AccountantUnavailable(RuntimeError, RaytuneFLError):
    """The `prv` accountant asked for without Opacus installed."""


@dataclass(frozen=True)
class GaussianSteps:
    """`steps` repetitions of the Gaussian mechanism (noise `noise_multiplier` x sensitivity) on a Poisson sample of
    rate `sample_rate`: one client's local DP-SGD steps, or the rounds of central DP-FedAvg."""

    noise_multiplier: float
    sample_rate: float
    steps: int


def _log_moment_integer(q: float, sigma: float, alpha: int) -> float:
    """log A_alpha for an integer order: sum_k C(alpha, k) q^k (1-q)^(alpha-k) exp((k^2 - k) / (2 sigma^2))."""
    k = np.arange(alpha + 1, dtype=np.float64)
    log_binomial = special.gammaln(alpha + 1) - special.gammaln(k + 1) - special.gammaln(alpha - k + 1)
    terms = log_binomial + k * math.log(q) + (alpha - k) * math.log1p(-q) + (k * k - k) / (2 * sigma * sigma)
    return float(special.logsumexp(terms))


def _log_moment_fractional(q: float, sigma: float, alpha: float) -> float:
    """log A_alpha for a fractional order: the two series over the binomial coefficients of alpha (which alternate in
    sign beyond alpha), each term weighted by a Gaussian tail beyond z0, summed up to the first term at which both
    series' terms are below e^-30 (where the libraries stop too), in blocks of terms at a time."""
    z0 = sigma * sigma * math.log(1 / q - 1) + 0.5
    count = 256
    while count <= _MAX_TERMS:
        i = np.arange(count, dtype=np.float64)
        j = alpha - i
        coefficient = special.binom(alpha, i)
        with np.errstate(divide="ignore"):  # a coefficient that underflows to 0 is a term of 0
            log_c = np.log(np.abs(coefficient))
        below = log_c + i * math.log(q) + j * math.log1p(-q) + (i * i - i) / (2 * sigma * sigma)
        below += special.log_ndtr((z0 - i) / sigma)  # the tail of (-inf, z0]
        above = log_c + j * math.log(q) + i * math.log1p(-q) + (j * j - j) / (2 * sigma * sigma)
        above += special.log_ndtr((j - z0) / sigma)  # ... and of [z0, inf)
        vanished = np.flatnonzero(np.maximum(below, above) < -30)
        if vanished.size:
            end, signs = vanished[0] + 1, np.sign(coefficient[: vanished[0] + 1])
            log_below = special.logsumexp(below[:end], b=signs)
            log_above = special.logsumexp(above[:end], b=signs)
            return float(np.logaddexp(log_below, log_above))
        count *= 4
    return math.inf  # not converged: this order says nothing (the others bound epsilon)


@lru_cache(maxsize=4096)
def step_rdp(noise_multiplier: float, sample_rate: float, order: float) -> float:
    """One step's Renyi DP at `order` (infinite without noise)."""
    if sample_rate == 0:
        return 0.0
    if noise_multiplier == 0:
        return math.inf
    if sample_rate == 1.0:
        return order / (2 * noise_multiplier**2)
    if float(order).is_integer():
        log_moment = _log_moment_integer(sample_rate, noise_multiplier, int(order))
    else:
        log_moment = _log_moment_fractional(sample_rate, noise_multiplier, order)
    return log_moment / (order - 1)


def rdp_epsilon(events: Sequence[GaussianSteps], delta: float, orders: Sequence[float] = ORDERS) -> float:
    """Epsilon at `delta` after every event, by RDP composition and the best order."""
    if not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1), got {delta}")
    rdp = np.array(
        [
            sum(e.steps * step_rdp(e.noise_multiplier, e.sample_rate, float(a)) for e in events if e.steps)
            for a in orders
        ]
    )
    best = math.inf
    for order, value in zip(orders, rdp):
        if value == math.inf:
            continue
        if delta**2 + math.expm1(-value) > 0:  # delta alone covers it: epsilon 0
            return 0.0
        if order > 1.01:
            best = min(best, value + math.log1p(-1 / order) - math.log(delta * order) / (order - 1))
    return float(max(best, 0.0))


def prv_epsilon(events: Sequence[GaussianSteps], delta: float) -> float:
    """Epsilon at `delta` by Opacus's PRV accountant (its default error bounds)."""
    try:
        from opacus.accountants import PRVAccountant
    except ImportError:
        raise AccountantUnavailable(
            "privacy.accountant: prv is Opacus's accountant; install it (pip install 'raytune-fl[privacy]') or use rdp"
        ) from None
    steps = [e for e in events if e.steps and e.sample_rate > 0]
    if not steps:
        return 0.0
    if any(e.noise_multiplier == 0 for e in steps):
        return math.inf
    accountant = PRVAccountant()
    accountant.history = [(e.noise_multiplier, e.sample_rate, e.steps) for e in steps]
    return float(accountant.get_epsilon(delta))


def epsilon(events: Sequence[GaussianSteps], delta: float, accountant: str = "rdp") -> float:
    """Epsilon at `delta` spent by `events`, by the named accountant (one of ACCOUNTANTS)."""
    if accountant == "rdp":
        return rdp_epsilon(events, delta)
    if accountant == "prv":
        return prv_epsilon(events, delta)
    raise ValueError(f"accountant must be one of {', '.join(ACCOUNTANTS)}, got {accountant!r}")


class UnreachableEpsilon(ValueError, RaytuneFLError):
    """No noise multiplier up to MAX_NOISE keeps the planned steps within the target epsilon."""


def noise_for_epsilon(
    target: float, sample_rate: float, steps: int, delta: float, accountant: str = "rdp", tolerance: float = 1e-3
) -> float:
    """The smallest noise multiplier (to `tolerance` relative) whose `steps` steps spend at most `target` epsilon:
    bisection, as epsilon falls as the noise grows."""
    if target <= 0:
        raise UnreachableEpsilon(f"a target epsilon must be positive, got {target}")

    def spent(sigma: float) -> float:
        return epsilon([GaussianSteps(sigma, sample_rate, steps)], delta, accountant)

    high = 1.0
    while spent(high) > target:
        high *= 2
        if high > MAX_NOISE:
            raise UnreachableEpsilon(
                f"target epsilon {target} at delta {delta} needs a noise multiplier above {MAX_NOISE:g} over {steps} "
                f"steps at sampling rate {sample_rate:g}"
            )
    low = 0.0
    while high - low > tolerance * high:
        middle = (low + high) / 2
        if spent(middle) > target:
            low = middle
        else:
            high = middle
    return high
