"""Each variant against a reference variant, setting by setting: the difference of final-round accuracy, its
family-adjusted interval, and whether the runs resolve it from zero.

Pure pandas, numpy and scipy: ablation results in (one row per run, as `ablation/results.parquet`), verdicts out.

`ablate.py` runs every variant with the same training seeds (and, with `--partition-seeds`, the same splits), so a
variant's run and the reference's run of one (seed, partition seed) share the initialisation, the batch order, the
sampled clients and the split: they are *paired*. Where at least 2 such pairs exist the comparison uses them: the
mean of the per-pair differences, the paired t-test over them (the verdict's test: its p, adjusted for the family
below, < `ALPHA_LEVEL` is called significant), the t-interval of that mean, and the exact sign-flip permutation test
beside it (ablation/power.py; the Wilcoxon signed-rank p stays on the Difference). Pairing removes what the two
variants' runs of one seed have in common; a seed effect larger than the variants' difference no longer hides it.
Only runs that cannot be paired (no common seeds, or fewer than 2 pairs while each side has at least 2 runs) fall
back to Welch's unpaired t-test and its Welch–Satterthwaite interval, and say "unpaired".

A page compares every variant with the reference in every setting: a family of tests. At the 5 % level, 12 tests
of variants that do not differ at all still call 0.6 of them significant on average. `differences` therefore
adjusts the family's p-values (`adjust_p`; Holm by default, Benjamini–Hochberg as the false-discovery-rate option)
and the verdict is on the adjusted p; each cell shows the raw p beside it. The printed interval is at the family's
level (`family_alpha`): the level at which the correction decided, so it excludes 0 exactly where a difference is
called and an uncalled one reads "not resolved: interval [a, b]". Each family also states its minimum detectable
difference (`detectable`): how large a difference its n pairs and m tests can call at all.

Which noise the verdict includes is what the runs varied: training seeds only when the split is fixed (one partition
seed), training seeds x partition seeds otherwise. The size of the test set is not in it (see
docs/explanation/statistics.md).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd
from scipy import stats

from raytune_fl.ablation import power
from raytune_fl.ablation.table import COUNTED, LEVEL, mean_interval
from raytune_fl.metrics import TEST_ACC
from raytune_fl.tracking.schema import TRIAL_COLLAPSED

ALPHA_LEVEL = 0.05  # the usual two-sided 5 % level; a reader can re-judge from the printed p-values
PAIR_KEYS = ("seed", "partition_seed")  # what makes two runs a pair (partition_seed where the results have it)
PAIRED, UNPAIRED = "paired t", "Welch"
# Holm by default: it bounds the chance of even one false "significant" on the page (like Bonferroni) and is never
# less powerful than Bonferroni; "bh" (Benjamini–Hochberg) bounds the expected share of false calls instead (the FDR)
CORRECTIONS = ("holm", "bh", "none")
DEFAULT_CORRECTION = "holm"
CORRECTION_NAMES = {"holm": "Holm", "bh": "BH", "none": "uncorrected"}  # as the cells and the footnote print them


def adjust_p(p_values: Sequence[float], method: str = DEFAULT_CORRECTION) -> list[float]:
    """The p-values adjusted for being one family of tests, in the input's order; capped at 1.

    "holm": Holm–Bonferroni step-down. With the m p-values sorted, p_(1) <= ... <= p_(m), the i-th is adjusted to
    max over j <= i of (m - j + 1) p_(j): the smallest times m, the next times m - 1, ..., never below an earlier one.
    "bh": Benjamini–Hochberg step-up. The i-th sorted is adjusted to min over j >= i of m p_(j) / j: the largest
    stays, each smaller one is m / rank times itself but never above a later one. "none": unchanged.
    NaN p-values (cells too small to judge) are not in the family: they stay NaN and do not count in m.
    """
    if method not in CORRECTIONS:
        raise ValueError(f"unknown correction {method!r}; one of {', '.join(CORRECTIONS)}")
    p = [float(v) for v in p_values]
    if method == "none":
        return p
    judged = sorted((i for i, v in enumerate(p) if not math.isnan(v)), key=lambda i: p[i])  # stable on ties
    m = len(judged)
    adjusted = list(p)
    if method == "holm":
        running = 0.0
        for rank, i in enumerate(judged):  # rank 0 is the smallest p: times m
            running = max(running, min(1.0, (m - rank) * p[i]))
            adjusted[i] = running
    else:  # bh
        running = 1.0
        for rank in range(m - 1, -1, -1):  # from the largest p down: rank + 1 is its 1-based rank
            i = judged[rank]
            running = min(running, m * p[i] / (rank + 1))
            adjusted[i] = min(1.0, running)
    return adjusted


@dataclass(frozen=True)
class Difference:
    variant: str
    setting: str
    delta: float  # the variant's mean minus the reference's, as a fraction (0.01 = one point); over the pairs if paired
    p_value: float  # two-sided: the paired t-test if `paired`, else Welch's; NaN when too few runs to judge
    n: int  # counted runs of the variant
    n_reference: int
    ci_low: float = math.nan  # the 95 % t-interval of `delta` (paired, or Welch–Satterthwaite); NaN with p
    ci_high: float = math.nan
    paired: bool = False  # whether `p_value` and the interval come from pairs (same seed and partition seed)
    n_pairs: int = 0
    # Wilcoxon's signed-rank p over the pairs, reported beside the t-test but never the verdict: with n pairs its
    # smallest two-sided p is 2 / 2^n, 0.25 at n = 3, so it cannot reach 0.05 under 6 pairs
    wilcoxon_p: float = math.nan
    partition_seeds: int = 1  # distinct splits among the compared runs: 1 = the noise is the training seeds only
    # `p_value` adjusted over the family it was judged in (`corrected`): the verdict unless `correction` is "none"
    p_adjusted: float = math.nan
    correction: str = "none"  # one of CORRECTIONS; "none" for a Difference built by hand (judged on the raw p)
    family: int = 0  # the judged comparisons (p not NaN) in that family
    # the exact sign-flip permutation p over the pairs (power.sign_flip_p): no normality assumed; smallest 2 / 2^n
    permutation_p: float = math.nan
    se: float = math.nan  # the standard error of `delta` and its degrees of freedom: any level's interval from them
    dof: float = math.nan
    sd_pairs: float = math.nan  # the sample sd of the per-pair differences (the family's MDD pools them)
    level: float = LEVEL  # the confidence level of `ci_low`..`ci_high`: the family's (`corrected`) once corrected

    @property
    def test(self) -> str:
        return PAIRED if self.paired else UNPAIRED

    @property
    def verdict_p(self) -> float:
        """The p the verdict is on: the adjusted one when the family was corrected, else the raw one."""
        return self.p_value if self.correction == "none" else self.p_adjusted

    @property
    def significant(self) -> bool:
        return not math.isnan(self.verdict_p) and self.verdict_p < ALPHA_LEVEL

    def describe(self, scale: float = 100.0, unit: str = "points", digits: int = 2) -> str:
        """The effect first, then the p-values: '+2.33 points [+0.81, +3.85] (paired t p = 0.012, Holm p = 0.048,
        sign-flip p = 0.25, n = 3)' when called; '+2.00 points, not resolved: interval [-0.48, +4.48] (...)' when the
        verdict's p ≥ 0.05; unpaired: '(unpaired, Welch p = 0.0036, Holm p = 0.011, n = 3 vs 3)'. No adjusted p
        without a correction. The interval is at `level` (the family's, which the footnote states), so it contains 0
        exactly when the difference is not resolved. `scale` and `unit` say how the difference is shown: accuracy in
        points (x 100), a variance of accuracies in points² (x 10,000)."""
        if math.isnan(self.delta):
            return "– (no finished run)"
        text = f"{self.delta * scale:+.{digits}f} {unit}"
        if math.isnan(self.p_value):
            return text + " (too few seeds to judge)"
        interval = f"[{self.ci_low * scale:+.{digits}f}, {self.ci_high * scale:+.{digits}f}]"
        text += f" {interval}" if self.significant else f", not resolved: interval {interval}"
        adjusted = "" if self.correction == "none" else f", {_name(self.correction)} p = {self.p_adjusted:.2g}"
        if self.paired:
            flips = "–" if math.isnan(self.permutation_p) else f"{self.permutation_p:.2g}"
            return text + f" (paired t p = {self.p_value:.2g}{adjusted}, sign-flip p = {flips}, n = {self.n_pairs})"
        return text + f" (unpaired, Welch p = {self.p_value:.2g}{adjusted}, n = {self.n} vs {self.n_reference})"


def _name(correction: str) -> str:
    return CORRECTION_NAMES.get(correction, correction)


def _counted(results: pd.DataFrame, variant: str, setting: str, metric: str) -> pd.DataFrame:
    """The variant's counted runs in the setting (finished, with a value): the pair keys and the metric."""
    rows = results[(results["variant"] == variant) & (results["setting"] == setting)]
    rows = rows[(rows["status"] == COUNTED) & rows[metric].notna()]
    keys = [k for k in PAIR_KEYS if k in rows.columns]
    return rows[keys].assign(value=rows[metric].astype(float)).reset_index(drop=True)


def pairs(variant: pd.DataFrame, reference: pd.DataFrame) -> pd.Series:
    """Per-pair differences variant - reference over the (seed, partition seed) keys both sides ran; a key counted
    twice on a side (a hand-made table; ablate.py keeps one run per cell) is averaged first."""
    keys = [k for k in PAIR_KEYS if k in variant.columns and k in reference.columns]
    if not keys:
        return pd.Series(dtype=float)
    a = variant.groupby(keys)["value"].mean()
    b = reference.groupby(keys)["value"].mean()
    common = a.index.intersection(b.index)
    return (a.loc[common] - b.loc[common]).reset_index(drop=True)


def paired_t(differences: pd.Series | np.ndarray) -> tuple[float, float, float]:
    """Two-sided p of the paired t-test (t = mean / (sd / sqrt(n)), n - 1 degrees of freedom) and the 95 %
    t-interval of the mean difference. No spread at all: p is 1 for a zero mean, 0 otherwise (t is undefined),
    and the interval is the mean itself."""
    d = np.asarray(differences, dtype=float)
    mean, sd = float(d.mean()), float(d.std(ddof=1))
    if sd == 0:
        return (1.0 if mean == 0 else 0.0), mean, mean
    t = mean / (sd / math.sqrt(len(d)))
    low, high = mean_interval(d, LEVEL)
    return float(2 * stats.t.sf(abs(t), len(d) - 1)), low, high


def wilcoxon_p(differences: pd.Series | np.ndarray) -> float:
    """Two-sided p of the Wilcoxon signed-rank test (scipy: exact for small n without ties). Zero differences are
    dropped (Wilcoxon's convention); all zero: 1. With n pairs the smallest possible p is 2 / 2^n: 0.25 for 3 pairs,
    so with the usual 3 seeds it can never reach 0.05; it is reported, the verdict is the paired t's."""
    d = np.asarray(differences, dtype=float)
    if not np.any(d != 0):
        return 1.0
    with warnings.catch_warnings():  # ties or zeros make scipy warn that it switched to the normal approximation
        warnings.simplefilter("ignore")
        try:
            return float(stats.wilcoxon(d).pvalue)
        except ValueError:  # too few non-zero differences for scipy
            return math.nan


def welch(a: pd.Series, b: pd.Series) -> tuple[float, float, float]:
    """Welch's two-sided t-test of mean(a) - mean(b) and its 95 % interval with the Welch–Satterthwaite degrees of
    freedom: (p, low, high); NaN under 2 runs a side. Neither side with spread: p is 1 for equal means, 0 otherwise,
    and the interval is the difference itself."""
    if len(a) < 2 or len(b) < 2:
        return math.nan, math.nan, math.nan
    delta = float(a.mean() - b.mean())
    va, vb = float(a.var(ddof=1)) / len(a), float(b.var(ddof=1)) / len(b)
    if va == 0 and vb == 0:  # t is undefined: equal means are no difference, others are
        return (1.0 if delta == 0 else 0.0), delta, delta
    se = math.sqrt(va + vb)
    dof = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    half = float(stats.t.ppf((1 + LEVEL) / 2, dof)) * se
    return float(2 * stats.t.sf(abs(delta) / se, dof)), delta - half, delta + half


def welch_p(a: pd.Series, b: pd.Series) -> float:
    """Two-sided p-value of Welch's t-test; NaN under 2 runs a side; 1 or 0 when both sides have no spread."""
    return welch(a, b)[0]


def compare(variant: str, setting: str, other: pd.DataFrame, base: pd.DataFrame) -> Difference:
    """One variant's counted runs (`_counted`) against the reference's in one setting."""
    n, n_ref = len(other), len(base)
    splits = pd.concat([other, base])["partition_seed"].nunique() if "partition_seed" in other else 1
    d = pairs(other, base)
    if len(d) >= 2:
        p, low, high = paired_t(d)
        sd = float(d.std(ddof=1))
        found = Difference(
            variant, setting, float(d.mean()), p, n, n_ref, low, high, True, len(d), wilcoxon_p(d), max(1, splits)
        )
        flips = power.sign_flip_p(d.to_numpy())
        return replace(found, permutation_p=flips, se=sd / math.sqrt(len(d)), dof=len(d) - 1, sd_pairs=sd)
    delta = float(other["value"].mean() - base["value"].mean()) if n and n_ref else math.nan
    p, low, high = welch(other["value"], base["value"])  # NaN when a side has under 2 runs: too few to judge
    se, dof = _welch_se(other["value"], base["value"])
    found = Difference(variant, setting, delta, p, n, n_ref, low, high, False, len(d), math.nan, max(1, splits))
    return replace(found, se=se, dof=dof)


def _welch_se(a: pd.Series, b: pd.Series) -> tuple[float, float]:
    """Welch's standard error of mean(a) - mean(b) and its Welch–Satterthwaite degrees of freedom (NaN as `welch`)."""
    if len(a) < 2 or len(b) < 2:
        return math.nan, math.nan
    va, vb = float(a.var(ddof=1)) / len(a), float(b.var(ddof=1)) / len(b)
    if va == 0 and vb == 0:
        return 0.0, math.nan
    return math.sqrt(va + vb), (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))


