"""The gradient-norm diagnostic (diagnostics.gradient_norms) of an ablation, as tables: how strong each loss term's
pull is next to cross-entropy's, per variant and setting, and round by round.

The runs log `grad_norm_<part>` (norm of the gradient of cross-entropy, of each weighted term, of their sum) and
`grad_cos_<term>` (the term's cosine with cross-entropy's gradient) on the rounds that run the costly diagnostics.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pandas as pd

from raytune_fl.metrics import GRAD_COS_PREFIX, GRAD_NORM_CE, GRAD_NORM_PREFIX, GRAD_NORM_TOTAL, ROUND

PREFIXES = (GRAD_NORM_PREFIX, GRAD_COS_PREFIX)
# the order columns are shown in: the sum, cross-entropy, then the terms as named by the methods
FIRST = (GRAD_NORM_TOTAL, GRAD_NORM_CE)


def histories(rounds_of: Callable[[str], list[dict[str, Any]]], runs: pd.DataFrame) -> pd.DataFrame:
    """One row per (run, probed round) with every gradient metric the run logged. `runs`: ablation results (run_id,
    variant, setting, seed and, where present, partition_seed); `rounds_of(run_id)`: the run's gradient metrics as
    rows {round, metric: value} (tracking.store.prefixed_rounds). Empty when no run logged any."""
    keys = [c for c in ("variant", "setting", "seed", "partition_seed") if c in runs.columns]
    rows = [
        {"run_id": run["run_id"], **{k: run[k] for k in keys}, **logged}
        for run in runs.to_dict("records")
        for logged in rounds_of(run["run_id"])
    ]
    return pd.DataFrame(rows)


def terms(table: pd.DataFrame) -> list[str]:
    """The loss terms the runs measured, by name (`grad_norm_variance` -> variance)."""
    measured = [c for c in table.columns if c.startswith(GRAD_NORM_PREFIX) and c not in FIRST]
    return sorted(c.removeprefix(GRAD_NORM_PREFIX) for c in measured)


def by_term(table: pd.DataFrame, setting: str) -> pd.DataFrame:
    """One row per (variant, term) in `setting`, means over the runs and probed rounds: the weighted term's
    gradient norm, cross-entropy's, their ratio and cosine; a variant without terms gets one row, term '–'."""
    rows = table[table["setting"] == setting]
    out = []
    for variant, runs in rows.groupby("variant", sort=False):
        ce = runs[GRAD_NORM_CE].mean()
        measured = [t for t in terms(runs) if runs[GRAD_NORM_PREFIX + t].notna().any()]
        for term in measured or ["–"]:
            norm = runs[GRAD_NORM_PREFIX + term].mean() if measured else math.nan
            cosine = runs[GRAD_COS_PREFIX + term].mean() if measured else math.nan
            out.append(
                {"variant": variant, "term": term, "term_norm": norm, "ce_norm": ce, "ratio": norm / ce, "cos": cosine}
            )
    return pd.DataFrame(out, columns=["variant", "term", "term_norm", "ce_norm", "ratio", "cos"])


def ratio_by_round(table: pd.DataFrame, setting: str) -> pd.DataFrame:
    """One row per (variant, term) with loss terms in `setting`, one column per probed round: the weighted term's
    gradient norm over cross-entropy's, averaged over the runs (the ratio is taken per run and round first)."""
    rows = table[table["setting"] == setting]
    out = []
    for variant, runs in rows.groupby("variant", sort=False):
        for term in (t for t in terms(runs) if runs[GRAD_NORM_PREFIX + t].notna().any()):
            ratio = (runs[GRAD_NORM_PREFIX + term] / runs[GRAD_NORM_CE]).groupby(runs[ROUND]).mean()
            row: dict[str | int, Any] = {"variant": variant, "term": term}
            row.update({int(r): v for r, v in ratio.items()})  # one column per round
            out.append(row)
    return pd.DataFrame(out)


def _number(value: float) -> str:
    return "–" if math.isnan(value) else f"{value:.3g}"


def term_markdown(frame: pd.DataFrame) -> str:
    """by_term's frame as a markdown table."""
    lines = [
        "| variant | term | ‖weight · ∇ term‖ | ‖∇ cross-entropy‖ | ratio | cos(∇ term, ∇ cross-entropy) |",
        "|---|---|:---:|:---:|:---:|:---:|",
    ]
    for row in frame.itertuples(index=False):
        numbers = " | ".join(_number(float(v)) for v in (row.term_norm, row.ce_norm, row.ratio, row.cos))
        lines.append(f"| {row.variant} | {row.term} | {numbers} |")
    return "\n".join(lines) + "\n"


def round_markdown(frame: pd.DataFrame) -> str:
    """ratio_by_round's frame as a markdown table."""
    rounds = [c for c in frame.columns if c not in ("variant", "term")]
    lines = [
        "| variant | term | " + " | ".join(f"round {r}" for r in rounds) + " |",
        "|---|---|" + ":---:|" * len(rounds),
    ]
    for _, row in frame.iterrows():
        cells = " | ".join(_number(float(row[r])) for r in rounds)
        lines.append(f"| {row['variant']} | {row['term']} | {cells} |")
    return "\n".join(lines) + "\n"
