"""Cross-device FL several ways side by side: pfl-research's CIFAR-10 benchmark shape (1,000 users of 50 images, 50
a round, local batch 10, one local epoch, central evaluation every 10 rounds), on synthetic 3x32x32 images split IID
over the users, for a few rounds, and the whole 1,500-round run extrapolated from them.

The ways, each in its own child process timed from outside (interpreter start to exit) while its process tree's
PSS is sampled (benchmarks/proc.py), interleaved over `--reps` repetitions in a seeded shuffled order per
repetition; every ratio divides by the plain loop (or pfl) of the same repetition, as these machines are noisy, and
the table gives the median ratio with the range of the repetitions' ratios after it (a difference inside that
range is noise):

- `plain`: the plainest correct PyTorch loop (no Ray, nothing of the project but the model builder and the synthetic
  images): the sampled users train one after another on one client model from the global weights, plain SGD, the
  server takes their sample-weighted mean (BatchNorm's running statistics too) and evaluates every `--eval-every`
  rounds and at the last. `plain_cl`: the same in channels-last.
- `inprocess`: the engine (engine/federation.py), clients in this process (`resources.actors: 0`); channels-last, the
  engine's default. `actors`: the engine on 2 Ray actors x 1 CPU, a private local cluster; `actors_sums` the same
  with `resources.partial_sums` (one message per actor a round, not one per client). `batched`: in-process with
  `resources.client_batch` K, one row per K of `--client-batch`. `bf16`: in-process with `precision: bf16`.
- `pfl`: pfl-research (benchmarks/pfl_way.py) on the same images, users, cohorts, model, batch and rate, run by
  `--pfl-python` (an interpreter where `import pfl` works; the row is skipped, saying why, where there is none).

`--device cuda` runs every way on the one GPU, one way at a time: the plain loop and the in-process ways on the whole
of it, the 2 actors on half each (the driver evaluates on it too), pfl on it (told by PFL_PYTORCH_DEVICE, which on
the CPU keeps pfl off a GPU it would otherwise take). `python -m benchmarks.gpu` runs this as its `cross_device` part.

Per way: the round times (from the end of one round, its evaluation included, to the end of the next; round 1 from
the start of training), rounds 1..`--warmup` left out as warm-up. "s/round" is the median of the remaining rounds
without evaluation, "with eval" that of the remaining rounds with one (a way that evaluated every round has only
those: its s/round is theirs). The 1,500-round run is extrapolated as

    overhead + warm-up excess + (1500 - E) x s/round + E x (s/round with eval)

where overhead is what the child spent outside its rounds (interpreter, imports, data, model, Ray start-up and
shutdown: wall time minus the sum of the round times), the warm-up excess what the warm-up rounds took beyond
steady rounds of their kind (the first tasks on fresh actors, first-touch allocations), and E the evaluations of
1,500 rounds: 150 at `--eval-every 10` (rounds 10, 20, ..., 1500), one more where a way also evaluates round 1 (the
engine does, so that every report after it carries a score), or 1,500 for a way that evaluated every round it ran.

The local rate is `--lr 0.01` by default; pfl's own CIFAR-10 benchmark (and search_spaces/cross_device.yaml) trains
at 0.1: the rate changes the accuracy, not the time. Twelve rounds leave the accuracy near chance: the column checks
that the ways learn alike, not how well.

`python -m benchmarks.cross_device --reps 2` prints one Markdown table and the machine; `--json PATH` writes the
raw per-run results beside the rows.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import importlib.metadata
import json
import math
import os
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

START = time.perf_counter()  # before the heavy imports: the child's own log

import numpy as np  # noqa: E402

from benchmarks.cross_device_protocol import Protocol, cohorts, protocol_data, synthetic_options  # noqa: E402
from benchmarks.proc import MiB, measure, print_result  # noqa: E402
from raytune_fl.metrics import EVALUATE_S, ROUND, TEST_ACC  # noqa: E402

WAYS = ("plain", "plain_cl", "inprocess", "actors", "actors_sums", "batched", "bf16", "pfl")
# the engine's ways: (actors, precision, resources.partial_sums)
ENGINE_WAYS = {
    "inprocess": (0, "fp32", False),
    "actors": (2, "fp32", False),
    "actors_sums": (2, "fp32", True),
    "batched": (0, "fp32", False),
    "bf16": (0, "bf16", False),
}
FULL_ROUNDS = 1500  # the benchmark's run, which the measured rounds are extrapolated to
PFL_VENV_PYTHON = Path("/opt/pflenv/bin/python")  # where pfl is installed apart (it pins an older `packaging`)


def full_run_evaluations(eval_every: int, rounds: int = FULL_ROUNDS) -> int:
    """Evaluations in a run of `rounds` rounds: every eval_every-th round and the last one."""
    return rounds // eval_every + (rounds % eval_every != 0)


# ---- the plain loop ---------------------------------------------------------------------------------------------


def run_plain(protocol: Protocol, threads: int, channels_last: bool) -> dict[str, Any]:
    """The protocol as the plainest correct PyTorch loop; returns the child's report."""
    import torch
    import torch.nn.functional as F

    from raytune_fl.models import build_model

    torch.set_num_threads(threads)
    device = torch.device(protocol.device)
    x_np, y_np, x_test_np, y_test_np, users = protocol_data(protocol)
    # on a GPU the images are uploaded once and each batch is gathered there, as the engine does
    x, y = torch.from_numpy(x_np).to(device), torch.from_numpy(y_np).to(device)
    x_test, y_test = torch.from_numpy(x_test_np).to(device), torch.from_numpy(y_test_np).to(device)
    layout = torch.channels_last if channels_last else torch.contiguous_format
    channels, height, width = protocol.image
    torch.manual_seed(protocol.seed)
    server = build_model("simple_cnn", channels, 10, (height, width)).to(device, memory_format=layout)
    client = build_model("simple_cnn", channels, 10, (height, width)).to(device, memory_format=layout)

    def train(part: np.ndarray, round_index: int, user: int) -> None:
        client.train()
        optimizer = torch.optim.SGD(client.parameters(), lr=protocol.lr)
        generator = torch.Generator().manual_seed(protocol.seed * 1_000_003 + round_index * 10_007 + user)
        order = torch.from_numpy(part)[torch.randperm(len(part), generator=generator)].to(device)
        for start in range(0, len(order), protocol.batch):
            index = order[start : start + protocol.batch]
            if len(index) < 2:  # BatchNorm needs two samples
                continue
            logits, _ = client(x[index].contiguous(memory_format=layout))
            loss = F.cross_entropy(logits, y[index])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()

    @torch.no_grad()
    def evaluate() -> float:
        server.eval()
        correct = 0
        for start in range(0, len(y_test), protocol.eval_batch):
            logits, _ = server(x_test[start : start + protocol.eval_batch].contiguous(memory_format=layout))
            correct += int((logits.argmax(1) == y_test[start : start + protocol.eval_batch]).sum())
        return correct / len(y_test)

    report: dict[str, Any] = {"round_times": [], "evaluated": [], TEST_ACC: [], EVALUATE_S: []}
    last = time.perf_counter()
    report["setup_s"] = last - START
    for round_index, cohort in enumerate(cohorts(protocol), start=1):
        start_state = {k: v.clone() for k, v in server.state_dict().items()}
        sizes = [len(users[u]) for u in cohort]
        # a running sample-weighted sum: no cohort of state dicts held at once
        mean = {k: torch.zeros_like(v) for k, v in start_state.items() if v.is_floating_point()}
        counters: dict[str, torch.Tensor] = {}
        for user, size in zip(cohort, sizes):
            client.load_state_dict(start_state)
            train(users[user], round_index, user)
            state = client.state_dict()
            for key, total in mean.items():
                total.add_(state[key], alpha=size / sum(sizes))
            counters = counters or {k: v.clone() for k, v in state.items() if not v.is_floating_point()}
        server.load_state_dict({**mean, **counters})  # counters: BatchNorm's num_batches_tracked, the first user's
        if protocol.evaluates(round_index):
            began = time.perf_counter()
            report[TEST_ACC].append(evaluate())
            report[EVALUATE_S].append(time.perf_counter() - began)
            report["evaluated"].append(round_index)
        if device.type == "cuda":
            torch.cuda.synchronize()  # the round's kernels finished, not only queued
        now = time.perf_counter()
        report["round_times"].append(now - last)
        last = now
    return report


