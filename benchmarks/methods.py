"""Time per round of every method relative to FedAvg, on docs/explanation/workload.md.

Methods run interleaved (rep 1: every method, rep 2: every method, ...) so slow phases of a shared
machine hit them alike; each ratio divides by FedAvg's time from the same repetition. A round's
time is the driver's `round_time_s` (broadcast, local training, aggregation, evaluation); actor
start-up is reported apart and excluded. The first `warmup` rounds are dropped (kernel warm-up).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from raytune_fl.config import ExperimentConfig
from raytune_fl.engine.data import prepare_data
from raytune_fl.engine.federation import Federation, in_process_pool

# one representative setting per method: its defaults, which is what a first run uses
DEFAULT_METHODS: dict[str, tuple[str, dict[str, Any]]] = {
    "fedavg": ("fedavg", {}),
    "fedprox": ("fedprox", {}),
    "feduv": ("feduv", {}),
    "univarfl": ("univarfl", {}),
    "moon": ("moon", {}),
    "freeze": ("freeze", {}),
    "fedld": ("fedld", {}),
    "fedld_official": ("fedld", {"fidelity": "official"}),
    "fedld_margin": ("fedld", {"principal": False}),
    "fedld_principal": ("fedld", {"lambda": 0.0}),
    "scaffold": ("scaffold", {}),
    "fednova": ("fednova", {}),
    "fedbn": ("fedbn", {}),
    "fedavgm": ("fedavgm", {}),
    "qffl": ("qffl", {}),
    "feddyn": ("feddyn", {}),
    "fedadagrad": ("fedadagrad", {}),
    "fedadam": ("fedadam", {}),
    "fedyogi": ("fedyogi", {}),
    "feddecorr": ("feddecorr", {}),
    "fedgh": ("fedgh", {}),
    "fedgh_official": ("fedgh", {"fidelity": "official"}),
    "fedalign": ("fedalign", {}),
    "fedpac": ("fedpac", {}),
    "fedper": ("fedper", {}),
    "fedrep": ("fedrep", {}),
    "fedbabu": ("fedbabu", {}),
    "ditto": ("ditto", {}),
    "apfl": ("apfl", {}),
    "pfedme": ("pfedme", {}),
}

# docs/explanation/workload.md: mnist5k, Dirichlet(0.1) over 10 clients, the small CNN, SGD 0.01/0.9/1e-5, E=1, B=64
WORKLOAD = {
    "dataset": "mnist5k",
    "partition": {"kind": "dirichlet", "alpha": 0.1, "clients": 10, "min_size": 10, "seed": 0},
    "model": "simple_cnn",
    "local_epochs": 1,
    "batch_size": 64,
    "optimizer": {"lr": 0.01, "momentum": 0.9, "weight_decay": 1e-5},
    "diagnostics": {"every": 0},  # the costly diagnostic is timed apart anyway; keep it out of the run
}


@dataclass
class Timing:
    variant: str
    rep: int
    round_times: list[float]
    setup_s: float
    val_acc: float
    personal_val_acc: float  # the model each client uses: a global method's is its val_acc
    aggregate_share: float = 0.0  # median over rounds of aggregate_s / round_time_s

    @property
    def median(self) -> float:
        return statistics.median(self.round_times)


def run_once(experiment: ExperimentConfig, method: str, params: dict[str, Any], data, pool_factory, warmup: int):
    rows: list[dict[str, Any]] = []
    Federation(experiment, method, params, pool_factory=pool_factory, data=data).run(rows.append)
    timed = rows[warmup:] or rows[-1:]
    times = [row["round_time_s"] for row in timed]
    share = statistics.median(row["aggregate_s"] / row["round_time_s"] for row in timed)
    personal = rows[-1].get("personal_val_acc", float("nan"))
    return times, rows[0].get("setup_s", 0.0), rows[-1]["val_acc"], personal, share


def benchmark(
    experiment: ExperimentConfig,
    variants: dict[str, tuple[str, dict[str, Any]]],
    reps: int,
    warmup: int,
    pool_factory=in_process_pool,
    log=print,
) -> list[Timing]:
    data = prepare_data(experiment)
    timings: list[Timing] = []
    for rep in range(1, reps + 1):
        for variant, (method, params) in variants.items():
            times, setup_s, val_acc, personal, share = run_once(experiment, method, params, data, pool_factory, warmup)
            timings.append(Timing(variant, rep, times, setup_s, val_acc, personal, share))
            log(f"rep {rep} {variant:>15}: median {statistics.median(times):.3f} s/round, setup {setup_s:.1f}s")
    return timings


def ratio_table(timings: Sequence[Timing], reference: str = "fedavg") -> list[dict[str, Any]]:
    """Per variant: median s/round over reps, and the median over reps of (variant / reference, same rep)."""
    by_rep = {(t.variant, t.rep): t for t in timings}
    rows = []
    for variant in dict.fromkeys(t.variant for t in timings):
        mine = [t for t in timings if t.variant == variant]
        ratios = [t.median / by_rep[(reference, t.rep)].median for t in mine if (reference, t.rep) in by_rep]
        rows.append(
            {
                "variant": variant,
                "s_per_round": statistics.median(t.median for t in mine),
                "ratio": statistics.median(ratios) if ratios else float("nan"),
                "val_acc": mine[-1].val_acc,
                "personal_val_acc": mine[-1].personal_val_acc,
                "aggregate_share": statistics.median(t.aggregate_share for t in mine),
            }
        )
    return rows


def format_table(rows: Sequence[dict[str, Any]]) -> str:
    lines = [
        "| method | s/round | x FedAvg | aggregation, % of round | val_acc (last round) | personal_val_acc |",
        "|---|---|---|---|---|---|",
    ]
    for row in rows:
        personal = "" if row["personal_val_acc"] != row["personal_val_acc"] else f"{row['personal_val_acc']:.3f}"
        lines.append(
            f"| {row['variant']} | {row['s_per_round']:.3f} | {row['ratio']:.2f} | {100 * row['aggregate_share']:.1f} "
            f"| {row['val_acc']:.3f} | {personal} |"
        )
    return "\n".join(lines)


def client_batch_arg(text: str) -> int | str:
    """`--client-batch`: a positive integer or `auto`."""
    if text == "auto":
        return text
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive integer or 'auto'")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6, help="rounds per run (default %(default)s)")
    parser.add_argument("--warmup", type=int, default=1, help="leading rounds left out (default %(default)s)")
    parser.add_argument("--reps", type=int, default=2, help="interleaved repetitions (default %(default)s)")
    parser.add_argument("--methods", help=f"comma-separated subset of: {', '.join(DEFAULT_METHODS)}")
    parser.add_argument("--actors", type=int, default=2, help="Ray client actors, 1 CPU each; 0 = in-process")
    parser.add_argument(
        "--client-batch",
        type=client_batch_arg,
        default=1,
        metavar="K",
        help="resources.client_batch: clients a worker trains at once, a positive integer or auto (default "
        "%(default)s: one after another); a method that cannot batch trains one at a time with a notice",
    )
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a workload field")
    args = parser.parse_args(argv)
    variants = DEFAULT_METHODS
    if args.methods:
        chosen = [m.strip() for m in args.methods.split(",") if m.strip()]
        unknown = [m for m in chosen if m not in DEFAULT_METHODS]
        if unknown:
            print(
                f"error: --methods: unknown {', '.join(unknown)}; known: {', '.join(DEFAULT_METHODS)}", file=sys.stderr
            )
            return 2
        variants = {m: DEFAULT_METHODS[m] for m in dict.fromkeys(["fedavg", *chosen])}  # FedAvg: the reference
    import yaml

    config: dict[str, Any] = {
        **WORKLOAD,
        "rounds": args.rounds,
        "resources": {"actors": args.actors, "cpus_per_actor": 1, "client_batch": args.client_batch},
    }
    for item in args.set:
        key, _, text = item.partition("=")
        node = config
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = yaml.safe_load(text)
    experiment = ExperimentConfig.model_validate(config)
    pool_factory = in_process_pool
    if args.actors > 0:
        import ray

        from raytune_fl.actors import ray_pool_factory
        from raytune_fl.runtime.cluster import start_local

        if not ray.is_initialized():
            start_local()
        pool_factory = ray_pool_factory(experiment.resources)
    else:
        import torch

        torch.set_num_threads(1)
    started = time.perf_counter()
    timings = benchmark(experiment, variants, args.reps, args.warmup, pool_factory)
    print(
        f"\n{len(variants)} methods x {args.reps} reps x {args.rounds} rounds, {args.actors} actors, "
        f"client_batch {experiment.resources.client_batch}: {time.perf_counter() - started:.0f}s"
    )
    print(format_table(ratio_table(timings)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
