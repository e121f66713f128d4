"""The paper-style ablation table: rows variants, columns settings, cells mean ± std over seeds.

Pandas (and scipy's t quantile): results in, table out. Every number in a cell can be recomputed from
`ablation/results.parquet`.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence

import pandas as pd

from raytune_fl.ablation.power import table_line
from raytune_fl.metrics import EPSILON, TEST_ACC
from raytune_fl.tracking.schema import TRIAL_COLLAPSED

# Only runs that trained every round count towards a cell: a diverged or failed seed is shown as missing
# (n/runs) rather than averaged in as 0 % or silently dropped. A collapsed run (it ran every round and ended at
# chance, engine/chance.py) is not counted either, and its cell says how many there were: averaged in, one seed
# that learned nothing would drag the mean by its distance to chance and widen the interval.
COUNTED = "finished"
COLLAPSED = TRIAL_COLLAPSED
COLLAPSED_RUNS = "collapsed"  # not-a-metric: summarise's column, how many of a cell's runs collapsed
LEVEL = 0.95  # the confidence level of every interval the tables and dashboards draw
# The dashboard draws no interval from fewer runs (the summary keeps its clipped numbers): with 2 runs the
# t-interval has 1 degree of freedom, t_{0.975,1} = 12.7, so it spans ±9 sample standard deviations of a run (an
# accuracy's easily leaves [0, 1]): it shows the quantile, not the runs. With 3, t_{0.975,2} = 4.3 (±2.5 sd).
MIN_RUNS_FOR_INTERVAL = 3
ACCURACY_BOUNDS = (0.0, 1.0)  # an accuracy is a proportion: no interval of one reaches outside


def mean_interval(values: Sequence[float] | pd.Series, level: float = LEVEL) -> tuple[float, float]:
    """Student's t-interval of the mean: mean ± t_{(1+level)/2, n-1} * s / sqrt(n), s the sample std (ddof=1).

    (NaN, NaN) under 2 values: one run says nothing about the spread. It is the interval of the *mean* over the runs
    (95 % of such intervals cover the mean of infinitely many runs), not the range a single run falls in.
    """
    from scipy import stats  # imported when an interval is wanted: the table itself needs only pandas

    data = pd.Series(values, dtype=float).dropna()
    if len(data) < 2:
        return math.nan, math.nan
    mean, half = float(data.mean()), float(data.std(ddof=1)) / math.sqrt(len(data))
    half *= float(stats.t.ppf((1 + level) / 2, len(data) - 1))
    return mean - half, mean + half


def clip_interval(low: float, high: float, bounds: tuple[float, float] | None) -> tuple[float, float]:
    """The interval's ends moved into `bounds` (None: unchanged); NaN ends stay NaN."""
    if bounds is None:
        return low, high
    lo, hi = bounds
    return (low if math.isnan(low) else min(max(low, lo), hi)), (high if math.isnan(high) else max(min(high, hi), lo))


def summarise(
    results: pd.DataFrame,
    metric: str = TEST_ACC,
    *,
    bounds: tuple[float, float] | None = ACCURACY_BOUNDS,
    lower_is_better: bool = False,  # a spread (the variance over clients): the column's lowest mean is its best
) -> pd.DataFrame:
    """One row per (variant, setting): mean and sample std (ddof=1) of `metric` over the counted seeds.

    `results` has one row per run with columns variant, setting, status and `metric` (and partition_seed when the
    ablation varied the split). Returns columns variant, setting, mean, std, n (runs counted), runs (runs made),
    collapsed (runs that ran every round and ended at chance: made, not counted), ci_low and ci_high (the 95 %
    t-interval of the mean, `mean_interval`, clipped into `bounds`: an accuracy's t-interval from 2 or 3 runs easily
    leaves [0, 1], which no accuracy can; pass `bounds=None` for a score without bounds, e.g. a loss; NaN under 2
    counted runs), partition_seeds (the distinct splits among the counted runs; 1 without the column), best (the
    highest mean of its setting; ties are all marked). Variants and settings keep their order of first appearance.
    """
    rows = []
    for (variant, setting), group in results.groupby(["variant", "setting"], sort=False):
        kept = group[(group["status"] == COUNTED) & group[metric].notna()]
        counted = kept[metric].astype(float)
        low, high = clip_interval(*mean_interval(counted), bounds)
        rows.append(
            {
                "variant": variant,
                "setting": setting,
                "mean": float(counted.mean()) if len(counted) else math.nan,
                "std": float(counted.std(ddof=1)) if len(counted) > 1 else math.nan,
                "n": len(counted),
                "runs": len(group),
                COLLAPSED_RUNS: int((group["status"] == COLLAPSED).sum()),
                "ci_low": low,
                "ci_high": high,
                "partition_seeds": int(kept["partition_seed"].nunique()) if "partition_seed" in kept else 1,
            }
        )
    columns = ["variant", "setting", "mean", "std", "n", "runs", COLLAPSED_RUNS, "ci_low", "ci_high", "partition_seeds"]
    summary = pd.DataFrame(rows, columns=columns)
    column_best = summary.groupby("setting", sort=False)["mean"].transform("min" if lower_is_better else "max")
    summary["best"] = summary["mean"].notna() & (summary["mean"] == column_best)
    return summary


