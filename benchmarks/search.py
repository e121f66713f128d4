"""Search efficiency: TPE with ASHA, TPE alone and random search with ASHA against a grid, on the benchmark workload.

The variant is univarfl.yaml's `full` (UniVarFL, mu and lambda searched over that file's ranges) on the workload
with a 10 % validation split (tuning selects on validation), `--rounds` rounds per run.

- Ground truth: a grid of `--grid` x `--grid` points, log-spaced over the ranges (linear for a uniform range),
  each trained under `--grid-seeds` training seeds (the Federation on Ray actors, as a trial runs). Its best point
  is the one with the best mean validation accuracy over seeds; the seed noise is the standard deviation
  between seeds (at the best point, and the median over all points).
- Strategies: each a real study through `scripts/tune.py` (Optuna + Ray Tune + MLflow), `--trials` trials,
  repeated over `--search-seeds` sampler seeds (variants `<strategy>-1`, `-2`, ...: each variant's sampler seed
  comes from the variant name). A study's best is what it selected (trials that ran every round first).
- Re-scored: the max over a study's noisy trials is biased upwards, so each selected configuration is trained
  again under the grid's seeds and compared on the grid's terms (mean over the same seeds).
- Cost: client-epochs (participating clients x local epochs, summed over every round every trial ran; ASHA's
  stopped trials count what they ran) and wall time, as shares of the grid's.

Everything lands in one MLflow experiment (`bench-search`): the studies as tune runs, the grid as runs of stage
`grid`, so `dashboards/build.py` draws the landscape (the grid's heat map with every study's trials on it).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from benchmarks.proc import measure
from benchmarks.workload import WORKLOAD

REPO = Path(__file__).resolve().parents[1]
TUNE_SCRIPT = REPO / "scripts" / "tune.py"
EXPERIMENT = "bench-search"
VARIANT = "full"  # univarfl.yaml's
STRATEGIES: dict[str, dict[str, Any]] = {  # the tune settings each strategy runs with; {}: config's defaults
    "tpe_asha": {"sampler": "tpe", "scheduler": {"asha": {}}},
    "tpe": {"sampler": "tpe", "scheduler": {"asha": None}},
    "random_asha": {"sampler": "random", "scheduler": {"asha": {}}},
    "tpe_asha_g4": {"sampler": "tpe", "scheduler": {"asha": {"grace_period": 4}}},  # the default until the figures
}
DEFAULT_STRATEGIES = ("tpe_asha", "tpe", "random_asha")


def variant_ranges() -> tuple[str, dict[str, dict[str, list[float]]]]:
    """univarfl.yaml's `full`: its method and its search ranges."""
    space = yaml.safe_load((REPO / "search_spaces" / "univarfl.yaml").read_text())
    variant = space["variants"][VARIANT]
    return variant["method"], variant["search"]


def axis(distribution: dict[str, list[float]], points: int) -> list[float]:
    """`points` values over a YAML range: log-spaced for loguniform, evenly spaced for uniform."""
    (kind, (low, high)), *_ = distribution.items()
    if kind == "loguniform":
        return [float(v) for v in np.geomspace(low, high, points)]
    if kind == "uniform":
        return [float(v) for v in np.linspace(low, high, points)]
    raise ValueError(f"a grid axis needs a uniform or loguniform range, got {kind}")


def base_config(rounds: int, actors: int) -> dict[str, Any]:
    base = {**WORKLOAD, "rounds": rounds, "resources": {"actors": actors, "cpus_per_actor": 1}}
    base["partition"] = {**WORKLOAD["partition"], "val_fraction": 0.1}
    return base


def strategy_space(strategy: str, search: dict, method: str, base: dict, trials: int, seeds: int) -> dict[str, Any]:
    variants = {f"{strategy}-{k}": {"method": method, "search": search} for k in range(1, seeds + 1)}
    tune = {"num_samples": trials, "max_concurrent": 1, "metric": "val_acc", "seed": 0, **STRATEGIES[strategy]}
    return {"name": EXPERIMENT, "base": base, "variants": variants, "tune": tune}


# ---------------------------------------------------------------- the runs


