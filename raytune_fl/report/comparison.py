"""Each variant against a reference variant, setting by setting: the difference of mean final-round accuracy and
whether it is larger than the seeds' noise.

Pure pandas and scipy: ablation results in (one row per run, as `ablation/results.parquet`), verdicts out. A
difference is called significant only when Welch's t-test over the seeds gives p < `ALPHA_LEVEL`; with 3 seeds per
cell that takes a difference several times the seeds' spread, and everything smaller is called inside seed noise.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import pandas as pd
from scipy import stats

from raytune_fl.ablation.table import COUNTED

ALPHA_LEVEL = 0.05  # the usual two-sided 5 % level; a reader can re-judge from the printed p-values


@dataclass(frozen=True)
class Difference:
    variant: str
    setting: str
    delta: float  # mean(variant) - mean(reference), as a fraction (0.01 = one point)
    p_value: float  # Welch's two-sided t-test over the seeds; NaN when either side has fewer than 2 runs
    n: int  # counted runs of the variant
    n_reference: int

    @property
    def significant(self) -> bool:
        return not math.isnan(self.p_value) and self.p_value < ALPHA_LEVEL

    def describe(self) -> str:
        """'+2.33 points (p = 0.012)' or '-0.23 points, inside seed noise (p = 0.71)'."""
        if math.isnan(self.delta):
            return "– (no finished run)"
        text = f"{self.delta * 100:+.2f} points"
        if math.isnan(self.p_value):
            return text + " (too few seeds to judge)"
        return text + ("" if self.significant else ", inside seed noise") + f" (p = {self.p_value:.2g})"


def _counted(results: pd.DataFrame, variant: str, setting: str, metric: str) -> pd.Series:
    rows = results[(results["variant"] == variant) & (results["setting"] == setting)]
    return rows.loc[(rows["status"] == COUNTED) & rows[metric].notna(), metric].astype(float)


def welch_p(a: pd.Series, b: pd.Series) -> float:
    """Two-sided p-value of Welch's t-test; NaN under 2 runs a side; 1 or 0 when both sides have no spread."""
    if len(a) < 2 or len(b) < 2:
        return math.nan
    if a.std(ddof=1) == 0 and b.std(ddof=1) == 0:  # t is undefined: equal means are no difference, others are
        return 1.0 if a.mean() == b.mean() else 0.0
    with warnings.catch_warnings():  # near-equal seeds make scipy warn about precision; p is still right
        warnings.simplefilter("ignore", RuntimeWarning)
        return float(stats.ttest_ind(a, b, equal_var=False).pvalue)


def differences(results: pd.DataFrame, reference: str, metric: str = "test_acc") -> list[Difference]:
    """Every other variant against `reference`, in each setting; variants and settings in order of appearance."""
    if reference not in set(results["variant"]):
        raise ValueError(f"reference variant {reference!r} has no runs in the results")
    found = []
    for setting in dict.fromkeys(results["setting"]):
        base = _counted(results, reference, setting, metric)
        for variant in dict.fromkeys(results["variant"]):
            if variant == reference:
                continue
            other = _counted(results, variant, setting, metric)
            delta = float(other.mean() - base.mean()) if len(other) and len(base) else math.nan
            found.append(Difference(variant, setting, delta, welch_p(other, base), len(other), len(base)))
    return found


def to_markdown(found: list[Difference], reference: str) -> str:
    """Variants down, settings across, each cell the difference from `reference` and its verdict."""
    settings = list(dict.fromkeys(d.setting for d in found))
    variants = list(dict.fromkeys(d.variant for d in found))
    cell = {(d.variant, d.setting): d.describe() for d in found}
    lines = [
        f"| variant − {reference} | " + " | ".join(settings) + " |",
        "|" + "|".join(["---"] + [":---:"] * len(settings)) + "|",
    ]
    for variant in variants:
        lines.append(f"| {variant} | " + " | ".join(cell.get((variant, s), "–") for s in settings) + " |")
    lines.append("")
    lines.append(
        f"Differences of mean final-round accuracy in points; p from Welch's two-sided t-test over the seeds; "
        f"p ≥ {ALPHA_LEVEL} is called inside seed noise."
    )
    return "\n".join(lines) + "\n"