def family_alpha(found: list[Difference]) -> float:
    """The two-sided level of the family's printed intervals, chosen so that an interval excludes 0 exactly where
    the corrected verdict calls the difference (the t-tests' p and interval are dual: p < a <=> 0 outside the
    1 - a interval). With m judged cells of which k are called:

    - Holm: a = alpha / (m - k), the level of the step at which Holm stopped (alpha / m, Bonferroni's, when nothing
      is called). Every called p is below it (p_(i) < alpha / (m - i + 1) <= alpha / (m - k) for i <= k), every
      other p at or above it (Holm stopped at p_(k+1) >= alpha / (m - k)); alpha when all m are called.
    - BH: a = max(k, 1) alpha / m, the false-coverage-rate level of Benjamini & Yekutieli (2005) for the k selected:
      called p are below k alpha / m, the others at least (k + 1) alpha / m.
    - none: alpha.
    """
    judged = [d for d in found if not math.isnan(d.p_value)]
    if not judged or judged[0].correction == "none":
        return ALPHA_LEVEL
    m, k = len(judged), sum(d.significant for d in judged)
    if judged[0].correction == "holm":
        return ALPHA_LEVEL / max(m - k, 1)
    return max(k, 1) * ALPHA_LEVEL / m


def at_level(d: Difference, level: float) -> Difference:
    """`d` with its interval recomputed at `level` from its standard error (no spread: the difference itself)."""
    if math.isnan(d.p_value) or math.isnan(d.se):
        return d
    if d.se == 0:
        return replace(d, ci_low=d.delta, ci_high=d.delta, level=level)
    half = float(stats.t.ppf((1 + level) / 2, d.dof)) * d.se
    return replace(d, ci_low=d.delta - half, ci_high=d.delta + half, level=level)