def train(experiment, method: str, params: dict[str, Any], seed: int, pool_factory) -> tuple[list[dict], float]:
    """One Federation run under one seed: its round rows and its wall time."""
    from raytune_fl.engine.federation import Federation

    rows: list[dict[str, Any]] = []
    started = time.perf_counter()
    Federation(experiment.model_copy(update={"seed": seed}), method, params, pool_factory=pool_factory).run(rows.append)
    return rows, time.perf_counter() - started


def run_strategies(
    args, method: str, search: dict, base: dict, workdir: Path, scratch: Path, uri: str
) -> dict[str, float]:
    """Each strategy's studies through scripts/tune.py; returns each strategy's process wall time."""
    walls = {}
    for strategy in args.strategies:
        path = workdir / f"{strategy}.yaml"
        path.write_text(yaml.safe_dump(strategy_space(strategy, search, method, base, args.trials, args.search_seeds)))
        command = [sys.executable, str(TUNE_SCRIPT), "--space", str(path), "--mlflow-uri", uri, "--no-models"]
        measured = measure([*command, "--storage", str(scratch / "ray_results")], interval_s=2.0)
        if measured.returncode != 0:
            raise RuntimeError(f"tune.py ({strategy}) exited with {measured.returncode}:\n{measured.stderr[-3000:]}")
        walls[strategy] = measured.wall_s
        print(f"{strategy}: {args.search_seeds} studies x {args.trials} trials in {measured.wall_s:.0f} s", flush=True)
    return walls


def metric_sum(client, run_id: str, key: str) -> float:
    """The sum of a metric's whole history on one run (e.g. a trial's clients per round: its client-rounds)."""
    from raytune_fl.tracking.store import metric_history

    return float(sum(m.value for m in metric_history(client, run_id, key)))


def study_results(
    uri: str, strategies: Sequence[str], names: Sequence[str], local_epochs: int, since_ms: int = 0
) -> list[dict[str, Any]]:
    """Per study (variant) started at `since_ms` or later: what it selected, and the client-epochs and time its
    trials used."""
    from raytune_fl.tracking.schema import TAG_BEST_PREFIX, TAG_PARENT_RUN, TAG_STAGE, TAG_VARIANT
    from raytune_fl.tracking.store import experiment_id, open_client, search_all

    client = open_client(uri)
    experiment = experiment_id(client, EXPERIMENT)
    runs = search_all(client, experiment, f"tags.{TAG_STAGE} = 'tune'")
    out = []
    for parent in [r for r in runs if TAG_PARENT_RUN not in r.data.tags and r.info.start_time >= since_ms]:
        variant = parent.data.tags.get(TAG_VARIANT, "")
        strategy = variant.rsplit("-", 1)[0]
        if strategy not in strategies:
            continue
        children = [r for r in runs if r.data.tags.get(TAG_PARENT_RUN) == parent.info.run_id]
        client_epochs = train_s = 0.0
        for child in children:
            client_epochs += metric_sum(client, child.info.run_id, "clients") * local_epochs
            train_s += metric_sum(client, child.info.run_id, "round_time_s")
        best = {
            k.removeprefix(TAG_BEST_PREFIX): v for k, v in parent.data.tags.items() if k.startswith(TAG_BEST_PREFIX)
        }
        out.append(
            {
                "strategy": strategy,
                "study": variant,
                "best_val_acc": parent.data.metrics.get("best_val_acc", float("nan")),
                "best_test_acc": parent.data.metrics.get("best_test_acc", float("nan")),
                "best_params": {k: float(best[k]) for k in names if k in best},
                "trials": len(children),
                "client_epochs": client_epochs,
                "train_s": train_s,
                "study_s": (parent.info.end_time - parent.info.start_time) / 1000 if parent.info.end_time else 0.0,
            }
        )
    return sorted(out, key=lambda r: r["study"])


