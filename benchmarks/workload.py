"""The benchmark workload (docs/explanation/workload.md) several ways side by side: the plain reference loop, the
engine in-process, the engine on Ray actors, and the engine in-process with client batching (`engine_batched`:
`resources.client_batch` = K, one row per K of `--client-batch`). Each way runs in its own child process, timed
from outside (interpreter start to exit, Ray start-up and shutdown included) while its process tree's PSS is
sampled. Ways run interleaved over repetitions and every ratio divides by the reference loop of the same
repetition: these machines are noisy, ratios are what we compare.

Per round: the time between the ends of two successive server evaluations (broadcast, all local trainings,
collection, aggregation, evaluation and the per-round report), median of rounds 2..6 (round 1 is warm-up).
With `--device cuda` the child also reports its peak GPU memory (torch.cuda.max_memory_allocated): for the
in-process ways, where the child trains every client, the whole run's; none for the actors, whose memory is theirs.
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

from benchmarks.proc import MiB, measure, print_result, python_module  # noqa: E402

# docs/explanation/workload.md as an experiment: every client trains on its whole share and the test set is the one
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
WAYS = ("reference", "reference_procs", "engine_inprocess", "engine_actors", "engine_batched")
DEFAULT_WAYS = WAYS[:4]  # engine_batched by name (--ways ...,engine_batched --client-batch 1,2,5,10)


def workload_config(rounds: int = 6, actors: int = 0, device: str = "cpu", client_batch: int | str = 1):
    """`device: cuda` with actors: they share one GPU, 1/actors each (4 actors x 0.25). The driver here is the
    benchmark's own process, outside Ray: it evaluates on the same GPU (timed_run), reserving nothing. Without
    actors the whole GPU (nothing is reserved either: no Ray; the config requires a share with `cuda`).
    `client_batch`: resources.client_batch, the clients a worker trains at once (1: one after another)."""
    from raytune_fl.config import ExperimentConfig

    resources = {"actors": actors, "cpus_per_actor": 1, "device": device, "client_batch": client_batch}
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
        from raytune_fl.runtime.cluster import start_local

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


def run_engine(
    rounds: int, actors: int, threads: int, device: str = "cpu", client_batch: int | str = 1
) -> dict[str, Any]:
    """The workload through the engine in this process (actors > 0: on Ray actors)."""
    import torch

    from raytune_fl.engine.report import CLIENT_LOG_KEY

    torch.set_num_threads(threads)
    rows, times = timed_run(workload_config(rounds, actors, device, client_batch))
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
        "client_batch": client_batch,
        "peak_gpu_mib": peak_gpu_mib(device) if not actors else None,  # the actors' memory is not this process's
    }


def peak_gpu_mib(device: str) -> float | None:
    """This process's peak GPU memory allocated by torch so far, in MiB; None off CUDA."""
    if device != "cuda":
        return None
    import torch

    return torch.cuda.max_memory_allocated() / MiB


@dataclass
class WayResult:
    way: str
    rep: int
    round_times: list[float]
    wall_s: float
    peak_pss: int
    final_acc: float
    peak_gpu_mib: float | None = None  # the child's, in-process ways on CUDA only

    @property
    def per_round(self) -> float:
        return statistics.median(self.round_times[1:] or self.round_times)


def child_command(
    way: str, rounds: int, threads: int, actors: int, device: str = "cpu", client_batch: int | str = 1
) -> list[str]:
    if way.startswith("reference"):  # always the CPU loop: the yardstick
        processes = str(actors if way == "reference_procs" else 0)
        args = ("--threads", str(threads), "--rounds", str(rounds), "--processes", processes)
        return python_module("benchmarks.reference", *args)
    args = ["--child", way, "--rounds", str(rounds), "--threads", str(threads), "--actors", str(actors)]
    if way == "engine_batched":
        args += ["--client-batch", str(client_batch)]
    return python_module("benchmarks.workload", *args, "--device", device)


def way_label(way: str, client_batch: int | str) -> str:
    """A row's name: the way, and for engine_batched its K (`engine_batched K=5`)."""
    return f"{way} K={client_batch}" if way == "engine_batched" else way