def corrected(found: list[Difference], method: str = DEFAULT_CORRECTION) -> list[Difference]:
    """`found` as one family: each cell's p adjusted over all the cells that could be judged (`adjust_p`), with
    the correction and the family's size recorded on it. Pool two lists (`corrected(a + b)`) to make them one."""
    adjusted = adjust_p([d.p_value for d in found], method)
    family = sum(not math.isnan(d.p_value) for d in found)
    judged = [replace(d, p_adjusted=p, correction=method, family=family) for d, p in zip(found, adjusted)]
    level = 1 - family_alpha(judged)  # the intervals at the level the verdicts were made at
    return [at_level(d, level) for d in judged]


def detectable(found: list[Difference], scale: float = 100.0, unit: str = "points", with_power: bool = False) -> str:
    """The family's minimum detectable difference (ablation/power.py) over its paired cells: at the fewest pairs a
    cell has, the family's size and correction, and the pooled sd of the per-pair differences; '' without a paired
    cell. `with_power` adds the difference that 80 % power needs (the t approximation)."""
    paired = [d for d in found if d.paired and not math.isnan(d.p_value)]
    if not paired:
        return ""
    n, most = min(d.n_pairs for d in paired), max(d.n_pairs for d in paired)
    m, correction = max(max(d.family for d in paired), 1), paired[0].correction
    sd = power.pooled_sd([d.sd_pairs**2 for d in paired])
    text = power.sentence(n, m, sd, correction, scale, unit)
    if most != n:
        text += f" (at the family's fewest pairs; its cells have {n} to {most})"
    if with_power:
        needed = power.detectable_difference(n, m, sd, correction, power=0.8) * scale
        text += f"; 80 % power needs about {needed:.2f} {unit}"
    return text


