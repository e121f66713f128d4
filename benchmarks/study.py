"""Study overhead: a 16-trial x 6-round study of the benchmark workload `scripts/tune.py`, timed from outside.

overhead = study wall time (process start to exit: Ray start-up, Tune, trial and actor start-up, MLflow
logging, checkpoints) / the sum over trials of their rounds' training time (`round_time_s`: broadcast, local
training, aggregation, evaluation), minus 1. Read back from the study's own MLflow store.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from benchmarks.proc import MiB, measure
from benchmarks.workload import WORKLOAD

TUNE_SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "tune.py"


def study_space(trials: int, rounds: int, actors: int) -> dict[str, Any]:
    """FedProx's mu searched on the workload, every trial run to the end (no early stopping: same work per trial).

    Tuning selects on a validation split, so clients hold 10 % out (docs/explanation/workload.md itself has none)."""
    base = {**WORKLOAD, "rounds": rounds, "resources": {"actors": actors, "cpus_per_actor": 1}}
    base["partition"] = {**WORKLOAD["partition"], "val_fraction": 0.1}
    return {
        "name": "bench-study",
        "base": base,
        "variants": {"fedprox": {"method": "fedprox", "search": {"mu": {"loguniform": [0.001, 1.0]}}}},
        "tune": {"num_samples": trials, "max_concurrent": 1, "scheduler": {"asha": None}, "seed": 0},
    }


def trial_times(tracking_uri: str) -> list[dict[str, float]]:
    """Per trial (child run), in start order: the sum of its round times, its set-up time and its round count."""
    import mlflow

    client = mlflow.MlflowClient(tracking_uri)
    experiment = client.get_experiment_by_name("bench-study")
    runs = client.search_runs([experiment.experiment_id], "tags.`mlflow.parentRunId` != ''", max_results=1000)
    rows = []
    for run in runs:
        rounds = client.get_metric_history(run.info.run_id, "round_time_s")
        setup = client.get_metric_history(run.info.run_id, "setup_s")
        rows.append(
            {
                "name": run.info.run_name,
                "train_s": sum(m.value for m in rounds),
                "setup_s": sum(m.value for m in setup),
                "rounds": len(rounds),
            }
        )
    return sorted(rows, key=lambda row: row["name"])  # <variant>-<index>: the order the trials started in


def phases(stamped: list[tuple[float, str]], rows: list[dict[str, Any]], wall_s: float) -> dict[str, float]:
    """Where the overhead goes, from when tune.py printed its lines (max_concurrent 1: one trial after another).

    before: start to the variant's study (imports, checks, MLflow and Optuna stores, Ray); first_trial: Tune's
    set-up and the trial process until its first round, beyond its actors' start-up (`setup_s`, apart);
    between: the later trials' time beyond their rounds (reporting each round, one trial to the next); end: the
    last trial to the exit (the best model's logging, Ray's shutdown). With actors they add up to wall - train."""
    variant = next((t for t, line in stamped if line.startswith("=== variant")), float("nan"))
    finished = [t for t, line in stamped if re.search(r"\btrial \d+/\d+ finished", line)]
    if not rows or len(finished) != len(rows):
        return {}
    first, last = finished[0], finished[-1]
    return {
        "before": variant,
        "first_trial": first - variant - rows[0]["train_s"] - rows[0]["setup_s"],
        "actor_start": sum(row["setup_s"] for row in rows),
        "between": last - first - sum(row["train_s"] + row["setup_s"] for row in rows[1:]),
        "end": wall_s - last,
    }


def run_study(trials: int, rounds: int, actors: int, workdir: Path) -> dict[str, Any]:
    space = workdir / "study.yaml"
    space.write_text(yaml.safe_dump(study_space(trials, rounds, actors)))
    uri = f"sqlite:///{workdir / 'mlflow.db'}"
    command = [sys.executable, str(TUNE_SCRIPT), "--space", str(space), "--mlflow-uri", uri]
    # unbuffered: each progress line is timed when it is printed (phases())
    environment = {**os.environ, "PYTHONUNBUFFERED": "1"}
    measured = measure([*command, "--storage", str(workdir / "ray_results")], interval_s=2.0, env=environment)
    if measured.returncode != 0:
        raise RuntimeError(f"tune.py exited with {measured.returncode}:\n{measured.stderr[-3000:]}")
    rows = trial_times(uri)
    train = sum(r["train_s"] for r in rows)
    return {
        "trials": len(rows),
        "rounds": sum(r["rounds"] for r in rows),
        "wall_s": measured.wall_s,
        "train_s": train,
        "setup_s": sum(r["setup_s"] for r in rows),
        "overhead": measured.wall_s / train - 1 if train else float("nan"),
        "peak_pss_mib": measured.peak_pss / MiB,
        "phases_s": phases(measured.stamped, rows, measured.wall_s),
    }


def format_result(result: dict[str, Any]) -> str:
    other = result["wall_s"] - result["train_s"] - result["setup_s"]
    return "\n".join(
        [
            "| trials x rounds | study wall | sum of trial training | overhead | of which actor start-up | rest |",
            "|---|---|---|---|---|---|",
            f"| {result['trials']} x {result['rounds'] // max(result['trials'], 1)} | {result['wall_s']:.1f} s "
            f"| {result['train_s']:.1f} s | {100 * result['overhead']:.0f} % | {result['setup_s']:.1f} s "
            f"| {other:.1f} s |",
            f"peak PSS of the study's process tree: {result['peak_pss_mib']:.0f} MiB",
            *_phase_lines(result.get("phases_s") or {}, result["wall_s"] - result["train_s"]),
        ]
    )


_PHASES = {
    "before": "start to the study (imports, checks, MLflow/Optuna stores, Ray start)",
    "first_trial": "Tune set-up and the first trial's process (and its actors), to its first round",
    "actor_start": "waiting for the client actors to start (setup_s; they start beside the trial's set-up)",
    "between": "later trials beyond their rounds (a report per round, trial to trial)",
    "end": "last trial to exit (the best model's logging, Ray's shutdown)",
}


def _phase_lines(phases_s: dict[str, float], overhead_s: float) -> list[str]:
    if not phases_s:
        return []
    lines = ["", "| where the overhead goes | seconds | share of the overhead |", "|---|---|---|"]
    for key, text in _PHASES.items():
        lines.append(f"| {text} | {phases_s[key]:.1f} | {100 * phases_s[key] / overhead_s:.0f} % |")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=16, help="trials (default %(default)s)")
    parser.add_argument("--rounds", type=int, default=6, help="rounds per trial (default %(default)s)")
    parser.add_argument("--actors", type=int, default=2, help="client actors per trial (default %(default)s)")
    parser.add_argument("--json", help="also write the result to this JSON file")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-study-") as workdir:
        result = run_study(args.trials, args.rounds, args.actors, Path(workdir))
    print(format_result(result))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
