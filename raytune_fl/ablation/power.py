"""How large a difference an ablation's corrected paired test can call at all: the minimum detectable difference
(MDD) of a family of comparisons, and the exact sign-flip permutation test over the pairs.

Pure numpy and scipy, below report/ so that the ablation table, the dashboard and the results pages state the same
number. The paired t-test calls a cell when |mean(d)| / (sd(d) / sqrt(n)) >= t_{1 - a/2, n-1}; a family of m tests
corrected by Holm or Benjamini-Hochberg is at its strictest a = alpha / m (Holm's first step; BH's smallest
threshold), uncorrected a = alpha. So no cell can be called below the standardized effect

    d_z* = t_{1 - a/2, n-1} / sqrt(n),

and in points, MDD = d_z* x sd_d with sd_d the family's pooled sd of the per-pair differences (the root-mean of the
cells' variances). This is the *threshold* a mean difference has to reach to be called (about 50 % power when the
true difference equals it); 80 % power needs about (t_{1 - a/2, n-1} + t_{0.8, n-1}) x sd_d / sqrt(n)
(`detectable_dz(..., power=0.8)`, the usual t approximation). With 3 pairs and Holm over 12 cells,
d_z* = t_{0.99792, 2} / sqrt(3) = 8.9: a difference of less than 8.9 of its own standard deviations cannot be called.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

ALPHA = 0.05  # the family's level (report/comparison.py's ALPHA_LEVEL is the same number)
STRICTEST = {"holm": "Holm's first step", "bh": "BH at its strictest", "none": "no correction"}
MAX_EXACT_PAIRS = 24  # 2^24 sign vectors, in chunks; beyond, the exact test is not computed (NaN)
_CHUNK = 1 << 15


def strictest_level(m: int, correction: str = "holm", alpha: float = ALPHA) -> float:
    """The strictest two-sided level one test of the family is held to: alpha / m for Holm and BH, alpha for none."""
    if correction not in STRICTEST:
        raise ValueError(f"unknown correction {correction!r}; one of {', '.join(STRICTEST)}")
    return alpha if correction == "none" else alpha / max(m, 1)


def detectable_dz(n: int, m: int, correction: str = "holm", alpha: float = ALPHA, power: float | None = None) -> float:
    """The smallest standardized mean difference |mean(d)| / sd(d) the family's paired t-test can call with n pairs:
    t_{1 - a/2, n-1} / sqrt(n), a = `strictest_level`; with `power` (e.g. 0.8), (t_{1 - a/2, n-1} + t_{power, n-1}) /
    sqrt(n). NaN under 2 pairs (no t-test)."""
    from scipy import stats  # imported when a number is wanted: ablation/table.py imports this module

    if n < 2:
        return math.nan
    a = strictest_level(m, correction, alpha)
    t = float(stats.t.ppf(1 - a / 2, n - 1))
    if power is not None:
        t += float(stats.t.ppf(power, n - 1))
    return t / math.sqrt(n)


def pooled_sd(variances: Sequence[float]) -> float:
    """The root-mean of the cells' variances (NaN ones left out): the family's typical sd of a paired difference."""
    v = np.asarray([x for x in variances if not math.isnan(x)], dtype=float)
    return float(math.sqrt(v.mean())) if len(v) else math.nan


def detectable_difference(
    n: int, m: int, sd: float, correction: str = "holm", alpha: float = ALPHA, power: float | None = None
) -> float:
    """The MDD in the unit of `sd`: `detectable_dz` x sd."""
    return detectable_dz(n, m, correction, alpha, power) * sd


def sentence(n: int, m: int, sd: float, correction: str = "holm", scale: float = 100.0, unit: str = "points") -> str:
    """'minimum detectable difference at 3 pairs and a family of 12: 29.70 points (d_z >= 8.92)'."""
    dz = detectable_dz(n, m, correction)
    if math.isnan(dz) or math.isnan(sd):
        return f"minimum detectable difference at {n} pair{'s' if n != 1 else ''} and a family of {m}: not defined"
    return (
        f"minimum detectable difference at {n} pairs and a family of {m}: {dz * sd * scale:.2f} {unit} "
        f"(d_z >= {dz:.2f})"
    )


def table_line(stds: Sequence[float], ns: Sequence[int], variants: int, settings: int, correction: str = "holm") -> str:
    """The ablation table's (and the dashboard's) MDD line, from the cells' sample sds and counts alone: the family is
    every variant but a reference against it in every setting, m = (variants - 1) x settings, at the fewest runs a
    cell counted; without the pairs the sd of a paired difference is taken as sqrt(2) x the cells' pooled sd, its
    value when a seed does not couple the variants (positively coupled seeds make it smaller)."""
    counted = [int(k) for k in ns if int(k) >= 2]
    m = max(variants - 1, 1) * max(settings, 1)
    if not counted:
        return f"Minimum detectable difference: not defined (no cell counted 2 runs; a family of {m})."
    sd = math.sqrt(2) * pooled_sd([float(s) ** 2 for s in stds])
    return (
        f"{sentence(min(counted), m, sd, correction).capitalize()}, the smallest difference of means the "
        f"{CORRECTIONS_NAMED.get(correction, correction)} paired t-test over every variant against one reference "
        "can call (sd of a paired difference taken as √2 × the cells' pooled sd: no coupling by the seed)."
    )


CORRECTIONS_NAMED = {"holm": "Holm-corrected", "bh": "BH-corrected", "none": "uncorrected"}


def sign_flip_p(differences: Sequence[float] | np.ndarray, rtol: float = 1e-9) -> float:
    """Exact two-sided p of the sign-flip permutation test over paired differences: every one of the 2^n sign
    vectors s, statistic |mean(s * d)|; p = the share with |mean(s * d)| >= |mean(d)| (ties within `rtol` of the
    largest |d| count as reaching it). The observed vector and its negation always count: the smallest p is
    2 / 2^n (0.25 with 3 pairs, 0.03125 with 6). All zero: 1. NaN under 1 pair or over `MAX_EXACT_PAIRS`."""
    d = np.asarray(differences, dtype=float)
    n = len(d)
    if n == 0 or n > MAX_EXACT_PAIRS or not np.all(np.isfinite(d)):
        return math.nan
    observed = abs(float(d.sum()))  # |mean| >= observed  <=>  |sum| >= n * observed: compare sums
    tol = rtol * max(float(np.abs(d).max()), 1e-300) * n
    if observed <= tol:
        return 1.0
    reach = 0
    total = 1 << n
    bits = np.arange(n, dtype=np.int64)
    for start in range(0, total, _CHUNK):
        codes = np.arange(start, min(start + _CHUNK, total), dtype=np.int64)
        signs = 1.0 - 2.0 * ((codes[:, None] >> bits) & 1)  # bit set: that pair's difference flipped
        reach += int(np.count_nonzero(np.abs(signs @ d) >= observed - tol))
    return reach / total