# ---- the engine -------------------------------------------------------------------------------------------------


def engine_config(
    protocol: Protocol,
    actors: int = 0,
    client_batch: int = 1,
    precision: str = "fp32",
    channels_last: bool = True,
    partial_sums: bool = False,
):
    """The protocol as an ExperimentConfig: every user trains on its whole share (no validation split) and the test
    set is what the server evaluates, as in the plain loop; diagnostics off (not part of the protocol)."""
    from raytune_fl.config import ExperimentConfig

    resources = {
        "actors": actors,
        "cpus_per_actor": 1,
        "client_batch": client_batch,
        "channels_last": channels_last,
        "partial_sums": partial_sums,
        "device": protocol.device,
    }
    if protocol.device == "cuda":  # the actors share the GPU (the driver, outside Ray, evaluates on it too)
        resources["gpus_per_actor"] = round(1 / actors, 4) if actors else 1.0
    experiment = ExperimentConfig.model_validate(
        {
            "dataset": "synthetic",
            "synthetic": synthetic_options(protocol),
            "partition": {
                "kind": "iid",
                "clients": protocol.users,
                "min_size": protocol.samples_per_user,
                "seed": protocol.seed,
                "val_fraction": 0.0,
            },
            "model": "simple_cnn",
            "rounds": protocol.rounds,
            "participation": protocol.cohort / protocol.users,
            "local_epochs": 1,
            "batch_size": protocol.batch,
            "eval_batch_size": protocol.eval_batch,
            "eval_every": protocol.eval_every,
            "precision": precision,
            "optimizer": {"lr": protocol.lr, "momentum": 0.0, "weight_decay": 0.0},
            "diagnostics": {"spectrum": False, "client_accuracy": False, "decomposition": False, "every": 0},
            "checkpoint_every": 0,
            "seed": protocol.seed,
            "resources": resources,
        }
    )
    if experiment.clients_per_round() != protocol.cohort:  # participation is a fraction: say so, never round quietly
        raise ValueError(f"--cohort {protocol.cohort} of --users {protocol.users} is no participation the engine takes")
    return experiment