def format_cell(mean: float, std: float, n: int, runs: int, percent: bool = True, collapsed: int = 0) -> str:
    """`mean ± std`, then `(n/runs)` when only n of the runs are counted, `(n/runs, k collapsed)` when k of them
    ended at chance; `– (0/runs)` when none is."""
    missing = f" ({n}/{runs}, {collapsed} collapsed)" if collapsed else f" ({n}/{runs})"
    if math.isnan(mean):
        return "–" + missing
    scale = 100.0 if percent else 1.0
    text = f"{mean * scale:.2f}" + (f" ± {std * scale:.2f}" if not math.isnan(std) else "")
    return text + (missing if n < runs else "")


def wide(summary: pd.DataFrame, best_marker: tuple[str, str] = ("**", "**"), percent: bool = True) -> pd.DataFrame:
    """Variants down, settings across, formatted cells; the best cell of each column wrapped in `best_marker`."""
    cells = summary.apply(
        lambda r: (
            (best_marker[0] if r["best"] else "")
            + format_cell(r["mean"], r["std"], int(r["n"]), int(r["runs"]), percent, int(r.get(COLLAPSED_RUNS, 0)))
            + (best_marker[1] if r["best"] else "")
        ),
        axis=1,
    )
    table = summary.assign(cell=cells).pivot(index="variant", columns="setting", values="cell")
    order_rows = list(dict.fromkeys(summary["variant"]))
    order_cols = list(dict.fromkeys(summary["setting"]))
    table = table.loc[order_rows, order_cols]
    table.index.name, table.columns.name = "variant", None
    return table


def noise(seeds: int | None, partition_seeds: int = 1) -> str:
    """What a cell's spread is over: '3 training seeds', or '3 training seeds x 2 partition seeds (the split
    varies)'."""
    text = f"{seeds} training seeds" if seeds else "training seeds"
    return text + (f" x {partition_seeds} partition seeds (the split varies)" if partition_seeds > 1 else "")


def to_markdown(
    summary: pd.DataFrame, metric: str = TEST_ACC, seeds: int | None = None, partition_seeds: int | None = None
) -> str:
    """A GitHub-flavoured Markdown table plus one line saying what the cells are; `partition_seeds` defaults to the
    most splits any cell counted (summarise's column)."""
    lines = markdown_rows(wide(summary))
    if partition_seeds is None:
        counted = summary["partition_seeds"] if "partition_seeds" in summary else pd.Series(dtype=float)
        partition_seeds = max(1, int(counted.max())) if counted.notna().any() else 1
    over = noise(seeds, partition_seeds)
    lines.append("")
    lines.append(
        f"Cells: final-round {metric} in %, mean ± sample std (ddof=1) over {over}; **bold** = best in its column; "
        "(n/runs) = only n runs finished (diverged or failed runs are not averaged in); k collapsed = k runs ran "
        "every round to a final accuracy at chance, on the validation or the test split not above b + 2 sqrt(b (1 - "
        "b) / size), b the larger of 1/classes and the split's majority-class share: they are left out of the mean "
        "and the statistics."
    )
    lines.append(table_line(summary["std"], summary["n"], summary["variant"].nunique(), summary["setting"].nunique()))
    return "\n".join(lines) + "\n"


def privacy_line(results: pd.DataFrame) -> str:
    """Under base.privacy, the epsilon each variant's runs spent (the most any of its counted runs did, per setting
    where they differ); "" for runs without privacy."""
    if EPSILON not in results or not results[EPSILON].notna().any():
        return ""
    spent = results[results[EPSILON].notna()].groupby("variant", sort=False)[EPSILON].max()
    # no noise spends an infinite epsilon, which MLflow stores as the largest float
    listed = ", ".join(
        f"{variant} {'inf (no noise)' if value >= 1e300 else f'{value:.3g}'}" for variant, value in spent.items()
    )
    return f"Privacy: epsilon spent, the most over each variant's runs: {listed}."


def markdown_rows(table: pd.DataFrame) -> list[str]:
    """`wide`'s table as Markdown lines: the header, the alignment row, a row per variant."""
    lines = ["| variant | " + " | ".join(table.columns) + " |"]
    lines.append("|" + "|".join(["---"] + [":---:"] * len(table.columns)) + "|")
    lines += ["| " + " | ".join([str(variant), *(str(v) for v in row)]) + " |" for variant, row in table.iterrows()]
    return lines


def to_csv(summary: pd.DataFrame) -> str:
    """The same wide table as CSV; the best cell of each column ends in ' *'."""
    return wide(summary, best_marker=("", " *")).to_csv()


def to_html(summary: pd.DataFrame) -> str:
    """The same wide table as an HTML table (the dashboard's), the best cell of each column bold."""
    # the cells are digits, '±', '–', '(n/runs)' and 'k collapsed': nothing in them to escape
    table = wide(summary, best_marker=("<strong>", "</strong>"))
    head = "".join(f"<th>{html.escape(str(s))}</th>" for s in table.columns)
    body = "".join(
        f"<tr><th scope='row'>{html.escape(str(variant))}</th>"
        + "".join(f"<td>{'–' if pd.isna(cell) else cell}</td>" for cell in row)
        + "</tr>"
        for variant, row in table.iterrows()
    )
    return f"<table class='ablation'><thead><tr><th>variant</th>{head}</tr></thead><tbody>{body}</tbody></table>"