def summarise(grid: list[dict[str, Any]], studies: list[dict[str, Any]], names: Sequence[str]) -> dict[str, Any]:
    """The grid's best point and seed noise, and per strategy: found, re-scored, gaps and cost shares."""
    points: dict[tuple, list[dict]] = {}
    for row in grid:
        points.setdefault(tuple(row["params"][k] for k in names), []).append(row)
    means = {p: statistics.mean(r["val_acc"] for r in rows) for p, rows in points.items()}
    best = max(means, key=means.get)
    spread = [statistics.pstdev([r["val_acc"] for r in rows]) for rows in points.values() if len(rows) > 1]
    grid_epochs = sum(r["client_epochs"] for r in grid)
    grid_wall = sum(r["wall_s"] for r in grid)
    summary = {
        "grid": {
            "points": len(points),
            "seeds": max(len(rows) for rows in points.values()),
            "best_params": dict(zip(names, best)),
            "best_val_acc": means[best],
            "best_test_acc": statistics.mean(r["test_acc"] for r in points[best]),
            "seed_sd_at_best": statistics.pstdev([r["val_acc"] for r in points[best]]),
            "seed_sd_median": statistics.median(spread) if spread else float("nan"),
            "client_epochs": grid_epochs,
            "wall_s": grid_wall,
        },
        "strategies": {},
    }
    for strategy in dict.fromkeys(s["strategy"] for s in studies):
        mine = [s for s in studies if s["strategy"] == strategy]
        found = [s["best_val_acc"] for s in mine]
        rescored = [s["rescored_val_acc"] for s in mine if "rescored_val_acc" in s]
        summary["strategies"][strategy] = {
            "studies": len(mine),
            "found_val_acc": statistics.mean(found),
            "found_val_sd": statistics.pstdev(found),
            "found_test_acc": statistics.mean(s["best_test_acc"] for s in mine),
            "gap_found_points": 100 * (means[best] - statistics.mean(found)),
            "rescored_val_acc": statistics.mean(rescored) if rescored else float("nan"),
            "rescored_test_acc": statistics.mean(s["rescored_test_acc"] for s in mine) if rescored else float("nan"),
            "gap_rescored_points": 100 * (means[best] - statistics.mean(rescored)) if rescored else float("nan"),
            "worst_gap_rescored_points": 100 * (means[best] - min(rescored)) if rescored else float("nan"),
            "client_epochs_share": statistics.mean(s["client_epochs"] for s in mine) / grid_epochs,
            "wall_share": statistics.mean(s["study_s"] for s in mine) / grid_wall,
        }
    return summary


def logged_grid(uri: str, names: Sequence[str], local_epochs: int, clients: int) -> list[dict[str, Any]]:
    """The grid runs an earlier run of this benchmark logged in `uri`, as the rows `run` makes (`--reuse-grid`).

    Runs logged before grid runs carried `clients` and `wall_s` count `clients` per round and their round times."""
    from raytune_fl.tracking.schema import STAGE_GRID, TAG_SEED
    from raytune_fl.tracking.store import experiment_id, logged_rounds, open_client, stage_runs

    client = open_client(uri)
    experiment = experiment_id(client, EXPERIMENT)
    rows = []
    for run in stage_runs(client, experiment, STAGE_GRID) if experiment is not None else []:
        rounds = logged_rounds(client, run.info.run_id, ("val_acc", "test_acc", "round_time_s", "clients"))
        wall = run.data.metrics.get("wall_s", sum(r.get("round_time_s", 0.0) for r in rounds))
        rows.append(
            {
                "params": {k: float(run.data.params[k]) for k in names},
                "seed": int(run.data.tags[TAG_SEED]),
                "val_acc": rounds[-1]["val_acc"],
                "test_acc": rounds[-1]["test_acc"],
                "val_curve": [r["val_acc"] for r in rounds],
                "client_epochs": sum(r.get("clients", clients) for r in rounds) * local_epochs,
                "wall_s": wall,
            }
        )
    return sorted(rows, key=lambda r: (tuple(r["params"].values()), r["seed"]))


