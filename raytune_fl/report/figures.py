"""The dashboard's plotly figures and the data transforms behind them (tested on hand-made frames).

Nothing here reads MLflow or writes HTML (page.py does): every function takes DataFrames or plain values and
returns a DataFrame, a list or a figure.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from raytune_fl.ablation.table import MIN_RUNS_FOR_INTERVAL, mean_interval
from raytune_fl.metrics import (
    CLIENT_ACC_MEAN,
    CLIENT_ACC_STD,
    CLIENT_ACC_WORST,
    DECOMPOSITION_S,
    ELAPSED_S,
    ROUND,
    ROUND_TIME_S,
    SETUP_S,
)

PALETTE = ("#636EFA", "#EF553B", "#00CC96", "#AB63FA", "#FFA15A", "#19D3F3", "#FF6692", "#B6E880", "#FF97FF")
TEMPLATE = "plotly_white"
BAND = "band = min..max over runs"  # said on every curve figure, so nobody reads it as a confidence interval
BARS = "bars = 95 % t-interval of the mean"  # the error bars: the mean's uncertainty, not the runs' range
ELAPSED_TITLE = "seconds since the trial started (setup included)"


# ---------------------------------------------------------------- transforms


def elapsed_seconds(rounds: pd.DataFrame) -> pd.Series:
    """Wall-clock seconds at the end of each round: setup_s + cumulative (round_time_s + decomposition_s).

    `rounds` is a round_metrics table; setup_s is logged in round 1 only and decomposition_s only in the rounds
    that ran FedLD's decomposition (it is timed apart from round_time_s), so missing values count as 0.
    Returned in the frame's round order (sorted), indexed by round.
    """
    ordered = rounds.sort_values(ROUND)
    zeros = pd.Series(0.0, index=ordered.index)
    per_round = ordered.get(ROUND_TIME_S, zeros).fillna(0.0) + ordered.get(DECOMPOSITION_S, zeros).fillna(0.0)
    setup = float(ordered.get(SETUP_S, zeros).fillna(0.0).sum())
    return pd.Series((setup + per_round.cumsum()).to_numpy(), index=ordered[ROUND].to_numpy(), name=ELAPSED_S)


def band(curves: pd.DataFrame, y: str, x: str = ROUND) -> pd.DataFrame:
    """Per round: mean of `x` and mean, min and max of `y` over the runs that reached it (n of them), and the 95 %
    t-interval of that mean (ci_lo, ci_hi; NaN where under 2 runs reached the round).

    `curves` is long: one row per (run, round). With x = ROUND the x column is the round itself; with another x
    (elapsed seconds, which differs per run) it is that x averaged over the runs at the round.
    """
    rows = curves.dropna(subset=[y])
    grouped = rows.groupby(ROUND, sort=True)
    intervals = {r: mean_interval(values) for r, values in grouped[y]}
    table = pd.DataFrame(
        {
            "x": grouped[x].mean() if x != ROUND else grouped[ROUND].first().astype(float),
            "mean": grouped[y].mean(),
            "lo": grouped[y].min(),
            "hi": grouped[y].max(),
            "n": grouped[y].size(),
            "ci_lo": pd.Series({r: low for r, (low, _) in intervals.items()}, dtype=float),
            "ci_hi": pd.Series({r: high for r, (_, high) in intervals.items()}, dtype=float),
        }
    )
    return table.rename_axis(ROUND).reset_index()


def error_bars(mean: Sequence[float], low: Sequence[float], high: Sequence[float]) -> dict[str, object]:
    """plotly's asymmetric `error_y` from an interval's ends (NaN ends: no bar at that point)."""
    centre, lower, upper = (pd.Series(list(v), dtype=float) for v in (mean, low, high))
    return {
        "type": "data",
        "symmetric": False,
        "array": list(upper - centre),
        "arrayminus": list(centre - lower),
        "thickness": 1,
        "width": 3,
    }


def best_so_far(values: Sequence[float], maximize: bool = True) -> list[float]:
    """Running best of a trial sequence; NaN (a trial without a value) keeps the previous best."""
    best, out = math.nan, []
    for value in values:
        if not math.isnan(value) and (math.isnan(best) or (value > best if maximize else value < best)):
            best = value
        out.append(best)
    return out


def last_round(table: pd.DataFrame) -> pd.DataFrame:
    """The rows of a long per-round table (spectrum, client accuracy) that belong to its last round."""
    return table[table[ROUND] == table[ROUND].max()]


def variant_colors(variants: Sequence[str]) -> dict[str, str]:
    """One colour per variant, the same in every figure."""
    return {v: PALETTE[i % len(PALETTE)] for i, v in enumerate(variants)}


def _integer_ticks(values: Sequence[float] | pd.Series) -> dict[str, object]:
    """Axis settings for integer x (rounds, trials, indices): a tick per value when there are few, never 1.5."""
    top = max((float(v) for v in values), default=0.0)
    return {"tickmode": "linear", "dtick": 1} if top <= 20 else {"tickformat": "d"}


def _band_trace(x: Sequence[float], lo: Sequence[float], hi: Sequence[float], color: str, alpha: float, group: str):
    """A filled band between `lo` and `hi` (no legend entry: it belongs to its line's legend group)."""
    x = list(x)
    return go.Scatter(
        x=x + x[::-1],
        y=list(hi) + list(lo)[::-1],
        mode="lines",
        fill="toself",
        fillcolor=_rgba(color, alpha),
        line={"width": 0},
        hoverinfo="skip",
        legendgroup=group,
        showlegend=False,
    )


def _rgba(hex_color: str, alpha: float) -> str:
    r, g, b = (int(hex_color[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r},{g},{b},{alpha})"


# ---------------------------------------------------------------- figures


def curve_figure(
    curves: pd.DataFrame,
    y: str,
    x: str,
    x_title: str,
    title: str,
    colors: dict[str, str],
    intervals: bool = True,
) -> go.Figure:
    """Mean line and min..max band per variant, one subplot per setting; with `intervals`, error bars of the 95 %
    t-interval of the mean at each round (for runs that differ in seed only: over tune trials, which differ in
    hyperparameters, such an interval means nothing).

    `curves`: long, columns variant, setting, run_id, round, `x`, `y`.
    """
    settings = list(dict.fromkeys(curves["setting"]))
    cols = min(len(settings), 3)
    rows = math.ceil(len(settings) / cols)
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=settings, shared_yaxes=True, horizontal_spacing=0.05)
    for k, setting in enumerate(settings):
        row, col = k // cols + 1, k % cols + 1
        for variant, group in curves[curves["setting"] == setting].groupby("variant", sort=False):
            stats = band(group, y, x)
            color = colors.get(variant, PALETTE[0])
            runs = group["run_id"].nunique()
            bars = {**error_bars(stats["mean"], stats["ci_lo"], stats["ci_hi"]), "color": color} if intervals else None
            interval = "<br>95 % interval %{customdata[3]:.4f}..%{customdata[4]:.4f}" if intervals else ""
            fig.add_trace(_band_trace(stats["x"], stats["lo"], stats["hi"], color, 0.18, variant), row=row, col=col)
            fig.add_trace(
                go.Scatter(
                    x=stats["x"],
                    y=stats["mean"],
                    mode="lines+markers",
                    name=variant,
                    line={"color": color},
                    error_y=bars,
                    legendgroup=variant,
                    showlegend=k == 0,
                    customdata=stats[["n", "lo", "hi", "ci_lo", "ci_hi"]].to_numpy(),
                    hovertemplate=f"{variant} ({runs} runs)<br>%{{x:.3g}}: mean %{{y:.4f}}{interval}"
                    "<br>min..max %{customdata[1]:.4f}..%{customdata[2]:.4f} (n=%{customdata[0]})<extra></extra>",
                ),
                row=row,
                col=col,
            )
    fig.update_xaxes(title_text=x_title, **(_integer_ticks(curves[ROUND]) if x == ROUND else {}))
    fig.update_yaxes(title_text=f"{y} (mean; {BAND}" + (f"; {BARS})" if intervals else ")"), col=1)
    fig.update_layout(template=TEMPLATE, title=title, height=380 * rows, margin={"t": 80})
    return fig


def final_accuracy_figure(summary: pd.DataFrame, colors: dict[str, str], title: str) -> go.Figure:
    """The ablation table as points: per setting (x) a point per variant at its mean final accuracy in %, with
    error bars of the 95 % t-interval of the mean (summarise's ci_low, ci_high, clipped to [0, 1]). No bar where
    fewer than `MIN_RUNS_FOR_INTERVAL` runs were counted: from 2 runs the t-interval is ±9 sample standard
    deviations (t_{0.975,1} = 12.7), so wide it shows nothing; the point's hover says so instead.

    `summary`: table.summarise's rows (variant, setting, mean, n, runs, ci_low, ci_high). Only the summary comes
    in, not the runs: a cell too small for an interval is drawn as its mean alone.
    """
    fig = go.Figure()
    for variant, rows in summary.groupby("variant", sort=False):
        enough = rows["n"].astype(int) >= MIN_RUNS_FOR_INTERVAL
        mean = rows["mean"].astype(float) * 100
        low, high = (rows[c].astype(float).where(enough) * 100 for c in ("ci_low", "ci_high"))
        interval = [
            f"95 % interval {lo:.2f}..{hi:.2f}" if ok else f"n = {n}: too few runs for an interval"
            for ok, lo, hi, n in zip(enough, low, high, rows["n"].astype(int))
        ]
        fig.add_trace(
            go.Scatter(
                x=list(rows["setting"]),
                y=list(mean),
                mode="markers",
                name=variant,
                marker={"color": colors.get(variant, PALETTE[0]), "size": 10},
                error_y={**error_bars(mean, low, high), "color": colors.get(variant, PALETTE[0]), "width": 6},
                customdata=[[text, n, runs] for text, n, runs in zip(interval, rows["n"], rows["runs"])],
                hovertemplate=f"{html.escape(str(variant))}<br>%{{x}}: mean %{{y:.2f}} %"
                "<br>%{customdata[0]} (%{customdata[1]}/%{customdata[2]} runs)<extra></extra>",
            )
        )
    fig.update_layout(
        template=TEMPLATE,
        title=title,
        scattermode="group",  # the variants of a setting side by side, not on top of each other
        xaxis_title="setting",
        yaxis_title=f"final-round test accuracy (%; mean, {BARS}; none from under {MIN_RUNS_FOR_INTERVAL} runs)",
        height=420,
    )
    return fig


def history_figure(trials: pd.DataFrame, metric: str, maximize: bool, variant: str) -> go.Figure:
    """Trial index vs value (coloured by trial status) and the best-so-far line. `trials`: index, value, status,
    name."""
    fig = go.Figure()
    for status, group in trials.groupby("status", sort=False):
        fig.add_trace(
            go.Scatter(
                x=group["index"],
                y=group["value"],
                mode="markers",
                name=status,
                text=group["name"],
                marker={"size": 9},
                hovertemplate="%{text}<br>trial %{x}: %{y:.4f}<extra>" + html.escape(str(status)) + "</extra>",
            )
        )
    fig.add_trace(
        go.Scatter(
            x=trials["index"],
            y=best_so_far(list(trials["value"]), maximize),
            mode="lines",
            line={"shape": "hv", "color": "black"},
            name="best so far",
        )
    )
    fig.update_layout(
        template=TEMPLATE,
        title=f"{variant}: optimisation history (final {metric} per trial, trials in start order)",
        xaxis={"title": "trial (order of start)", **_integer_ticks(trials["index"])},
        yaxis_title=f"final {metric}",
        height=360,
    )
    return fig


def pareto_figure(trials: pd.DataFrame, x: str, y: str, variant: str) -> go.Figure:
    """Each trial's final value of two objectives; the Pareto front's trials joined in order of `x`. `trials`: x, y
    (the objectives' names as columns), name, front (bool)."""
    fig = go.Figure()
    front = trials[trials["front"]].sort_values(x)
    for label, group, marker in (
        ("other trials", trials[~trials["front"]], {"size": 8, "color": "#bbbbbb"}),
        ("Pareto front", front, {"size": 11, "color": "#d62728"}),
    ):
        fig.add_trace(
            go.Scatter(
                x=group[x],
                y=group[y],
                mode="markers+lines" if label == "Pareto front" else "markers",
                line={"shape": "linear", "dash": "dot"},
                name=label,
                text=group["name"],
                marker=marker,
                hovertemplate=f"%{{text}}<br>{html.escape(x)} %{{x:.4f}}<br>{html.escape(y)} %{{y:.4f}}<extra></extra>",
            )
        )
    fig.update_layout(
        template=TEMPLATE,
        title=f"{variant}: final {x} against {y} per trial",
        xaxis_title=f"final {x}",
        yaxis_title=f"final {y}",
        height=380,
    )
    return fig


def importance_figure(importances: dict[str, float], variant: str, evaluator: str) -> go.Figure:
    names = list(importances)[::-1]  # most important on top
    fig = go.Figure(go.Bar(x=[importances[n] for n in names], y=names, orientation="h"))
    fig.update_layout(
        template=TEMPLATE,
        title=f"{variant}: hyperparameter importances ({evaluator})",
        xaxis_title="importance (sums to 1)",
        height=max(240, 60 * len(names) + 140),
    )
    return fig


def round_time_figure(times: pd.DataFrame) -> go.Figure:
    """Box per method over every logged round. `times`: method, run_id, round_time_s."""
    fig = go.Figure()
    for method, group in times.groupby("method", sort=True):
        fig.add_trace(
            go.Box(
                y=group[ROUND_TIME_S],
                name=f"{method} ({group['run_id'].nunique()} runs)",
                boxpoints="all" if len(group) <= 200 else "outliers",
                jitter=0.4,
                pointpos=0,
            )
        )
    fig.update_layout(
        template=TEMPLATE,
        title="Wall time per round by method (every logged round of every tune and ablation run)",
        yaxis_title="round_time_s (seconds)",
        showlegend=False,
        height=420,
    )
    return fig


def spectrum_figure(spectra: dict[str, pd.DataFrame], colors: dict[str, str], variants: dict[str, str]) -> go.Figure:
    """Last round's singular values per variant, log y. `spectra`: label -> (round, index, singular_value);
    `variants`: label -> variant (for the colour)."""
    fig = go.Figure()
    for label, table in spectra.items():
        last = last_round(table).sort_values("index")
        fig.add_trace(
            go.Scatter(
                x=last["index"],
                y=last["singular_value"],
                mode="lines+markers",
                name=f"{label} (round {int(last[ROUND].iloc[0])})",
                line={"color": colors.get(variants[label], PALETTE[0])},
            )
        )
    fig.update_layout(
        template=TEMPLATE,
        title="Classifier weight: singular values at the last round",
        xaxis={
            "title": "index (descending singular value)",
            **_integer_ticks([i for t in spectra.values() for i in t["index"]]),
        },
        yaxis_title="singular value (log scale)",
        yaxis_type="log",
        height=420,
    )
    return fig


def client_box_figure(accuracy: pd.DataFrame, colors: dict[str, str], title: str) -> go.Figure:
    """Box and points per variant. `accuracy`: variant, label (run), client, accuracy (the last round's)."""
    fig = go.Figure()
    for variant, group in accuracy.groupby("variant", sort=False):
        fig.add_trace(
            go.Box(
                y=group["accuracy"],
                name=variant,
                boxpoints="all",
                jitter=0.5,
                pointpos=0,
                text=[f"{label}, client {c}" for label, c in zip(group["label"], group["client"])],
                marker={"color": colors.get(variant, PALETTE[0])},
            )
        )
    fig.update_layout(template=TEMPLATE, title=title, yaxis_title="client accuracy", showlegend=False, height=420)
    return fig


def client_curve_figure(rounds: pd.DataFrame, colors: dict[str, str], title: str) -> go.Figure:
    """client_acc_mean (solid, ± client_acc_std band) and client_acc_worst (dashed) per round.

    `rounds`: variant, round, client_acc_mean, client_acc_worst, client_acc_std.
    """
    fig = go.Figure()
    for variant, group in rounds.groupby("variant", sort=False):
        group = group.sort_values(ROUND)
        color = colors.get(variant, PALETTE[0])
        std = group[CLIENT_ACC_STD].fillna(0.0) if CLIENT_ACC_STD in group else 0.0
        x = list(group[ROUND])
        mean = group[CLIENT_ACC_MEAN]
        fig.add_trace(_band_trace(x, mean - std, mean + std, color, 0.15, variant))
        fig.add_trace(
            go.Scatter(
                x=x, y=group[CLIENT_ACC_MEAN], name=f"{variant} mean", line={"color": color}, legendgroup=variant
            )
        )
        fig.add_trace(
            go.Scatter(
                x=x,
                y=group[CLIENT_ACC_WORST],
                name=f"{variant} worst client",
                line={"color": color, "dash": "dash"},
                legendgroup=variant,
            )
        )
    fig.update_layout(
        template=TEMPLATE,
        title=title,
        xaxis={"title": ROUND, **_integer_ticks(rounds[ROUND])},
        yaxis_title="client accuracy (mean ± std over clients; dashed: worst)",
        height=420,
    )
    return fig


def partition_figure(table: pd.DataFrame, title: str) -> go.Figure:
    """Clients × classes heat map of a partition table (client, num_samples, domain, one column per class)."""
    classes = [c for c in table.columns if c not in ("client", "num_samples", "domain")]
    labels = []
    for _, row in table.iterrows():
        label = f"client {row['client']} (n={row['num_samples']})"
        if isinstance(row.get("domain"), str):
            label += f" [{row['domain']}]"
        labels.append(label)
    z = table[classes].to_numpy(dtype=float)
    annotate = z.shape[0] <= 20 and z.shape[1] <= 20  # numbers stay legible on small matrices only
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=classes,
            y=labels,
            colorscale="Blues",
            colorbar={"title": {"text": "samples"}},
            text=z.astype(int) if annotate else None,
            texttemplate="%{text}" if annotate else None,
            hovertemplate="%{y}<br>%{x}: %{z:.0f} samples<extra></extra>",
        )
    )
    fig.update_layout(
        template=TEMPLATE,
        title=title,
        xaxis_title="class",
        yaxis={"autorange": "reversed", "title": "client"},
        height=min(900, max(300, 28 * len(labels) + 160)),
    )
    return fig


