"""Scaling: time per round and peak memory at 10, 100 and 1,000 clients with the same number training each round.

Every client holds the same number of samples (400, drawn from the workload's 4,000 training images; shares
overlap across clients), so a round's training work is the same at every client count and any difference is
what the engine pays per *registered* client (sampling, plans, per-client state, data handed to actors).
Each client count runs in its own child process (interleaved over repetitions), timed and PSS-sampled from
outside; ratios divide by the smallest client count of the same repetition.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from benchmarks.proc import MiB, measure, print_result, python_module
from benchmarks.workload import WORKLOAD, timed_run

SHARE = 400  # samples per client: docs/explanation/workload.md's mean client size


def equal_shares(num_train: int, clients: int, share: int = SHARE, seed: int = 0) -> list[np.ndarray]:
    """Per client, `share` distinct positions out of `num_train` (sorted); clients overlap with each other."""
    rng = np.random.default_rng(seed)
    return [np.sort(rng.choice(num_train, size=share, replace=False)).astype(np.int64) for _ in range(clients)]


def run_clients(clients: int, participating: int, rounds: int, actors: int, threads: int) -> dict[str, Any]:
    """The engine on `clients` equal shares, `participating` of them sampled each round (in this process)."""
    import torch

    from raytune_fl.config import ExperimentConfig
    from raytune_fl.data import load_dataset
    from raytune_fl.engine.data import FederatedData

    torch.set_num_threads(threads)
    experiment = ExperimentConfig.model_validate(
        {
            **WORKLOAD,
            "partition": {**WORKLOAD["partition"], "clients": clients},
            "rounds": rounds,
            "participation": participating / clients,
            "resources": {"actors": actors, "cpus_per_actor": 1},
        }
    )
    dataset = load_dataset("mnist5k")
    parts = equal_shares(len(dataset.y_train), clients)
    data = FederatedData(dataset, parts, [np.zeros(0, dtype=np.int64) for _ in parts])
    rows, times = timed_run(experiment, data)
    return {
        "round_times": times,
        "clients_per_round": [row["clients"] for row in rows],
        "setup_s": rows[0].get("setup_s", 0.0),
    }


def summarise(results: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per client count: medians over reps, and ratios to the smallest count of the same rep."""
    smallest = min(r["clients"] for r in results)
    base = {r["rep"]: r for r in results if r["clients"] == smallest}
    rows = []
    for clients in sorted({r["clients"] for r in results}):
        mine = [r for r in results if r["clients"] == clients]
        rows.append(
            {
                "clients": clients,
                "participation": mine[0]["participating"] / clients,
                "s_per_round": statistics.median(r["per_round"] for r in mine),
                "round_ratio": statistics.median(r["per_round"] / base[r["rep"]]["per_round"] for r in mine),
                "pss_mib": statistics.median(r["peak_pss"] for r in mine) / MiB,
                "pss_ratio": statistics.median(r["peak_pss"] / base[r["rep"]]["peak_pss"] for r in mine),
                "setup_s": statistics.median(r["setup_s"] for r in mine),
            }
        )
    return rows


def format_table(rows: Sequence[dict[str, Any]]) -> str:
    lines = [
        "| clients | participation | s/round (median r2..) | x smallest | peak PSS | x smallest | actor set-up |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row['clients']} | {row['participation']:g} | {row['s_per_round']:.3f} s | {row['round_ratio']:.2f} "
            f"| {row['pss_mib']:.0f} MiB | {row['pss_ratio']:.2f} | {row['setup_s']:.1f} s |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", default="10,100,1000", help="client counts (default %(default)s)")
    parser.add_argument("--participating", type=int, default=10, help="clients per round (default %(default)s)")
    parser.add_argument("--rounds", type=int, default=6, help="rounds per run (default %(default)s)")
    parser.add_argument("--reps", type=int, default=2, help="interleaved repetitions (default %(default)s)")
    parser.add_argument("--actors", type=int, default=2, help="client actors, 1 CPU each; 0 = in-process")
    parser.add_argument("--threads", type=int, default=2, help="torch threads of the driver (default %(default)s)")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)  # one client count, in this process
    parser.add_argument("--json", help="also write the rows to this JSON file")
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(run_clients(args.child, args.participating, args.rounds, args.actors, args.threads)))
        return 0
    try:
        counts = [int(c) for c in args.clients.split(",") if c.strip()]
    except ValueError:
        print(f"error: --clients: expected comma-separated integers, got {args.clients!r}", file=sys.stderr)
        return 2
    if not counts or min(counts) < args.participating:
        print(f"error: --clients: every count must be >= --participating={args.participating}", file=sys.stderr)
        return 2
    results = []
    for rep in range(1, args.reps + 1):
        for clients in counts:
            command = python_module(
                "benchmarks.scaling",
                *("--child", str(clients), "--participating", str(args.participating), "--rounds", str(args.rounds)),
                *("--actors", str(args.actors), "--threads", str(args.threads)),
            )
            measured = measure(command)
            report = measured.report(f"{clients} clients")
            times = report["round_times"]
            result = {
                "rep": rep,
                "clients": clients,
                "participating": args.participating,
                "per_round": statistics.median(times[1:] or times),
                "peak_pss": measured.peak_pss,
                "setup_s": report["setup_s"],
            }
            results.append(result)
            print(
                f"rep {rep} {clients:>5} clients: {result['per_round']:.3f} s/round, "
                f"peak PSS {measured.peak_pss / MiB:.0f} MiB, actor set-up {report['setup_s']:.1f} s",
                flush=True,
            )
    rows = summarise(results)
    title = f"{args.participating} clients per round, {SHARE} samples each, {args.actors} actors, {args.reps} reps"
    print_result(title, format_table(rows), rows, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