def rung_fidelity(curves: Sequence[Sequence[float]], reduction_factors: Sequence[float] = (2, 3)) -> list[dict]:
    """What an ASHA rung at round g bets on, read off the grid's runs (each run's val_acc per round).

    Per g before the last round: Spearman's rank correlation between val_acc at g and at the last round (NaN where
    every run has the same value), and per reduction factor rf the share of the runs that end in the top tenth
    which a rung at g would let go on: Ray's rule, a value at or above the (1 - 1/rf) quantile of the rung."""
    import pandas as pd

    table = pd.DataFrame([list(c) for c in curves])
    final = table.iloc[:, -1]
    top = set(final.nlargest(max(1, len(table) // 10)).index)
    rows = []
    for g in range(1, table.shape[1]):
        at_g = table.iloc[:, g - 1]
        row: dict[str, Any] = {"round": g, "spearman": float(at_g.rank().corr(final.rank()))}
        for rf in reduction_factors:
            kept = set(at_g.index[at_g >= np.nanpercentile(at_g, 100 * (1 - 1 / rf))])
            row[f"top_kept_rf{rf:g}"] = len(top & kept) / len(top)
        rows.append(row)
    return rows


def format_fidelity(rows: Sequence[dict[str, Any]]) -> str:
    factors = [k.removeprefix("top_kept_rf") for k in rows[0] if k.startswith("top_kept_rf")]
    lines = [
        "| rung at round | Spearman vs last round | "
        + " | ".join(f"final top tenth kept, rf {f}" for f in factors)
        + " |",
        "|---" * (2 + len(factors)) + "|",
    ]
    for row in rows:
        kept = " | ".join(f"{100 * row[f'top_kept_rf{f}']:.0f} %" for f in factors)
        rho = "n/a (all equal)" if math.isnan(row["spearman"]) else f"{row['spearman']:.2f}"
        lines.append(f"| {row['round']} | {rho} | {kept} |")
    return "\n".join(lines)


def format_summary(summary: dict[str, Any]) -> str:
    g = summary["grid"]
    point = ", ".join(f"{k}={v:.4g}" for k, v in g["best_params"].items())
    lines = [
        f"grid: {g['points']} points x {g['seeds']} seeds: best mean val_acc {g['best_val_acc']:.4f} "
        f"(test {g['best_test_acc']:.4f}) at {point}; seed sd {100 * g['seed_sd_at_best']:.2f} points there, "
        f"median over points {100 * g['seed_sd_median']:.2f}; {g['client_epochs']:.0f} client-epochs, "
        f"{g['wall_s']:.0f} s",
        "",
        "| strategy | studies | best val_acc found (sd) | its test_acc | gap to grid, points | re-scored val_acc "
        "| re-scored gap (worst study) | client-epochs, share of grid | wall, share of grid |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, s in summary["strategies"].items():
        lines.append(
            f"| {name} | {s['studies']} | {s['found_val_acc']:.4f} ({100 * s['found_val_sd']:.2f}) "
            f"| {s['found_test_acc']:.4f} | {s['gap_found_points']:+.2f} | {s['rescored_val_acc']:.4f} "
            f"| {s['gap_rescored_points']:+.2f} ({s['worst_gap_rescored_points']:+.2f}) "
            f"| {100 * s['client_epochs_share']:.1f} % | {100 * s['wall_share']:.1f} % |"
        )
    lines.append("gap = grid's best mean val_acc - the strategy's (positive: the strategy is behind), in points")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grid", type=int, default=5, help="grid points per axis (default %(default)s)")
    parser.add_argument("--grid-seeds", type=int, default=2, help="training seeds per grid point (default %(default)s)")
    parser.add_argument("--trials", type=int, default=16, help="trials per study (default %(default)s)")
    parser.add_argument("--search-seeds", type=int, default=3, help="studies per strategy (default %(default)s)")
    parser.add_argument("--rounds", type=int, default=10, help="rounds per run (default %(default)s)")
    parser.add_argument("--actors", type=int, default=2, help="client actors per run (default %(default)s)")
    parser.add_argument(
        "--strategies", default=",".join(DEFAULT_STRATEGIES), help=f"of {', '.join(STRATEGIES)}; default: %(default)s"
    )
    parser.add_argument(
        "--workdir", default="reports/bench_search", help="the MLflow store and the dashboard (default %(default)s)"
    )
    parser.add_argument(
        "--reuse-grid",
        action="store_true",
        help="measure --strategies against the grid an earlier run logged in --workdir instead of training one",
    )
    parser.add_argument("--json", help="also write the result to this JSON file")
    args = parser.parse_args(argv)
    args.strategies = [s.strip() for s in args.strategies.split(",") if s.strip()]
    unknown = [s for s in args.strategies if s not in STRATEGIES]
    if unknown:
        print(f"error: --strategies: unknown {', '.join(unknown)}; known: {', '.join(STRATEGIES)}", file=sys.stderr)
        return 2
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    if (workdir / "mlflow.db").exists() != args.reuse_grid:
        problem = "already holds an mlflow.db; give another directory" if not args.reuse_grid else "has no mlflow.db"
        print(
            f"error: --workdir: {workdir} {problem} (--reuse-grid: the grid of an earlier run there)", file=sys.stderr
        )
        return 2
    with tempfile.TemporaryDirectory(prefix="bench-search-") as tmp:  # Tune's trial checkpoints: thrown away
        try:
            summary = run(args, workdir, Path(tmp))
        except ValueError as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
    print(format_summary(summary))
    print("\nASHA's bet, read off the grid's runs (what a grace period of g trusts):")
    print(format_fidelity(summary["rung_fidelity"]))
    print(f"dashboard with the landscape: {summary['dashboard']}")
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=1))
    return 0


def run(args, workdir: Path, scratch: Path) -> dict[str, Any]:
    from benchmarks.grid import log_grid_run
    from raytune_fl.config import ExperimentConfig, SearchSpace

    method, search = variant_ranges()
    names = list(search)
    base = base_config(args.rounds, args.actors)
    uri = f"sqlite:///{workdir / 'mlflow.db'}"
    grid = []
    if args.reuse_grid:  # before the studies: a workdir without a grid fails at once
        grid = logged_grid(uri, names, base["local_epochs"], base["partition"]["clients"])
        if not grid:
            raise ValueError(f"--reuse-grid: {uri} holds no grid runs of experiment {EXPERIMENT!r}")
        print(f"grid: {len(grid)} runs read back from {uri}", flush=True)
    started, since_ms = time.perf_counter(), int(time.time() * 1000)  # a reused workdir's earlier studies: not ours
    run_strategies(args, method, search, base, workdir, scratch, uri)  # first: each tune.py starts its own Ray
    studies = study_results(uri, args.strategies, names, base["local_epochs"], since_ms)

    import ray

    from raytune_fl.actors import ray_pool_factory
    from raytune_fl.engine.federation import in_process_pool
    from raytune_fl.runtime.cluster import start_local

    experiment = ExperimentConfig.model_validate(base)
    pool_factory = in_process_pool
    if args.actors > 0:
        start_local()
        pool_factory = ray_pool_factory(experiment.resources)
    axes = [axis(search[name], args.grid) for name in names]
    points = [
        dict(zip(names, map(float, values)))
        for values in np.array(np.meshgrid(*axes, indexing="ij")).reshape(len(names), -1).T
    ]
    for index, params in enumerate(points if not args.reuse_grid else [], 1):
        for seed in range(args.grid_seeds):
            rows, wall = train(experiment, method, params, seed, pool_factory)
            log_grid_run(uri, EXPERIMENT, VARIANT, params, seed, rows, wall_s=wall)
            last = rows[-1]
            grid.append(
                {
                    "params": params,
                    "seed": seed,
                    "val_acc": last["val_acc"],
                    "test_acc": last["test_acc"],
                    "val_curve": [r["val_acc"] for r in rows],
                    "client_epochs": sum(r["clients"] for r in rows) * experiment.local_epochs,
                    "wall_s": wall,
                }
            )
        print(
            f"grid point {index}/{len(points)} {params}: val_acc {[g['val_acc'] for g in grid[-args.grid_seeds :]]}",
            flush=True,
        )
    for study in studies:  # the selected configurations, trained again under the grid's seeds
        runs = [
            train(experiment, method, study["best_params"], seed, pool_factory)[0] for seed in range(args.grid_seeds)
        ]
        study["rescored_val_acc"] = statistics.mean(r[-1]["val_acc"] for r in runs)
        study["rescored_test_acc"] = statistics.mean(r[-1]["test_acc"] for r in runs)
    if ray.is_initialized():
        ray.shutdown()
    summary = summarise(grid, studies, names)
    summary["studies"], summary["wall_s"] = studies, time.perf_counter() - started
    summary["grid_runs"], summary["rung_fidelity"] = grid, rung_fidelity([g["val_curve"] for g in grid])
    from raytune_fl.report.dashboard import build_dashboard

    variants = {s["study"]: {"method": method, "search": search} for s in studies}
    space = SearchSpace.model_validate({"name": EXPERIMENT, "base": base, "variants": variants})
    report = build_dashboard(uri, space, workdir / "dashboard.html", log_artifact=False, echo=lambda _: None)
    summary["dashboard"] = str(report.path)
    return summary


if __name__ == "__main__":
    sys.exit(main())