def collapsed_runs(results: pd.DataFrame) -> tuple[int, int]:
    """(runs whose status is collapsed, all runs) in `results`: the collapsed ones are out of every statistic."""
    return int((results["status"] == TRIAL_COLLAPSED).sum()), len(results)


def differences(
    results: pd.DataFrame, reference: str, metric: str = TEST_ACC, correction: str = DEFAULT_CORRECTION
) -> list[Difference]:
    """Every other variant against `reference`, in each setting; variants and settings in order of appearance.
    The returned cells are one family (every variant x setting against the reference): their p-values adjusted
    together by `correction` (`corrected`), the verdicts on the adjusted p."""
    if reference not in set(results["variant"]):
        raise ValueError(f"reference variant {reference!r} has no runs in the results")
    found = []
    for setting in dict.fromkeys(results["setting"]):
        base = _counted(results, reference, setting, metric)
        for variant in dict.fromkeys(results["variant"]):
            if variant != reference:
                found.append(compare(variant, setting, _counted(results, variant, setting, metric), base))
    return corrected(found, correction)


def _correction_text(found: list[Difference]) -> str:
    """What the verdicts are on: the adjusted p, by which correction over how many comparisons, or the raw p."""
    judged = [d for d in found if not math.isnan(d.p_value)]
    if not judged:
        return ""
    d = judged[0]
    if d.correction == "none":
        return "no correction for multiple comparisons: the verdict is on the raw p; "
    how = {
        "holm": "Holm's step-down method (bounds the chance of any false call among them)",
        "bh": "the Benjamini–Hochberg method (bounds the expected share of false calls, the false discovery rate)",
    }.get(d.correction, d.correction)
    family = max(x.family for x in judged)
    return (
        f"p-values adjusted for {family} comparison{'s' if family != 1 else ''} by {how}: the verdict is on the "
        f"adjusted p ({_name(d.correction)} p), the raw p is shown beside it; "
    )