def run_engine(protocol: Protocol, way: str, threads: int, client_batch: int = 1) -> dict[str, Any]:
    """The protocol through the engine in this process (the actors way: on Ray actors); the child's report."""
    import torch

    from benchmarks.workload import timed_run

    torch.set_num_threads(threads)
    actors, precision, sums = ENGINE_WAYS[way]
    experiment = engine_config(protocol, actors, client_batch if way == "batched" else 1, precision, partial_sums=sums)
    setup_s = time.perf_counter() - START
    rows, times = timed_run(experiment)
    evaluated = [row for row in rows if _finite(row.get(TEST_ACC))]  # a round without evaluation reports none
    return {
        "round_times": times,
        "evaluated": [int(row[ROUND]) for row in evaluated],
        TEST_ACC: [float(row[TEST_ACC]) for row in evaluated],
        EVALUATE_S: [float(row.get(EVALUATE_S, math.nan)) for row in evaluated],
        "setup_s": setup_s,
    }


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


# ---- the parent: runs, summary, table ---------------------------------------------------------------------------


@dataclass
class WayResult:
    way: str  # the row's name: batched with its K (`batched K=5`)
    rep: int
    round_times: list[float]
    evaluated: list[int]  # the rounds (1-based) the server evaluated after
    test_acc: list[float]  # at those rounds
    evaluate_s: list[float]  # the evaluation's own time at those rounds (NaN where the way has no figure)
    wall_s: float
    peak_pss: int
    asked: list[int]  # the rounds the protocol evaluates after
    warmup: int = 2
    load: float = math.nan  # the machine's 1-minute load average as the run ended (its own ~threads included)

    def _times(self, with_eval: bool) -> list[float]:
        marked = set(self.evaluated)
        return [t for r, t in enumerate(self.round_times, start=1) if r > self.warmup and (r in marked) == with_eval]

    @property
    def evaluates_every_round(self) -> bool:
        """Every round was evaluated where the protocol asked for fewer (a run's first round aside: the engine
        evaluates it too, so that every report after it has a score to carry)."""
        every = len(self.evaluated) == len(self.round_times)
        return every and bool(set(self.evaluated) - set(self.asked) - {1})

    @property
    def first_round_evaluated(self) -> bool:
        """Round 1 evaluated beyond the protocol (the engine's rule): one evaluation more in any run."""
        return 1 in self.evaluated and 1 not in self.asked

    @property
    def per_round(self) -> float:
        """Median s/round of the rounds after warm-up without evaluation (of those with it where there are none)."""
        times = self._times(False) or self._times(True)
        return statistics.median(times) if times else math.nan

    @property
    def eval_round(self) -> float:
        times = self._times(True)
        return statistics.median(times) if times else math.nan

    @property
    def overhead_s(self) -> float:
        return self.wall_s - sum(self.round_times)

    @property
    def warmup_excess_s(self) -> float:
        """What the warm-up rounds took beyond steady rounds of their kind (with or without evaluation)."""
        marked = set(self.evaluated)
        steady = [self.eval_round if r in marked else self.per_round for r in range(1, self.warmup + 1)]
        excess = sum(self.round_times[: self.warmup]) - sum(steady[: len(self.round_times)])
        return excess if math.isfinite(excess) else 0.0

    def extrapolated(self, eval_every: int, rounds: int = FULL_ROUNDS) -> float:
        """The whole run of `rounds` rounds: overhead + training rounds + rounds with evaluation (module docstring)."""
        if self.evaluates_every_round:
            evaluations = rounds
        else:
            evaluations = full_run_evaluations(eval_every, rounds) + self.first_round_evaluated
        training = (rounds - evaluations) * self.per_round if rounds > evaluations else 0.0
        return self.overhead_s + self.warmup_excess_s + training + evaluations * self.eval_round

    @property
    def final_acc(self) -> float:
        return self.test_acc[-1] if self.test_acc else math.nan


