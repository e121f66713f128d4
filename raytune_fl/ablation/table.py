"""The paper-style ablation table: rows variants, columns settings, cells mean ± std over seeds.

Pure pandas: results in, table out. Every number in a cell can be recomputed from `ablation/results.parquet`.
"""

from __future__ import annotations

import html
import math

import pandas as pd

# Only runs that trained every round count towards a cell: a diverged or failed seed is shown as missing
# (n/runs) rather than averaged in as 0 % or silently dropped.
COUNTED = "finished"


def summarise(results: pd.DataFrame, metric: str = "test_acc") -> pd.DataFrame:
    """One row per (variant, setting): mean and sample std (ddof=1) of `metric` over the counted seeds.

    `results` has one row per run with columns variant, setting, status and `metric`. Returns columns
    variant, setting, mean, std, n (runs counted), runs (runs made), best (the highest mean of its setting;
    ties are all marked). Variants and settings keep their order of first appearance.
    """
    rows = []
    for (variant, setting), group in results.groupby(["variant", "setting"], sort=False):
        counted = group.loc[(group["status"] == COUNTED) & group[metric].notna(), metric].astype(float)
        rows.append(
            {
                "variant": variant,
                "setting": setting,
                "mean": float(counted.mean()) if len(counted) else math.nan,
                "std": float(counted.std(ddof=1)) if len(counted) > 1 else math.nan,
                "n": len(counted),
                "runs": len(group),
            }
        )
    summary = pd.DataFrame(rows, columns=["variant", "setting", "mean", "std", "n", "runs"])
    column_best = summary.groupby("setting", sort=False)["mean"].transform("max")
    summary["best"] = summary["mean"].notna() & (summary["mean"] == column_best)
    return summary


def format_cell(mean: float, std: float, n: int, runs: int, percent: bool = True) -> str:
    if math.isnan(mean):
        return f"– (0/{runs})"
    scale = 100.0 if percent else 1.0
    text = f"{mean * scale:.2f}" + (f" ± {std * scale:.2f}" if not math.isnan(std) else "")
    return text + (f" ({n}/{runs})" if n < runs else "")


def wide(summary: pd.DataFrame, best_marker: tuple[str, str] = ("**", "**"), percent: bool = True) -> pd.DataFrame:
    """Variants down, settings across, formatted cells; the best cell of each column wrapped in `best_marker`."""
    cells = summary.apply(
        lambda r: (
            (best_marker[0] if r["best"] else "")
            + format_cell(r["mean"], r["std"], int(r["n"]), int(r["runs"]), percent)
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


def to_markdown(summary: pd.DataFrame, metric: str = "test_acc", seeds: int | None = None) -> str:
    """A GitHub-flavoured Markdown table plus one line saying what the cells are."""
    table = wide(summary)
    header = ["variant", *table.columns]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(["---"] + [":---:"] * len(table.columns)) + "|"]
    for variant, row in table.iterrows():
        lines.append("| " + " | ".join([str(variant), *(str(v) for v in row)]) + " |")
    over = f"{seeds} seeds" if seeds else "seeds"
    lines.append("")
    lines.append(
        f"Cells: final-round {metric} in %, mean ± sample std (ddof=1) over {over}; **bold** = best in its column; "
        "(n/runs) = only n runs finished (diverged or failed runs are not averaged in)."
    )
    return "\n".join(lines) + "\n"


def to_csv(summary: pd.DataFrame) -> str:
    """The same wide table as CSV; the best cell of each column ends in ' *'."""
    return wide(summary, best_marker=("", " *")).to_csv()


def to_html(summary: pd.DataFrame) -> str:
    """The same wide table as an HTML table (the dashboard's), the best cell of each column bold."""
    # the cells are digits, '±', '–' and '(n/runs)': nothing in them to escape
    table = wide(summary, best_marker=("<strong>", "</strong>"))
    head = "".join(f"<th>{html.escape(str(s))}</th>" for s in table.columns)
    body = "".join(
        f"<tr><th scope='row'>{html.escape(str(variant))}</th>"
        + "".join(f"<td>{'–' if pd.isna(cell) else cell}</td>" for cell in row)
        + "</tr>"
        for variant, row in table.iterrows()
    )
    return f"<table class='ablation'><thead><tr><th>variant</th>{head}</tr></thead><tbody>{body}</tbody></table>"