def log_scaled(values: Sequence[float]) -> bool:
    """Whether an axis reads better in log10: positive values spanning more than a factor of 20 (log-spaced grids)."""
    return bool(len(values)) and min(values) > 0 and max(values) / min(values) > 20


def landscape_figure(grid: pd.DataFrame, trials: pd.DataFrame, x: str, y: str, metric: str) -> go.Figure:
    """A 2-D search landscape: `grid` (x, y, value = mean over seeds) as a heat map, with `trials` (x, y, value,
    study, finished) overlaid as markers, one colour per study; ASHA-stopped trials hollow. Log-spread axes in log10."""
    fx = (lambda v: math.log10(v)) if log_scaled(list(grid[x])) else (lambda v: v)
    fy = (lambda v: math.log10(v)) if log_scaled(list(grid[y])) else (lambda v: v)
    xs, ys = sorted(grid[x].unique()), sorted(grid[y].unique())
    table = grid.pivot_table(index=y, columns=x, values="value", aggfunc="mean").reindex(index=ys, columns=xs)
    fig = go.Figure(
        go.Heatmap(
            z=table.to_numpy(dtype=float),
            x=[fx(v) for v in xs],
            y=[fy(v) for v in ys],
            colorscale="Viridis",
            colorbar={"title": {"text": f"grid {metric}"}},
            customdata=[[[vx, vy] for vx in xs] for vy in ys],
            hovertemplate=f"{x}=%{{customdata[0]:.4g}}, {y}=%{{customdata[1]:.4g}}<br>{metric} %{{z:.4f}}"
            "<extra>grid</extra>",
        )
    )
    studies = list(dict.fromkeys(trials["study"])) if len(trials) else []
    colors = variant_colors(studies)
    for study in studies:
        mine = trials[trials["study"] == study]
        fig.add_trace(
            go.Scatter(
                x=[fx(v) for v in mine[x]],
                y=[fy(v) for v in mine[y]],
                mode="markers",
                name=study,
                marker={
                    "color": colors[study],
                    "size": 9,
                    "symbol": ["circle" if done else "circle-open" for done in mine["finished"]],
                    "line": {"color": "white", "width": 1},
                },
                customdata=mine[[x, y, "value"]].to_numpy(),
                hovertemplate=f"{x}=%{{customdata[0]:.4g}}, {y}=%{{customdata[1]:.4g}}<br>{metric} "
                "%{customdata[2]:.4f}<extra>%{fullData.name}</extra>",
            )
        )
    log_x, log_y = log_scaled(list(grid[x])), log_scaled(list(grid[y]))
    fig.update_layout(
        template=TEMPLATE,
        title=f"Search landscape: grid mean {metric} over seeds, with the studies' trials (hollow: stopped early)",
        xaxis_title=f"log10 {x}" if log_x else x,
        yaxis_title=f"log10 {y}" if log_y else y,
        legend={"orientation": "h", "y": -0.2},
        height=560,
    )
    return fig