def level_text(found: list[Difference]) -> str:
    """The printed intervals' level and why: '99.58 % interval (1 − 0.05/12: the level of the step at which ...)'."""
    judged = [d for d in found if not math.isnan(d.p_value)]
    shown = f"{100 * (1 - family_alpha(found)):.4g} % interval"
    if not judged or judged[0].correction == "none":
        return f"{shown} (unadjusted: no correction)"
    m, k = len(judged), sum(d.significant for d in judged)
    if judged[0].correction == "holm":
        return f"{shown} (1 − {ALPHA_LEVEL}/{max(m - k, 1)}: the level of the step at which Holm's procedure stopped)"
    return f"{shown} (1 − {max(k, 1)} × {ALPHA_LEVEL}/{m}: Benjamini–Yekutieli's level for the {k} called)"


def footnote(
    found: list[Difference],
    metric_label: str = "final-round accuracy",
    unit: str = "points",
    collapsed: tuple[int, int] | None = None,
    scale: float = 100.0,
) -> str:
    """Which test each cell used, which correction the verdict is on, the intervals' level, the family's minimum
    detectable difference, the collapsed runs left out (`collapsed`: (k, n), `collapsed_runs`) and which noise the
    cells include; `metric_label` names what was compared ('final-round accuracy', 'mean test accuracy of the last
    5 rounds')."""
    judged = [d for d in found if not math.isnan(d.p_value)]
    tests = []
    if any(d.paired for d in judged):
        tests.append(
            "paired: runs paired by training seed (and partition seed), the difference is the mean over the pairs; "
            "p from the two-sided paired t-test (the verdict's test), the exact sign-flip permutation p beside it "
            "(all 2^n sign vectors of the n pair differences, statistic |mean|, no normality assumed; its smallest p "
            "is 2 / 2^n: 0.25 with 3 pairs, 0.03125 with 6)"
        )
    if any(not d.paired for d in judged):
        tests.append(
            "unpaired (fewer than 2 runs share a seed): Welch's two-sided t-test and its Welch–Satterthwaite interval"
        )
    splits = max((d.partition_seeds for d in found), default=1)
    noise = "training seeds x partition seeds (the split varies)" if splits > 1 else "training seeds only (one split)"
    correction = _correction_text(found)
    verdict = "adjusted p" if judged and judged[0].correction != "none" else "p"
    mdd = detectable(found, scale, unit)
    out = "" if collapsed is None else f" Collapsed runs are out of the statistics ({collapsed[0]} of {collapsed[1]})."
    return (
        f"Differences of {_averaged(metric_label)} in {unit}; in brackets the family's {level_text(found)}, which "
        "excludes 0 exactly where a difference is called; "
        + ("; ".join(tests) + "; " if tests else "")
        + correction
        + f"{verdict} ≥ {ALPHA_LEVEL} is called not resolved."
        + (f" {mdd[0].upper()}{mdd[1:]}." if mdd else "")
        + out
        + f" The noise: {noise}."
    )


