"""Client-level DP-FedAvg (McMahan, Ramage, Talwar & Zhang, ICLR 2018): each client's update clipped to an L2 bound,
Gaussian noise on the sum, the sum divided by the expected cohort size.

    delta_i <- delta_i * min(1, C / ||delta_i||)          (||.||: L2 over every float entry the client sends)
    mean    <- (sum_i delta_i + N(0, (sigma C)^2 I)) / (q N)

q N is the expected number of clients a Poisson sample of rate q draws from N (the fixed-denominator estimator):
unbiased for the mean of the clipped updates, and the denominator does not depend on who was drawn, which dividing by
the drawn count would reveal. Uniform weights, not FedAvg's n_i / n: a client's sample count would otherwise scale
its contribution beyond the clip. Pure numpy; the caller hands over the seeded random stream.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from raytune_fl.types import Weights


@dataclass(frozen=True)
class ClipStats:
    """What the clip did this round: the updates' norms before it, and how many it scaled down."""

    norms: tuple[float, ...]
    clipped: int


def l2_norm(delta: Mapping[str, np.ndarray]) -> float:
    """The L2 norm of every entry of `delta` flattened into one vector (float64 sums)."""
    return math.sqrt(sum(float(np.sum(np.square(value, dtype=np.float64))) for value in delta.values()))


def clip(delta: Mapping[str, np.ndarray], clip_norm: float) -> tuple[dict[str, np.ndarray], float]:
    """`delta` scaled by min(1, clip_norm / ||delta||), in float64, and its norm before the clip."""
    norm = l2_norm(delta)
    scale = min(1.0, clip_norm / norm) if norm > 0 else 1.0
    return {key: np.asarray(value, dtype=np.float64) * scale for key, value in delta.items()}, norm


def private_mean(
    template: Mapping[str, np.ndarray],
    deltas: Sequence[Mapping[str, np.ndarray]],
    clip_norm: float,
    noise_multiplier: float,
    expected_clients: float,
    rng: np.random.Generator,
) -> tuple[Weights, ClipStats]:
    """(sum of the clipped `deltas` + Gaussian noise of std noise_multiplier * clip_norm per entry) / expected_clients,
    over the keys of `template` (one delta's keys and shapes: also the shape of a round that drew nobody), in the
    template's dtypes. The noise is drawn key by key in sorted order, so a seed gives the same noise."""
    if expected_clients <= 0:
        raise ValueError(f"the expected cohort size must be positive, got {expected_clients}")
    total = {key: np.zeros(np.shape(value), dtype=np.float64) for key, value in template.items()}
    norms = []
    for delta in deltas:
        clipped, norm = clip(delta, clip_norm)
        norms.append(norm)
        for key in total:
            total[key] += clipped[key]
    std = noise_multiplier * clip_norm
    for key in sorted(total):
        if std > 0:
            total[key] += rng.normal(0.0, std, size=total[key].shape)
    mean = {key: (value / expected_clients).astype(np.asarray(template[key]).dtype) for key, value in total.items()}
    return mean, ClipStats(tuple(norms), sum(norm > clip_norm for norm in norms))