def run_way(
    way: str, rep: int, rounds: int, threads: int, actors: int, device: str = "cpu", client_batch: int | str = 1
) -> WayResult:
    label = way_label(way, client_batch)
    measured = measure(child_command(way, rounds, threads, actors, device, client_batch))
    report = measured.report(label)
    return WayResult(
        label,
        rep,
        report["round_times"],
        measured.wall_s,
        measured.peak_pss,
        report["test_acc"][-1],
        report.get("peak_gpu_mib"),
    )


def parse_client_batches(text: str) -> list[int | str]:
    """`--client-batch`: comma-separated K, each a positive integer or `auto`, in the order given, once each."""
    values: list[int | str] = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        if item == "auto":
            values.append(item)
            continue
        try:
            value = int(item)
        except ValueError:
            value = 0
        if value < 1:
            raise ValueError(f"--client-batch: {item!r} is not a positive integer or 'auto'")
        values.append(value)
    if not values:
        raise ValueError("--client-batch: no K given")
    return list(dict.fromkeys(values))


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
        gpu = [r.peak_gpu_mib for r in mine if r.peak_gpu_mib is not None]
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
                "gpu_mib": statistics.median(gpu) if gpu else None,  # None: not on CUDA, or on actors
            }
        )
    return rows


def format_table(rows: Sequence[dict[str, Any]]) -> str:
    lines = [
        "| way | s/round (median r2-6) | x reference | whole run | x reference | peak PSS | x reference_procs "
        "| final test acc | peak GPU mem |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        accs = ", ".join(f"{a:.3f}" for a in row["final_acc"])
        gpu = row.get("gpu_mib")
        gpu_text = "-" if gpu is None else f"{gpu:.0f} MiB"
        lines.append(
            f"| {row['way']} | {row['s_per_round']:.3f} s | {row['round_ratio']:.2f} | {row['wall_s']:.1f} s "
            f"| {row['wall_ratio']:.2f} | {row['pss_mib']:.0f} MiB | {row['pss_ratio']:.2f} | {accs} | {gpu_text} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6, help="rounds per run (default %(default)s)")
    parser.add_argument("--reps", type=int, default=2, help="interleaved repetitions (default %(default)s)")
    parser.add_argument("--threads", type=int, default=2, help="torch threads of the reference and in-process runs")
    parser.add_argument("--actors", type=int, default=2, help="client actors of the Ray way, 1 CPU/thread each")
    parser.add_argument(
        "--ways",
        default=",".join(DEFAULT_WAYS),
        help=f"comma-separated, of: {', '.join(WAYS)} (default %(default)s)",
    )
    parser.add_argument(
        "--client-batch",
        default="10",
        help="engine_batched: comma-separated K (resources.client_batch, a positive integer or auto), one row "
        "each (default %(default)s)",
    )
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
    try:
        client_batches = parse_client_batches(args.client_batch)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if args.child:
        actors = args.actors if args.child == "engine_actors" else 0
        batch = client_batches[0] if args.child == "engine_batched" else 1
        print(json.dumps(run_engine(args.rounds, actors, args.threads, args.device, batch)))
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
    # the ratios need them: the reference loop always, the multi-process one (memory) beside the actors
    needed = ["reference"] + (["reference_procs"] if "engine_actors" in ways else [])
    ways = [w for w in needed if w not in ways] + list(dict.fromkeys(ways))
    runs = [(way, k) for way in ways for k in (client_batches if way == "engine_batched" else [1])]
    results = []
    for rep in range(1, args.reps + 1):
        for way, k in runs:
            result = run_way(way, rep, args.rounds, args.threads, args.actors, args.device, k)
            results.append(result)
            gpu = "" if result.peak_gpu_mib is None else f", peak GPU {result.peak_gpu_mib:.0f} MiB"
            print(
                f"rep {rep} {result.way:>19}: {result.per_round:.3f} s/round, whole run {result.wall_s:.1f} s, "
                f"peak PSS {result.peak_pss / MiB:.0f} MiB{gpu}, final test acc {result.final_acc:.3f}",
                flush=True,
            )
    rows = summarise(results)
    title = f"Workload, {args.rounds} rounds x {args.reps} reps; reference = plain loop, {args.threads} threads"
    if args.device == "cuda":
        title += f"; engine on CUDA ({args.actors} actors x {round(1 / args.actors, 4):g} GPU)"
    print_result(title, format_table(rows), rows, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