def _median(values: Sequence[float]) -> float:
    finite = [v for v in values if math.isfinite(v)]
    return statistics.median(finite) if finite else math.nan


def summarise(results: Sequence[WayResult], eval_every: int) -> list[dict[str, Any]]:
    """Per way: medians over reps of s/round, s/round with evaluation, the extrapolated run and peak PSS, and of the
    ratio of s/round to the plain loop's and to pfl's of the same repetition (NaN where those did not run), with
    each repetition's ratio beside the median: their spread is the noise a difference must exceed."""
    by_rep = {(r.way, r.rep): r for r in results}

    def ratios(mine: Sequence[WayResult], base: str) -> list[float]:
        return [r.per_round / by_rep[(base, r.rep)].per_round for r in mine if (base, r.rep) in by_rep]

    rows = []
    for way in dict.fromkeys(r.way for r in results):
        mine = [r for r in results if r.way == way]
        rows.append(
            {
                "way": way,
                "s_per_round": _median([r.per_round for r in mine]),
                "eval_round_s": _median([r.eval_round for r in mine]),
                "plain_ratio": _median(ratios(mine, "plain")),
                "pfl_ratio": _median(ratios(mine, "pfl")),
                "plain_ratios": ratios(mine, "plain"),
                "pfl_ratios": ratios(mine, "pfl"),
                "extrapolated_s": _median([r.extrapolated(eval_every) for r in mine]),
                "pss_mib": statistics.median(r.peak_pss for r in mine) / MiB,
                "final_acc": [r.final_acc for r in mine],
                "evaluated": mine[0].evaluated,
                "evaluates_every_round": all(r.evaluates_every_round for r in mine),
            }
        )
    return rows


