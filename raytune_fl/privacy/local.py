"""Local DP-SGD's sampling plan: how a client of n training samples draws its batches, so that the engine's loop and
the accountant agree on the sampling rate and the steps.

Each step is a Poisson sample: every training sample joins the batch independently with probability
q = batch_size / n (at most 1), so a batch's size varies around batch_size and may be empty. A local epoch is
ceil(n / batch_size) such steps (one pass in expectation). The sum of the clipped per-sample gradients plus the noise
is divided by the expected batch size, q n = batch_size (the fixed-denominator estimator, unbiased for the mean of the
clipped gradients), never by the drawn size, which would leak it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class LocalPlan:
    """One client's DP-SGD round: its Poisson sampling rate, and the steps a round takes (before any system cap)."""

    sample_rate: float
    steps_per_round: int
    expected_batch: float  # q n: the denominator of each step's noisy mean


def local_plan(samples: int, batch_size: int, local_epochs: int) -> LocalPlan:
    if samples < 1:
        raise ValueError(f"a client needs training samples, got {samples}")
    rate = min(1.0, batch_size / samples)
    return LocalPlan(rate, local_epochs * math.ceil(samples / batch_size), rate * samples)
