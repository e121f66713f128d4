"""../shared/WORKLOAD.md three ways side by side: the plain reference loop, the engine in-process, the engine on
Ray actors. Each way runs in its own child process, timed from outside (interpreter start to exit, Ray start-up
and shutdown included) while its process tree's PSS is sampled. Ways run interleaved over repetitions and every
ratio divides by the reference loop of the same repetition: these machines are noisy, ratios are what we compare.

Per round: the time between the ends of two successive server evaluations (broadcast, all local trainings,
collection, aggregation, evaluation and the per-round report), median of rounds 2..6 (round 1 is warm-up).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

START = time.perf_counter()

from raytune_fl.bench.proc import MiB, measure, print_result, python_module  # noqa: E402

# ../shared/WORKLOAD.md as an experiment: every client trains on its whole share and the test set is the one
# evaluated, as in the reference loop (no validation split); diagnostics off (they are not part of the workload)
WORKLOAD: dict[str, Any] = {
    "dataset": "mnist5k",
    "partition": {"kind": "dirichlet", "alpha": 0.1, "clients": 10, "min_size": 10, "seed": 0, "val_fraction": 0.0},
    "model": "simple_cnn",
    "rounds": 6,
    "local_epochs": 1,
    "batch_size": 64,
    "eval_batch_size": 500,
    "optimizer": {"lr": 0.01, "momentum": 0.9, "weight_decay": 1e-5},
    "diagnostics": {"spectrum": False, "client_accuracy": False, "decomposition": False, "every": 0},
}

# reference_procs: the reference loop with its clients in `--actors` worker processes, the yardstick for memory
WAYS = ("reference", "reference_procs", "engine_inprocess", "engine_actors")


def workload_config(rounds: int = 6, actors: int = 0, device: str = "cpu"):
    """`device: cuda` with actors: they share one GPU, 1/actors each (4 actors x 0.25). The driver here is the
    benchmark's own process, outside Ray: it evaluates on the same GPU (timed_run), reserving nothing. Without
    actors the whole GPU (nothing is reserved either: no Ray; the config requires a share with `cuda`)."""
    from raytune_fl.config import ExperimentConfig

    resources = {"actors": actors, "cpus_per_actor": 1, "device": device}
    if device == "cuda":
        resources["gpus_per_actor"] = round(1 / actors, 4) if actors else 1.0
    return ExperimentConfig.model_validate({**WORKLOAD, "rounds": rounds, "resources": resources})


def timed_run(experiment, data=None) -> tuple[list[dict[str, Any]], list[float]]:
    """The engine on `experiment` in this process, on a private Ray cluster started here when it has actors.

    Returns the per-round metrics and the round times: between the ends of two successive evaluations
    (the report included), round 1 from its own start (`round_time_s`)."""
    from raytune_fl.engine.federation import Federation, in_process_pool

    pool_factory, device = in_process_pool, "cpu"
    actors = experiment.resources.actors
    if experiment.resources.device == "cuda":
        device = "cuda"  # the evaluation in this process (the driver); without actors the clients' training too
    if actors:
        import ray

        from raytune_fl.actors import ray_pool_factory
        from raytune_fl.tune.cluster import start_local

        start_local(num_cpus=max(2, actors))
        pool_factory = ray_pool_factory(experiment.resources)
    stamps: list[float] = []
    rows: list[dict[str, Any]] = []

    def on_round(metrics: dict[str, Any]) -> None:
        stamps.append(time.perf_counter())
        rows.append(metrics)

    try:
        Federation(experiment, "fedavg", {}, pool_factory=pool_factory, data=data, device=device).run(on_round)
    finally:
        if actors:
            ray.shutdown()
    return rows, [rows[0]["round_time_s"]] + [b - a for a, b in zip(stamps, stamps[1:])]


def run_engine(rounds: int, actors: int, threads: int, device: str = "cpu") -> dict[str, Any]:
    """The workload through the engine in this process (actors > 0: on Ray actors)."""
    import torch

    from raytune_fl.engine.report_keys import CLIENT_LOG_KEY

    torch.set_num_threads(threads)
    rows, times = timed_run(workload_config(rounds, actors, device))
    placed = {(r["device"], r["gpus"]) for row in rows for r in row[CLIENT_LOG_KEY]}
    return {
        "round_times": times,
        "test_acc": [row["test_acc"] for row in rows],
        "placed": sorted(placed),  # (device, Ray GPU ids) the clients trained on; ("", "") in-process
        "setup_s": rows[0].get("setup_s", 0.0),
        # parts of each round's time: the driver's evaluation and aggregation (NaN where the engine has no figure)
        "evaluate_s": [row.get("evaluate_s", float("nan")) for row in rows],
        "aggregate_s": [row.get("aggregate_s", float("nan")) for row in rows],
        "in_process_s": time.perf_counter() - START,
    }


@dataclass
class WayResult:
    way: str
    rep: int
    round_times: list[float]
    wall_s: float
    peak_pss: int
    final_acc: float

    @property
    def per_round(self) -> float:
        return statistics.median(self.round_times[1:] or self.round_times)


def child_command(way: str, rounds: int, threads: int, actors: int, device: str = "cpu") -> list[str]:
    if way.startswith("reference"):  # always the CPU loop: the yardstick
        processes = str(actors if way == "reference_procs" else 0)
        args = ("--threads", str(threads), "--rounds", str(rounds), "--processes", processes)
        return python_module("raytune_fl.bench.reference", *args)
    args = ["--child", way, "--rounds", str(rounds), "--threads", str(threads), "--actors", str(actors)]
    return python_module("raytune_fl.bench.workload", *args, "--device", device)


def run_way(way: str, rep: int, rounds: int, threads: int, actors: int, device: str = "cpu") -> WayResult:
    measured = measure(child_command(way, rounds, threads, actors, device))
    if measured.returncode != 0:
        raise RuntimeError(f"{way} exited with {measured.returncode}:\n{measured.stderr[-3000:]}")
    report = measured.last_json()
    return WayResult(way, rep, report["round_times"], measured.wall_s, measured.peak_pss, report["test_acc"][-1])


def summarise(
    results: Sequence[WayResult], reference: str = "reference", memory_reference: str = "reference_procs"
) -> list[dict[str, Any]]:
    """Per way: medians over reps of s/round, wall and peak PSS, and of the ratio to the same rep's reference
    (peak PSS: to the same rep's multi-process reference loop, NaN where it did not run)."""
    by_rep = {(r.way, r.rep): r for r in results}
    rows = []
    for way in dict.fromkeys(r.way for r in results):
        mine = [r for r in results if r.way == way]
        refs = [(r, by_rep[(reference, r.rep)]) for r in mine if (reference, r.rep) in by_rep]
        memory = [
            r.peak_pss / by_rep[(memory_reference, r.rep)].peak_pss for r in mine if (memory_reference, r.rep) in by_rep
        ]
        rows.append(
            {
                "way": way,
                "s_per_round": statistics.median(r.per_round for r in mine),
                "wall_s": statistics.median(r.wall_s for r in mine),
                "pss_mib": statistics.median(r.peak_pss for r in mine) / MiB,
                "round_ratio": statistics.median(r.per_round / ref.per_round for r, ref in refs),
                "wall_ratio": statistics.median(r.wall_s / ref.wall_s for r, ref in refs),
                "pss_ratio": statistics.median(memory) if memory else float("nan"),
                "final_acc": [r.final_acc for r in mine],
            }
        )
    return rows


def format_table(rows: Sequence[dict[str, Any]]) -> str:
    lines = [
        "| way | s/round (median r2-6) | x reference | whole run | x reference | peak PSS | x reference_procs "
        "| final test acc |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        accs = ", ".join(f"{a:.3f}" for a in row["final_acc"])
        lines.append(
            f"| {row['way']} | {row['s_per_round']:.3f} s | {row['round_ratio']:.2f} | {row['wall_s']:.1f} s "
            f"| {row['wall_ratio']:.2f} | {row['pss_mib']:.0f} MiB | {row['pss_ratio']:.2f} | {accs} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6, help="rounds per run (default %(default)s)")
    parser.add_argument("--reps", type=int, default=2, help="interleaved repetitions (default %(default)s)")
    parser.add_argument("--threads", type=int, default=2, help="torch threads of the reference and in-process runs")
    parser.add_argument("--actors", type=int, default=2, help="client actors of the Ray way, 1 CPU/thread each")
    parser.add_argument("--ways", default=",".join(WAYS), help="comma-separated subset of: %(default)s")
    parser.add_argument(
        "--device",
        choices=("cpu", "cuda"),
        default="cpu",
        help="where the engine's clients train; cuda: in-process on the GPU, or the actors share one GPU "
        "(1/actors each); the reference loop stays on the CPU",
    )
    parser.add_argument("--child", choices=WAYS[1:], help=argparse.SUPPRESS)  # one way, in this process
    parser.add_argument("--json", help="also write the rows to this JSON file")
    args = parser.parse_args(argv)
    if args.child:
        actors = args.actors if args.child == "engine_actors" else 0
        print(json.dumps(run_engine(args.rounds, actors, args.threads, args.device)))
        return 0
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():  # the actors would wait forever for a GPU the cluster lacks
            print(f"error: --device cuda: torch {torch.__version__} sees no CUDA device here", file=sys.stderr)
            return 2
    ways = [w.strip() for w in args.ways.split(",") if w.strip()]
    unknown = [w for w in ways if w not in WAYS]
    if unknown:
        print(f"error: --ways: unknown {', '.join(unknown)}; known: {', '.join(WAYS)}", file=sys.stderr)
        return 2
    for needed in ("reference_procs", "reference")[: 2 if "engine_actors" in ways else 1]:
        if needed not in ways:
            ways.insert(0, needed)  # the ratios need them
    results = []
    for rep in range(1, args.reps + 1):
        for way in ways:
            result = run_way(way, rep, args.rounds, args.threads, args.actors, args.device)
            results.append(result)
            print(
                f"rep {rep} {way:>16}: {result.per_round:.3f} s/round, whole run {result.wall_s:.1f} s, "
                f"peak PSS {result.peak_pss / MiB:.0f} MiB, final test acc {result.final_acc:.3f}",
                flush=True,
            )
    rows = summarise(results)
    title = f"WORKLOAD.md, {args.rounds} rounds x {args.reps} reps; reference = plain loop, {args.threads} threads"
    if args.device == "cuda":
        title += f"; engine on CUDA ({args.actors} actors x {round(1 / args.actors, 4):g} GPU)"
    print_result(title, format_table(rows), rows, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