def _seconds(value: float) -> str:
    return "-" if not math.isfinite(value) else f"{value:.3f} s"


def _ratio(value: float, each: Sequence[float] = ()) -> str:
    """The median ratio, and the range of the repetitions' ratios where there are several."""
    if not math.isfinite(value):
        return "-"
    finite = [v for v in each if math.isfinite(v)]
    spread = f" ({min(finite):.2f}-{max(finite):.2f})" if len(finite) > 1 and min(finite) != max(finite) else ""
    return f"{value:.2f}{spread}"


def _duration(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "-"
    return f"{seconds / 3600:.2f} h" if seconds >= 3600 else f"{seconds / 60:.1f} min"


def format_table(rows: Sequence[dict[str, Any]]) -> str:
    lines = [
        f"| way | s/round | s/round with eval | x plain | x pfl | {FULL_ROUNDS} rounds (extrapolated) | peak PSS "
        "| final test acc |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        accs = ", ".join("-" if math.isnan(a) else f"{a:.3f}" for a in row["final_acc"])
        mark = " (evaluates every round)" if row["evaluates_every_round"] else ""
        lines.append(
            f"| {row['way']}{mark} | {_seconds(row['s_per_round'])} | {_seconds(row['eval_round_s'])} "
            f"| {_ratio(row['plain_ratio'], row.get('plain_ratios', ()))} "
            f"| {_ratio(row['pfl_ratio'], row.get('pfl_ratios', ()))} | {_duration(row['extrapolated_s'])} "
            f"| {row['pss_mib']:.0f} MiB | {accs} |"
        )
    return "\n".join(lines)


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def machine(pfl_version: str | None = None, device: str = "cpu") -> dict[str, Any]:
    """The CPU model (from /proc/cpuinfo), the cores, the GPU on `cuda`, torch's version (and pfl's), and the date."""
    model = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as handle:
            model = next((line.split(":", 1)[1].strip() for line in handle if line.startswith("model name")), model)
    except OSError:
        pass
    found = {
        "cpu": model,
        "cores": os.cpu_count(),
        "torch": importlib.metadata.version("torch"),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    }
    if pfl_version:
        found["pfl"] = pfl_version
    if device == "cuda":
        import torch

        found["gpu"] = torch.cuda.get_device_name()
    return found


def resolve_pfl_python(given: str | None) -> tuple[str | None, str]:
    """The interpreter that runs the pfl way, and pfl's version (or None and why not): `given`, else this one where
    pfl imports, else the separate environment's where it exists."""
    candidates = [given] if given else [sys.executable, str(PFL_VENV_PYTHON)]
    reasons = []
    for python in candidates:
        if not Path(python).exists():
            reasons.append(f"{python}: no such interpreter")
            continue
        probe = "import pfl, torch; print(pfl.__version__, torch.__version__)"
        done = subprocess.run([python, "-c", probe], capture_output=True, text=True, timeout=120)
        if done.returncode == 0:
            return python, done.stdout.strip()
        last = (done.stderr.strip().splitlines() or ["import failed"])[-1]
        reasons.append(f"{python}: {last}")
    return None, "; ".join(reasons)


def child_command(
    way: str, protocol: Protocol, threads: int, client_batch: int, warmup: int, pfl_python: str | None
) -> list[str]:
    python = pfl_python if way == "pfl" and pfl_python else sys.executable
    args = ["--child", way, *protocol.flags(), "--threads", str(threads), "--warmup", str(warmup)]
    if way == "batched":
        args += ["--client-batch", str(client_batch)]
    return [python, "-m", "benchmarks.cross_device", *args]


def run_way(
    way: str,
    rep: int,
    protocol: Protocol,
    threads: int,
    client_batch: int = 1,
    warmup: int = 2,
    pfl_python: str | None = None,
) -> WayResult:
    label = f"{way} K={client_batch}" if way == "batched" else way
    measured = measure(child_command(way, protocol, threads, client_batch, warmup, pfl_python))
    report = measured.report(label)
    return WayResult(
        label,
        rep,
        report["round_times"],
        report["evaluated"],
        report[TEST_ACC],
        report[EVALUATE_S],
        measured.wall_s,
        measured.peak_pss,
        protocol.eval_rounds(),
        warmup,
        os.getloadavg()[0],  # above the run's own threads: someone else's work slowed it
    )


def parse_image(text: str) -> tuple[int, int, int]:
    parts = text.lower().split("x")
    if len(parts) != 3 or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise argparse.ArgumentTypeError(f"expected CxHxW, e.g. 3x32x32 (got {text!r})")
    return int(parts[0]), int(parts[1]), int(parts[2])


def parse_client_batches(text: str) -> list[int]:
    try:
        values = [int(item) for item in text.split(",") if item.strip()]
    except ValueError:
        values = []
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected comma-separated positive integers, e.g. 5,10 (got {text!r})")
    return list(dict.fromkeys(values))


def build_parser() -> argparse.ArgumentParser:
    defaults = Protocol()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=defaults.users, help="default %(default)s")
    parser.add_argument("--samples-per-user", type=int, default=defaults.samples_per_user, help="default %(default)s")
    parser.add_argument("--cohort", type=int, default=defaults.cohort, help="users a round (default %(default)s)")
    parser.add_argument("--batch", type=int, default=defaults.batch, help="local batch size (default %(default)s)")
    parser.add_argument("--rounds", type=int, default=defaults.rounds, help="rounds measured (default %(default)s)")
    parser.add_argument("--eval-every", type=int, default=defaults.eval_every, help="default %(default)s")
    parser.add_argument("--image", type=parse_image, default=defaults.image, help="CxHxW (default 3x32x32)")
    parser.add_argument("--lr", type=float, default=defaults.lr, help="local SGD rate (default %(default)s)")
    parser.add_argument("--test-samples", type=int, default=defaults.test_samples, help="default %(default)s")
    parser.add_argument("--seed", type=int, default=defaults.seed, help="default %(default)s")
    parser.add_argument(
        "--device", choices=("cpu", "cuda"), default=defaults.device, help="where every way runs (default cpu)"
    )
    parser.add_argument("--threads", type=int, default=2, help="torch threads of the in-process ways and pfl")
    parser.add_argument("--warmup", type=int, default=2, help="first rounds left out of the medians (default 2)")
    parser.add_argument("--reps", type=int, default=2, help="interleaved repetitions (default %(default)s)")
    parser.add_argument("--ways", default=",".join(WAYS), help="comma-separated subset of: %(default)s")
    parser.add_argument(
        "--client-batch", type=parse_client_batches, default=[5, 10], help="batched: the K to run (default 5,10)"
    )
    parser.add_argument("--pfl-python", help="the interpreter with pfl for the pfl way (default: found, see docs)")
    parser.add_argument("--json", help="also write the raw results and the rows to this JSON file")
    parser.add_argument("--child", choices=WAYS, help=argparse.SUPPRESS)  # one way, in this process
    return parser


def protocol_of(args: argparse.Namespace) -> Protocol:
    return Protocol(
        users=args.users,
        samples_per_user=args.samples_per_user,
        cohort=args.cohort,
        batch=args.batch,
        rounds=args.rounds,
        eval_every=args.eval_every,
        image=args.image,
        lr=args.lr,
        test_samples=args.test_samples,
        seed=args.seed,
        device=args.device,
    )


def run_child(way: str, protocol: Protocol, threads: int, client_batch: int) -> dict[str, Any]:
    if way in ("plain", "plain_cl"):
        return run_plain(protocol, threads, channels_last=way == "plain_cl")
    if way == "pfl":
        os.environ["PFL_PYTORCH_DEVICE"] = protocol.device  # pfl takes a GPU it sees unless told
        from benchmarks.pfl_way import run_pfl  # imports pfl: only in this child

        return run_pfl(protocol, threads, START)
    return run_engine(protocol, way, threads, client_batch)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    for name in ("users", "samples_per_user", "cohort", "batch", "rounds", "eval_every", "test_samples", "threads"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')}: must be at least 1 (got {getattr(args, name)})")
    if args.cohort > args.users:
        parser.error(f"--cohort {args.cohort} exceeds --users {args.users}")
    protocol = protocol_of(args)
    if protocol.device == "cuda" and not _cuda_available():
        print("error: --device cuda: torch sees no CUDA device here", file=sys.stderr)
        return 2
    if args.child:
        print(json.dumps(run_child(args.child, protocol, args.threads, args.client_batch[0])))
        return 0
    ways = [w.strip() for w in args.ways.split(",") if w.strip()]
    if unknown := [w for w in ways if w not in WAYS]:
        print(f"error: --ways: unknown {', '.join(unknown)}; known: {', '.join(WAYS)}", file=sys.stderr)
        return 2
    ways = list(dict.fromkeys(["plain", *ways]))  # every ratio needs the plain loop
    pfl_python, pfl_version = None, None
    if "pfl" in ways:
        pfl_python, found = resolve_pfl_python(args.pfl_python)
        if pfl_python is None:
            print(
                f"pfl skipped: no interpreter imports pfl ({found}); install it apart, e.g. python -m venv "
                "--system-site-packages ENV && ENV/bin/pip install 'pfl[pytorch]', then --pfl-python ENV/bin/python"
            )
            ways.remove("pfl")
        else:
            pfl_version = found.split()[0]
            print(f"pfl: {pfl_python} (pfl, torch: {found})")
    runs = [(way, k) for way in ways for k in (args.client_batch if way == "batched" else [1])]
    results: list[WayResult] = []
    for rep in range(1, args.reps + 1):
        order = list(runs)
        random.Random(rep).shuffle(order)  # no way always first (a cold page cache) or last
        for way, k in order:
            result = run_way(way, rep, protocol, args.threads, k, args.warmup, pfl_python)
            results.append(result)
            print(
                f"rep {rep} {result.way:>12}: {_seconds(result.per_round)}/round, with eval "
                f"{_seconds(result.eval_round)}, whole run {result.wall_s:.1f} s, peak PSS "
                f"{result.peak_pss / MiB:.0f} MiB, evaluated rounds {result.evaluated}, final test acc "
                f"{result.final_acc:.3f}, load {result.load:.1f}",
                flush=True,
            )
    labels = [f"{way} K={k}" if way == "batched" else way for way, k in runs]
    rows = summarise(sorted(results, key=lambda r: labels.index(r.way)), protocol.eval_every)  # in --ways' order
    expected = protocol.eval_rounds()
    for row in rows:
        if row["evaluated"] == [1, *expected] and 1 not in expected:
            print(f"note: {row['way']} also evaluated after round 1 (a warm-up round: outside the medians)")
        elif row["evaluated"] != expected:
            print(f"note: {row['way']} evaluated after rounds {row['evaluated']}, the protocol after {expected}")
    found_machine = machine(pfl_version, protocol.device)
    title = (
        f"Cross-device: {protocol.users} users x {protocol.samples_per_user} images "
        f"{'x'.join(map(str, protocol.image))}, cohort {protocol.cohort}, batch {protocol.batch}, lr {protocol.lr:g}, "
        f"{protocol.rounds} rounds (first {args.warmup} warm-up), eval every {protocol.eval_every}; {args.reps} reps, "
        f"{args.threads} threads\nMachine: {found_machine['cpu']}, {found_machine['cores']} cores, torch "
        f"{found_machine['torch']}"
        + (f", pfl {pfl_version}" if pfl_version else "")
        + f"; {found_machine['date']}"
        + (f"\nDevice: {found_machine['gpu']} (every way)" if "gpu" in found_machine else "")
    )
    raw = {
        "machine": found_machine,
        "protocol": dataclasses.asdict(protocol),
        "results": [dataclasses.asdict(r) for r in results],
        "rows": rows,
    }
    print_result(title, format_table(rows), raw, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
