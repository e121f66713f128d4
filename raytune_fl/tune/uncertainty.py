"""How far a tune-stage score can be trusted: the binomial standard error of an accuracy on the validation set, and
which variants a study's ranking cannot tell apart.

Each variant's best score is one trial of one seed, an accuracy over `n` validation images: its standard error
sqrt(p(1-p)/n) is the sampling noise of which images were held out (seed-to-seed variation comes on top; the
ablation stage measures that). Plain Python (no Ray, no Optuna): the study's parent runs and the command's summary
both use it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from raytune_fl.metrics import VAL_ACC

# two standard errors of a difference: about a 95 % interval, the usual threshold for "not noise"
NOISE_Z = 2.0


def has_binomial_se(metric: str) -> bool:
    """Whether `metric` is an accuracy on the validation set (a proportion of its images), which has a binomial
    standard error; a loss or any other score has none here."""
    return metric == VAL_ACC or metric.endswith(f"_{VAL_ACC}")


def accuracy_se(accuracy: float, samples: int | None) -> float | None:
    """sqrt(p(1-p)/n), the binomial standard error of an accuracy `p` measured on `samples` images; None when there
    is none: `p` is not a proportion in [0, 1], or no samples (or their number unknown)."""
    if samples is None or samples < 1 or not math.isfinite(accuracy) or not 0.0 <= accuracy <= 1.0:
        return None
    return math.sqrt(accuracy * (1.0 - accuracy) / samples)


def within_noise(
    scores: Mapping[str, tuple[float, float]], maximize: bool = True, z: float = NOISE_Z
) -> tuple[str, list[str]] | None:
    """(the best variant, the others within `z` standard errors of it) from `scores`, variant -> (value, its SE).

    A variant is within the noise of the best when |best - value| <= z * sqrt(SE_best^2 + SE^2), the standard error
    of the difference of two independent scores. `<=`: an exact tie is within the noise even at an SE of 0 (an
    accuracy of 0 or 1). The first of equal bests is the best; the others keep their order. None with fewer than two
    scores: nothing to rank."""
    if len(scores) < 2:
        return None
    sign = 1.0 if maximize else -1.0
    best = max(scores, key=lambda name: sign * scores[name][0])
    top, top_se = scores[best]
    close = [
        name
        for name, (value, se) in scores.items()
        if name != best and abs(top - value) <= z * math.sqrt(top_se**2 + se**2)
    ]
    return best, close