def _averaged(metric_label: str) -> str:
    """'mean final-round accuracy'; a label that is already a mean says so once: 'mean test accuracy of the last 5
    rounds (averaged over runs)'."""
    return f"{metric_label} (averaged over runs)" if metric_label.startswith("mean ") else f"mean {metric_label}"


def to_markdown(
    found: list[Difference],
    reference: str,
    metric_label: str = "final-round accuracy",
    scale: float = 100.0,
    unit: str = "points",
    digits: int = 2,
    collapsed: tuple[int, int] | None = None,
) -> str:
    """Variants down, settings across, each cell the difference from `reference`, its interval and its verdict;
    `metric_label` names the compared score in the footnote, `scale`/`unit`/`digits` how differences are shown,
    `collapsed` the (collapsed, all) runs the footnote says are out."""
    settings = list(dict.fromkeys(d.setting for d in found))
    variants = list(dict.fromkeys(d.variant for d in found))
    cell = {(d.variant, d.setting): d.describe(scale, unit, digits) for d in found}
    lines = [
        f"| variant − {reference} | " + " | ".join(settings) + " |",
        "|" + "|".join(["---"] + [":---:"] * len(settings)) + "|",
    ]
    for variant in variants:
        lines.append(f"| {variant} | " + " | ".join(cell.get((variant, s), "–") for s in settings) + " |")
    lines.append("")
    lines.append(footnote(found, metric_label, unit, collapsed, scale))
    return "\n".join(lines) + "\n"
