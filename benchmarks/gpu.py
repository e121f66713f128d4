"""One command for a lent GPU: the GPU test tier, then the benchmark workload, ResNet-18 and a study timed on one GPU.

Parts, in this order (each measurement in its own child process, so each has a fresh CUDA context and Ray cluster,
and a timeout; a failed one prints its error tail and the others still run):

- tests: tests/engine/test_gpu.py (and tests/engine/test_gpu_methods.py where present), slow ones included.
- workload: docs/explanation/workload.md per round on the plain loop on CUDA (bench/reference.py --device cuda), the
  engine in-process on CUDA, and the engine with 1, 2, 4 client actors sharing the GPU (1/actors each; the driver
  evaluates on the same GPU). Ratios divide by the plain loop of this same run.
- workload_batched: the engine in-process on CUDA with client batching (resources.client_batch K = 1, 2, 5, 10:
  K clients trained at once as one vectorised model), beside the plain loop of this run (run here when the
  workload part did not); the speed-up column is over K = 1.
- cross_device: benchmarks/cross_device.py's protocol (pfl-research's CIFAR-10 shape: 1,000 users of 50 images,
  50 a round, batch 10) with `--device cuda`, one repetition: the plain loop, the engine on 2 actors sharing the GPU
  with partial sums, the engine in-process with client_batch 10, and pfl-research where it imports (it is not in
  the GPU bundle unless added; the row says so). The engine's fastest way against pfl: speed-up >= 3x.
- resnet: ResNet-18 on synthetic CIFAR-10-shaped data (20,000 samples, 10 clients, 3 rounds) with 1 and 4 actors
  sharing the GPU; a round's training (local training and transport) and evaluation apart.
- resnet_batched: the same ResNet-18 run in-process on the whole GPU with client_batch K = 1 and 10 (speed-up
  over K = 1).
- study: 8 trials x 4 rounds of the workload through scripts/tune.py, each trial training in its own process on a
  quarter of the GPU (actors 0, gpus_per_actor 0.25), 4 trials at once against 1 at a time (wall time).

Peak GPU memory (torch.cuda.max_memory_allocated of the child) where one process trains every client: the plain
loop and the in-process runs. Single runs: one run per way, medians over its rounds 2..N (round 1 is warm-up).
Every finished row goes to `--json` at once, so a run cut off by a time limit keeps what it measured. Exit 0 when
every row was measured (whether or not it met its target), 1 when a row or the tests failed, 2 without CUDA.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.proc import last_json, with_repo_on_path

REPO = Path(__file__).resolve().parents[1]
TUNE_SCRIPT = REPO / "scripts" / "tune.py"
PARTS = ("tests", "workload", "workload_batched", "cross_device", "resnet", "resnet_batched", "study")
GPU_TESTS = ("tests/engine/test_gpu.py", "tests/engine/test_gpu_methods.py")  # those present run


@dataclass(frozen=True)
class Sizes:
    """How big each measurement is, and how long its child may take (seconds)."""

    workload_rounds: int = 6
    workload_threads: int = 2  # torch threads of the plain loop and the in-process engine (as bench_workload.py)
    workload_actors: tuple[int, ...] = (1, 2, 4)
    client_batches: tuple[int, ...] = (1, 2, 5, 10)  # workload_batched: resources.client_batch K, in-process
    resnet_shape: tuple[int, int, int] = (3, 32, 32)
    resnet_samples: int = 20_000
    resnet_clients: int = 10
    resnet_rounds: int = 3
    resnet_actors: tuple[int, ...] = (1, 4)
    resnet_client_batches: tuple[int, ...] = (1, 10)  # resnet_batched
    # cross_device: benchmarks/cross_device.py's own protocol, these rounds; `cross_device_args` shrinks it (--tiny)
    cross_device_rounds: int = 8
    cross_device_args: tuple[str, ...] = ()
    study_trials: int = 8
    study_rounds: int = 4
    study_concurrent: int = 4
    tests_timeout_s: float = 170.0
    workload_timeout_s: float = 75.0
    resnet_timeout_s: float = 120.0
    study_timeout_s: float = 150.0
    cross_device_timeout_s: float = 180.0  # every way in one child: ~10 s of start-up each plus its rounds
    budget_s: float = 480.0  # the whole command: a row that cannot start in time is skipped, the table printed


FULL = Sizes()
# --tiny: every row for real on a CPU, small (a rehearsal of the whole command on a machine without a GPU)
TINY = Sizes(
    workload_rounds=2,
    workload_threads=1,  # a loaded 2-core machine: 2 threads each would fight the other processes
    workload_actors=(1, 2),
    client_batches=(1, 10),
    resnet_shape=(3, 8, 8),
    resnet_samples=300,
    resnet_rounds=2,
    resnet_actors=(1, 2),
    resnet_client_batches=(1, 10),
    cross_device_rounds=3,
    cross_device_args=("--users", "20", "--samples-per-user", "20", "--cohort", "4", "--image", "3x8x8"),
    study_trials=2,
    study_rounds=2,
    study_concurrent=2,
    tests_timeout_s=300.0,
    workload_timeout_s=300.0,
    resnet_timeout_s=300.0,
    study_timeout_s=300.0,
    cross_device_timeout_s=400.0,
    budget_s=1800.0,
)

# the targets, each a ratio measured side by side in this run: (row key, operator, bound)
IN_PROCESS_MAX = 1.05  # the engine in-process on CUDA, per round, x the plain CUDA loop
ACTORS_MAX = 1.10  # the engine on the most actors (4) sharing the GPU, x the plain CUDA loop
EVAL_SHARE_MAX = 0.20  # ResNet-18: a round's evaluation / its training
STUDY_SPEEDUP_MIN = 2.0  # the study, 4 trials at once against 1 at a time
BATCHED_MAX = 0.5  # the engine in-process with the largest client_batch (10), per round, x the plain CUDA loop
CROSS_DEVICE_PFL_MIN = 3.0  # cross-device: pfl-research's s/round / the engine's fastest way's, same GPU
CROSS_DEVICE_WAYS = ("plain", "actors_sums", "batched", "pfl")  # benchmarks/cross_device.py's names
CROSS_DEVICE_BATCH = 10  # client_batch of its batched way

# ------------------------------------------------------------------------------------------------ rows


def median_after_warmup(values: Sequence[float]) -> float:
    """The median of rounds 2..N (round 1 is warm-up); of round 1 alone when there is no other."""
    values = [v for v in values if v is not None]
    if not values:
        return math.nan
    return statistics.median(values[1:] or values)


def judge(value: float | None, op: str, bound: float) -> str:
    """PASS / MISS against a target; n/a where the value could not be measured."""
    if value is None or not math.isfinite(value):
        return "n/a"
    return "PASS" if (value <= bound if op == "<=" else value >= bound) else "MISS"


def _row(part: str, name: str, machine: str, **fields: Any) -> dict[str, Any]:
    row = {"part": part, "name": name, "machine": machine, "result": "", "target": None}
    row.update(fields)
    return row


def set_target(row: dict[str, Any], column: str, op: str, bound: float) -> dict[str, Any]:
    row["target"] = {"column": column, "op": op, "bound": bound}
    row["result"] = judge(row.get(column), op, bound)
    return row


def failed_row(part: str, name: str, machine: str, error: str, wall_s: float = math.nan, result: str = "FAIL"):
    return _row(part, name, machine, wall_s=wall_s, error=error, result=result)


def _speedup(per_round: float, baseline_s: float | None) -> float | None:
    if not baseline_s or not math.isfinite(baseline_s) or not math.isfinite(per_round) or per_round <= 0:
        return None
    return baseline_s / per_round


def _run_fields(report: dict[str, Any], per_round: float, wall_s: float, baseline_s: float | None) -> dict[str, Any]:
    """The columns every engine run reports (the workload's and ResNet-18's rows)."""
    return {
        "s_per_round": per_round,
        "wall_s": wall_s,
        "final_acc": report["test_acc"][-1],
        "round_times": report["round_times"],
        "placed": report.get("placed"),
        "peak_gpu_mib": report.get("peak_gpu_mib"),
        "client_batch": report.get("client_batch"),
        "speedup": _speedup(per_round, baseline_s),
    }


def workload_row(
    name: str,
    machine: str,
    report: dict[str, Any],
    wall_s: float,
    reference_s: float | None,
    part: str = "workload",
    baseline_s: float | None = None,
) -> dict[str, Any]:
    """A way of running the workload: its median s/round and the ratio to the plain CUDA loop's of this run;
    `baseline_s` (client batching: K = 1's s/round) gives the speed-up over it."""
    per_round = median_after_warmup(report["round_times"])
    ratio = per_round / reference_s if reference_s and math.isfinite(reference_s) else math.nan
    return _row(part, name, machine, ratio=ratio, **_run_fields(report, per_round, wall_s, baseline_s))


def resnet_row(
    name: str,
    machine: str,
    report: dict[str, Any],
    wall_s: float,
    part: str = "resnet",
    baseline_s: float | None = None,
) -> dict[str, Any]:
    """A ResNet-18 run: per round, the training (local training and transport: the round's time less the
    driver's evaluation and aggregation) and the evaluation apart; medians over rounds 2..N. `baseline_s`
    (client batching: K = 1's s/round) gives the speed-up over it."""
    evaluate, aggregate, rounds = report["evaluate_s"], report["aggregate_s"], report["round_time_s"]
    train = [r - e - (a if a is not None and math.isfinite(a) else 0.0) for r, e, a in zip(rounds, evaluate, aggregate)]
    shares = [e / t if t > 0 else math.nan for e, t in zip(evaluate, train)]
    per_round = median_after_warmup(report["round_times"])
    return _row(
        part,
        name,
        machine,
        train_s=median_after_warmup(train),
        eval_s=median_after_warmup(evaluate),
        eval_share=median_after_warmup(shares),
        **_run_fields(report, per_round, wall_s, baseline_s),
    )


def study_row(
    name: str, machine: str, wall_s: float, trials: int, rounds: int, baseline_wall_s: float | None = None
) -> dict[str, Any]:
    """A study's wall time; `baseline_wall_s` (1 trial at a time) gives the speed-up of this one."""
    speedup = baseline_wall_s / wall_s if baseline_wall_s and math.isfinite(baseline_wall_s) else None
    return _row("study", name, machine, wall_s=wall_s, trials=trials, rounds=rounds, speedup=speedup)


def cross_device_rows(machine: str, summary: dict[str, Any]) -> list[dict[str, Any]]:
    """benchmarks/cross_device.py's JSON (`rows`: each way's median s/round and ratios) as this table's rows: x the
    plain loop, and the speed-up over pfl; the engine's fastest way against CROSS_DEVICE_PFL_MIN (n/a without pfl)."""
    rows = []
    for found in summary["rows"]:
        pfl_ratio = found.get("pfl_ratio")
        finite = pfl_ratio is not None and math.isfinite(pfl_ratio) and pfl_ratio > 0
        row = _row(
            "cross_device",
            f"cross-device: {found['way']}",
            machine,
            s_per_round=found["s_per_round"],
            ratio=found["plain_ratio"],
            final_acc=(found.get("final_acc") or [math.nan])[-1],
            speedup=1 / pfl_ratio if finite else None,
        )
        row["way"] = found["way"]
        rows.append(row)
    engine = [r for r in rows if r["way"] not in ("plain", "plain_cl", "pfl") and math.isfinite(r["s_per_round"])]
    if engine:
        set_target(min(engine, key=lambda r: r["s_per_round"]), "speedup", ">=", CROSS_DEVICE_PFL_MIN)
    return rows


# ------------------------------------------------------------------------------------------------ the table

_TARGET_TEXT = {
    "ratio": "x plain {op} {bound:.2f}",
    "eval_share": "eval/train {op} {pct}",
    "speedup": "speed-up {op} {bound:.1f}x",
}
_TARGET_TEXT["tests"] = "all pass"


def target_text(row: dict[str, Any]) -> str:
    target = row.get("target")
    if not target:
        return ""
    op = "≤" if target["op"] == "<=" else "≥"
    return _TARGET_TEXT[target["column"]].format(op=op, bound=target["bound"], pct=f"{100 * target['bound']:.0f} %")


def _num(value: Any, spec: str, suffix: str = "") -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "—"
    return f"{value:{spec}}{suffix}"


def format_table(rows: Sequence[dict[str, Any]]) -> str:
    lines = [
        "| part | measurement | machine | s/round (median r2-N) | x plain loop | train s/round | eval s/round "
        "| eval/train | wall | peak GPU mem | speed-up | target | result |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        share = row.get("eval_share")
        cells = [
            row["part"],
            row["name"],
            row["machine"],
            _num(row.get("s_per_round"), ".3f", " s"),
            _num(row.get("ratio"), ".2f", "x"),
            _num(row.get("train_s"), ".3f", " s"),
            _num(row.get("eval_s"), ".3f", " s"),
            _num(None if share is None else 100 * share, ".1f", " %"),
            _num(row.get("wall_s"), ".1f", " s"),
            _num(row.get("peak_gpu_mib"), ".0f", " MiB"),
            _num(row.get("speedup"), ".2f", "x"),
            target_text(row),
            row.get("result") or "",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


class Recorder:
    """The rows so far, rewritten to `path` (atomically) after each: a run cut off keeps what it measured."""

    def __init__(self, path: str | None) -> None:
        self.path = Path(path) if path else None
        self.rows: list[dict[str, Any]] = []

    def add(self, row: dict[str, Any]) -> dict[str, Any]:
        self.rows.append(row)
        if self.path is not None:
            partial = self.path.with_name(self.path.name + ".partial")
            partial.write_text(json.dumps(self.rows, indent=1, default=str))
            os.replace(partial, self.path)
        return row

    @property
    def failed(self) -> list[dict[str, Any]]:
        return [row for row in self.rows if row.get("result") in ("FAIL", "SKIP")]


# ------------------------------------------------------------------------------------------------ children


@dataclass
class Child:
    returncode: int | None
    stdout: str
    stderr: str
    wall_s: float
    timed_out: bool

    def tail(self, chars: int = 2000) -> str:
        return (self.stderr.strip() or self.stdout.strip())[-chars:]

    def report(self) -> dict[str, Any]:
        """The child's own report, the last JSON line of its stdout; an error with its output's tail otherwise."""
        if self.timed_out:
            raise ChildError(f"timed out after {self.wall_s:.0f} s; output tail:\n{self.tail()}")
        if self.returncode != 0:
            raise ChildError(f"exited with {self.returncode}; output tail:\n{self.tail()}")
        report = last_json(self.stdout)
        if report is None:
            raise ChildError(f"no JSON report on stdout; output tail:\n{self.tail()}")
        return report


class ChildError(RuntimeError):
    pass


def _end_group(process: subprocess.Popen) -> None:
    """End what is left of the child's process group (Ray's processes included): SIGTERM, then SIGKILL."""
    for sig, grace in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 0.0)):
        try:
            os.killpg(process.pid, sig)
        except (ProcessLookupError, PermissionError):
            return
        try:
            process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            pass


def child_env() -> dict[str, str]:
    return {**with_repo_on_path(), "PYTHONUNBUFFERED": "1"}


def run_child(command: Sequence[str], timeout_s: float, echo: Callable[[str], None] | None = None) -> Child:
    """`command` in its own process group from the repository root, timed from outside; killed with everything it
    started after `timeout_s`. `echo` gets each stdout line as it comes."""
    started = time.perf_counter()
    process = subprocess.Popen(
        list(command),
        cwd=REPO,
        env=child_env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",
        start_new_session=True,  # its own group: a timeout ends its Ray cluster too
    )
    out: list[str] = []
    err: list[str] = []

    def drain(stream, sink: list[str], each: Callable[[str], None] | None) -> None:
        for line in stream:
            sink.append(line)
            if each is not None:
                each(line.rstrip("\n"))

    readers = [
        threading.Thread(target=drain, args=(process.stdout, out, echo), daemon=True),
        threading.Thread(target=drain, args=(process.stderr, err, None), daemon=True),
    ]
    for reader in readers:
        reader.start()
    timed_out = False
    try:
        process.wait(timeout=max(timeout_s, 0.1))
    except subprocess.TimeoutExpired:
        timed_out = True
    finally:  # also on Ctrl-C or SIGTERM of this command: nothing it started outlives it
        wall = time.perf_counter() - started
        _end_group(process)
    for reader in readers:
        reader.join(timeout=5.0)  # a leftover that kept the pipe open must not hang the command
    return Child(process.returncode, "".join(out), "".join(err), wall, timed_out)


def python_module(module: str, *args: str) -> list[str]:
    return [sys.executable, "-m", module, *args]


# ------------------------------------------------------------------------------------------------ experiments


def resnet_experiment(sizes: Sizes, actors: int, device: str, client_batch: int = 1) -> dict[str, Any]:
    """ResNet-18 on synthetic CIFAR-10-shaped data, IID over the clients (equal work per client), diagnostics off
    (they are not the evaluation being timed). Each actor 1/actors of the GPU; the driver evaluates on it too.
    actors 0: in-process on the whole GPU. `client_batch`: resources.client_batch (clients trained at once)."""
    resources: dict[str, Any] = {"actors": actors, "cpus_per_actor": 1, "device": device, "client_batch": client_batch}
    if device == "cuda":
        resources["gpus_per_actor"] = round(1 / actors, 4) if actors else 1.0
    return {
        "dataset": "synthetic",
        "synthetic": {"shape": list(sizes.resnet_shape), "classes": 10, "samples": sizes.resnet_samples},
        "partition": {"kind": "iid", "clients": sizes.resnet_clients, "seed": 0},
        "model": "resnet18",
        "rounds": sizes.resnet_rounds,
        "local_epochs": 1,
        "batch_size": 64,
        "eval_batch_size": 500,
        "diagnostics": {"spectrum": False, "client_accuracy": False, "decomposition": False, "every": 0},
        "checkpoint_every": 0,
        "resources": resources,
    }


def study_space(sizes: Sizes, concurrent: int, device: str) -> dict[str, Any]:
    """bench/study.py's study of the workload (FedProx's mu, no early stopping), every trial training in its own
    process (actors 0) on 1/study_concurrent of the GPU whatever `concurrent` is: only the trials at once differ."""
    from benchmarks import study

    space = study.study_space(sizes.study_trials, sizes.study_rounds, actors=0)
    resources: dict[str, Any] = {"actors": 0, "cpus_per_actor": 1, "device": device}
    if device == "cuda":
        resources["gpus_per_actor"] = round(1 / sizes.study_concurrent, 4)
    space["base"]["resources"] = resources
    space["tune"]["max_concurrent"] = concurrent
    return space


def resnet_child(sizes: Sizes, actors: int, device: str, threads: int, client_batch: int = 1) -> dict[str, Any]:
    """In the child process: one ResNet-18 run through the engine (bench/workload.py's timed_run)."""
    import torch

    from benchmarks.workload import peak_gpu_mib, timed_run
    from raytune_fl.config import ExperimentConfig
    from raytune_fl.engine.report import CLIENT_LOG_KEY

    torch.set_num_threads(threads)
    experiment = ExperimentConfig.model_validate(resnet_experiment(sizes, actors, device, client_batch))
    rows, times = timed_run(experiment)
    missing = [key for key in ("evaluate_s", "aggregate_s") if key not in rows[-1]]
    if missing:
        raise RuntimeError(f"the engine's round metrics lack {', '.join(missing)}")
    return {
        "round_times": times,
        "round_time_s": [row["round_time_s"] for row in rows],
        "evaluate_s": [row["evaluate_s"] for row in rows],
        "aggregate_s": [row["aggregate_s"] for row in rows],
        "test_acc": [row["test_acc"] for row in rows],
        "placed": sorted({(r["device"], r["gpus"]) for row in rows for r in row[CLIENT_LOG_KEY]}),
        "client_batch": client_batch,
        "peak_gpu_mib": peak_gpu_mib(device) if not actors else None,  # the actors' memory is not this process's
    }


def plain_child(rounds: int, device: str, threads: int) -> dict[str, Any]:
    """In the child process: the plain loop (bench/reference.py, as `python -m benchmarks.reference`),
    its report with this process's peak GPU memory added."""
    import torch

    from benchmarks import reference
    from benchmarks.workload import peak_gpu_mib

    torch.set_num_threads(threads)
    report = reference.run(rounds, 0, device)
    report["peak_gpu_mib"] = peak_gpu_mib(device)
    return report


# ------------------------------------------------------------------------------------------------ the command


class Check:
    """The measurements of one command, in order, against a deadline."""

    def __init__(self, sizes: Sizes, device: str, tiny: bool, machine: str, recorder: Recorder) -> None:
        self.sizes, self.device, self.tiny, self.machine, self.recorder = sizes, device, tiny, machine, recorder
        self.started = time.perf_counter()
        self.deadline = self.started + sizes.budget_s
        self.plain_s: float | None = None  # the plain loop's s/round in this run: every workload ratio divides by it

    def say(self, text: str) -> None:
        print(f"[{time.perf_counter() - self.started:6.1f} s] {text}", flush=True)

    def child(self, part: str, name: str, command: Sequence[str], timeout_s: float, echo=None) -> Child | None:
        """Run one measurement's child within what is left of the budget; None (a SKIP row) when too little is."""
        left = self.deadline - time.perf_counter()
        if left < 15:
            self.say(f"{part}: {name}: skipped, {left:.0f} s left of the {self.sizes.budget_s:.0f} s budget")
            self.recorder.add(failed_row(part, name, self.machine, "skipped: out of time", result="SKIP"))
            return None
        self.say(f"{part}: {name} ...")
        return run_child(command, min(timeout_s, left), echo)

    def fail(self, part: str, name: str, error: str, wall_s: float) -> None:
        self.say(f"{part}: {name}: FAILED ({wall_s:.1f} s)\n{_indent(error)}")
        self.recorder.add(failed_row(part, name, self.machine, error, wall_s))

    def tiny_args(self) -> list[str]:
        return ["--tiny"] if self.tiny else []

    # ---- the parts

    def tests(self) -> None:
        files = [f for f in GPU_TESTS if (REPO / f).exists()]
        if not files:  # pytest without files would run the whole suite
            self.fail("tests", "GPU test tier", f"none of {', '.join(GPU_TESTS)} exists", 0.0)
            return
        name = "GPU test tier: " + ", ".join(Path(f).name for f in files)
        command = python_module("pytest", "-q", "-m", "slow or not slow", "-o", "addopts=", "-p", "no:cacheprovider")
        child = self.child("tests", name, [*command, *files], self.sizes.tests_timeout_s, echo=_echo("tests"))
        if child is None:
            return
        summary = next((line for line in reversed(child.stdout.splitlines()) if line.strip()), "")
        counts = summary.strip("= ").rsplit(" in ", 1)[0] if " in " in summary else ""  # "3 passed, 1 skipped"
        row = _row("tests", f"{name} ({counts})" if counts else name, self.machine, wall_s=child.wall_s)
        row["summary"] = summary
        row["target"] = {"column": "tests", "op": "", "bound": 0}
        row["result"] = "PASS" if child.returncode == 0 and not child.timed_out else "FAIL"
        if row["result"] == "FAIL":
            row["error"] = "timed out" if child.timed_out else f"pytest exited with {child.returncode}: {summary}"
            self.say(f"tests: FAILED ({child.wall_s:.1f} s): {row['error']}\n{_indent(child.stderr[-2000:])}")
        else:
            self.say(f"tests: {summary} ({child.wall_s:.1f} s)")
        self.recorder.add(row)

    def workload_common(self) -> list[str]:
        return ["--rounds", str(self.sizes.workload_rounds), "--threads", str(self.sizes.workload_threads)]

    def loop_name(self) -> str:
        return f"plain loop ({self.device.upper() if self.device == 'cuda' else self.device})"

    def plain_loop(self) -> None:
        """The plain loop's row: the yardstick of every workload ratio (`plain_s`)."""
        name = self.loop_name()
        args = ("--child", "plain", *self.workload_common(), "--device", self.device)
        command = python_module("benchmarks.gpu", *args)
        child = self.child("workload", name, command, self.sizes.workload_timeout_s)
        if child is None:
            return
        try:
            report = child.report()
        except ChildError as error:
            self.fail("workload", name, str(error), child.wall_s)
            return
        row = workload_row(name, self.machine, report, child.wall_s, None)
        row["ratio"] = 1.0
        self.plain_s = row["s_per_round"]
        self.recorder.add(row)
        self.say(
            f"workload: {name}: {row['s_per_round']:.3f} s/round, whole run {child.wall_s:.1f} s, "
            f"final test acc {row['final_acc']:.3f}{_gpu_text(row)}"
        )

    def workload(self) -> None:
        sizes, device = self.sizes, self.device
        common = self.workload_common()
        self.plain_loop()
        ways: list[tuple[str, list[str]]] = [
            (
                "engine in-process",
                python_module("benchmarks.workload", "--child", "engine_inprocess", *common, "--device", device),
            ),
        ]
        for actors in sizes.workload_actors:
            args = ("--child", "engine_actors", *common, "--actors", str(actors), "--device", device)
            ways.append((f"engine, {_actors(actors)}", python_module("benchmarks.workload", *args)))
        for name, command in ways:
            child = self.child("workload", name, command, sizes.workload_timeout_s)
            if child is None:
                continue
            try:
                report = child.report()
            except ChildError as error:
                self.fail("workload", name, str(error), child.wall_s)
                continue
            row = workload_row(name, self.machine, report, child.wall_s, self.plain_s)
            if name == "engine in-process":
                set_target(row, "ratio", "<=", IN_PROCESS_MAX)
            elif name == f"engine, {_actors(max(sizes.workload_actors))}":
                set_target(row, "ratio", "<=", ACTORS_MAX)
            self.recorder.add(row)
            self.say(
                f"workload: {name}: {row['s_per_round']:.3f} s/round, x{row['ratio']:.2f} the plain loop, "
                f"whole run {child.wall_s:.1f} s, final test acc {row['final_acc']:.3f}{_gpu_text(row)} "
                f"{row['result']}"
            )

    def workload_batched(self) -> None:
        """The engine in-process with client_batch K, beside this run's plain loop (run first when the workload
        part did not run it); the largest K against BATCHED_MAX, every K's speed-up over K = 1."""
        sizes, part = self.sizes, "workload_batched"
        if self.plain_s is None:
            self.plain_loop()
        baseline: float | None = None
        for k in sizes.client_batches:
            name = f"engine in-process, K={k}"
            args = ("--child", "engine_batched", *self.workload_common(), "--client-batch", str(k))
            command = python_module("benchmarks.workload", *args, "--device", self.device)
            child = self.child(part, name, command, sizes.workload_timeout_s)
            if child is None:
                continue
            try:
                report = child.report()
            except ChildError as error:
                self.fail(part, name, str(error), child.wall_s)
                continue
            row = workload_row(name, self.machine, report, child.wall_s, self.plain_s, part, baseline)
            if k == 1:
                baseline = row["s_per_round"]
            if k == max(sizes.client_batches):
                set_target(row, "ratio", "<=", BATCHED_MAX)
            self.recorder.add(row)
            speedup = f", {row['speedup']:.2f}x faster than K=1" if row.get("speedup") else ""
            self.say(
                f"{part}: {name}: {row['s_per_round']:.3f} s/round, x{row['ratio']:.2f} the plain loop{speedup}, "
                f"whole run {child.wall_s:.1f} s, final test acc {row['final_acc']:.3f}{_gpu_text(row)} "
                f"{row['result']}"
            )

    def cross_device(self) -> None:
        """benchmarks/cross_device.py on this device, its ways in one child (one repetition, interleaving none)."""
        part, sizes = "cross_device", self.sizes
        name = f"cross-device protocol: {', '.join(CROSS_DEVICE_WAYS)}"
        with tempfile.TemporaryDirectory(prefix="gpu-check-cross-device-") as workdir:
            out = Path(workdir) / "cross_device.json"
            args = ["--device", self.device, "--ways", ",".join(CROSS_DEVICE_WAYS), "--reps", "1"]
            args += ["--client-batch", str(CROSS_DEVICE_BATCH), "--rounds", str(sizes.cross_device_rounds)]
            args += [*sizes.cross_device_args, "--json", str(out)]
            command = python_module("benchmarks.cross_device", *args)
            child = self.child(part, name, command, sizes.cross_device_timeout_s)
            if child is None:
                return
            if child.timed_out or child.returncode != 0 or not out.exists():
                how = "timed out" if child.timed_out else f"exited with {child.returncode}"
                self.fail(part, name, f"cross_device.py {how}; output tail:\n{child.tail()}", child.wall_s)
                return
            summary = json.loads(out.read_text())
        if "pfl" not in {row["way"] for row in summary["rows"]}:
            skipped = next((line for line in child.stdout.splitlines() if line.startswith("pfl skipped")), "")
            self.say(f"{part}: {skipped or 'pfl did not run'}")
        for row in cross_device_rows(self.machine, summary):
            self.recorder.add(row)
            over_pfl = f", {row['speedup']:.2f}x faster than pfl" if row.get("speedup") else ""
            self.say(
                f"{part}: {row['name']}: {row['s_per_round']:.3f} s/round, x{row['ratio']:.2f} the plain loop"
                f"{over_pfl} {row['result']}"
            )

    def resnet_batched(self) -> None:
        """ResNet-18 in-process on the whole GPU with client_batch K; every K's speed-up over K = 1."""
        part = "resnet_batched"
        baseline: float | None = None
        for k in self.sizes.resnet_client_batches:
            name = f"resnet18 in-process, K={k}"
            args = ("--child", "resnet", "--actors", "0", "--client-batch", str(k), "--device", self.device)
            command = python_module("benchmarks.gpu", *args, *self.tiny_args())
            child = self.child(part, name, command, self.sizes.resnet_timeout_s)
            if child is None:
                continue
            try:
                row = resnet_row(name, self.machine, child.report(), child.wall_s, part, baseline)
            except ChildError as error:
                self.fail(part, name, str(error), child.wall_s)
                continue
            if k == 1:
                baseline = row["s_per_round"]
            self.recorder.add(row)
            speedup = f", {row['speedup']:.2f}x faster than K=1" if row.get("speedup") else ""
            self.say(
                f"{part}: {name}: {row['s_per_round']:.3f} s/round{speedup}, train {row['train_s']:.3f} s, "
                f"eval {row['eval_s']:.3f} s, whole run {child.wall_s:.1f} s{_gpu_text(row)}"
            )

    def resnet(self) -> None:
        for actors in self.sizes.resnet_actors:
            name = f"resnet18, {_actors(actors)}"
            args = ("--child", "resnet", "--actors", str(actors), "--device", self.device, *self.tiny_args())
            child = self.child("resnet", name, python_module("benchmarks.gpu", *args), self.sizes.resnet_timeout_s)
            if child is None:
                continue
            try:
                row = resnet_row(name, self.machine, child.report(), child.wall_s)
            except ChildError as error:
                self.fail("resnet", name, str(error), child.wall_s)
                continue
            set_target(row, "eval_share", "<=", EVAL_SHARE_MAX)
            self.recorder.add(row)
            self.say(
                f"resnet: {name}: {row['s_per_round']:.3f} s/round, train {row['train_s']:.3f} s, "
                f"eval {row['eval_s']:.3f} s ({100 * row['eval_share']:.1f} % of train), "
                f"whole run {child.wall_s:.1f} s {row['result']}"
            )

    def study(self) -> None:
        import yaml

        sizes = self.sizes
        baseline: float | None = None
        for concurrent in (1, sizes.study_concurrent):
            name = f"{sizes.study_trials} trials x {sizes.study_rounds} rounds, " + (
                "1 at a time" if concurrent == 1 else f"{concurrent} at once"
            )
            with tempfile.TemporaryDirectory(prefix="gpu-check-study-") as workdir:
                space = Path(workdir) / "study.yaml"
                space.write_text(yaml.safe_dump(study_space(sizes, concurrent, self.device)))
                uri = f"sqlite:///{Path(workdir) / 'mlflow.db'}"
                command = [sys.executable, str(TUNE_SCRIPT), "--space", str(space), "--mlflow-uri", uri]
                command += ["--storage", str(Path(workdir) / "ray_results"), "--no-models"]
                child = self.child("study", name, command, sizes.study_timeout_s)
                if child is None:
                    continue
                if child.timed_out or child.returncode != 0:  # tune.py prints no JSON report: its status counts
                    how = "timed out" if child.timed_out else f"exited with {child.returncode}"
                    self.fail("study", name, f"tune.py {how}; output tail:\n{child.tail()}", child.wall_s)
                    continue
                try:
                    trials = _trials(uri)  # what the study's own MLflow store holds
                except Exception as error:  # a store that cannot be read is this row's failure, not the command's
                    self.fail("study", name, f"reading the study's MLflow store: {error!r}", child.wall_s)
                    continue
            done = len(trials)
            rounds = sum(t["rounds"] for t in trials)
            row = study_row(name, self.machine, child.wall_s, done, rounds, baseline if concurrent > 1 else None)
            if concurrent == 1:
                baseline = child.wall_s
            else:
                set_target(row, "speedup", ">=", STUDY_SPEEDUP_MIN)
            if (done, rounds) != (sizes.study_trials, sizes.study_trials * sizes.study_rounds):
                row["result"] = "FAIL"
                row["error"] = f"{done} trials, {rounds} rounds in the store; expected {sizes.study_trials} x "
                row["error"] += f"{sizes.study_rounds}"
            self.recorder.add(row)
            speedup = f", speed-up {row['speedup']:.2f}x" if row.get("speedup") else ""
            self.say(
                f"study: {name}: wall {child.wall_s:.1f} s ({done} trials, {rounds} rounds){speedup} {row['result']}"
            )


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def _trials(uri: str) -> list[dict[str, float]]:
    from benchmarks.study import trial_times

    return trial_times(uri)


def _actors(count: int) -> str:
    return f"{count} actor{'s' if count != 1 else ''}"


def _gpu_text(row: dict[str, Any]) -> str:
    peak = row.get("peak_gpu_mib")
    return "" if peak is None else f", peak GPU memory {peak:.0f} MiB"


def _indent(text: str) -> str:
    return "\n".join("    " + line for line in text.strip().splitlines())


def _echo(prefix: str) -> Callable[[str], None]:
    def echo(line: str) -> None:
        print(f"    {prefix}| {line}", flush=True)

    return echo


def machine_name(device: str) -> str:
    if device == "cuda":
        import torch

        return torch.cuda.get_device_name()
    try:
        with open("/proc/cpuinfo") as f:
            model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "CPU")
    except OSError:
        model = "CPU"
    return model


def parse_only(text: str | None, skip_tests: bool) -> list[str]:
    wanted = [p.strip() for p in text.split(",") if p.strip()] if text else list(PARTS)
    unknown = [p for p in wanted if p not in PARTS]
    if unknown:
        raise ValueError(f"--only: unknown {', '.join(unknown)}; known: {', '.join(PARTS)}")
    return [p for p in PARTS if p in wanted and not (skip_tests and p == "tests")]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], epilog="See the module docstring of benchmarks/gpu.py."
    )
    parser.add_argument("--json", help="write the rows to this JSON file, each as soon as it is measured")
    parser.add_argument("--skip-tests", action="store_true", help="leave out the GPU test tier")
    parser.add_argument("--only", help=f"comma-separated parts to run, of: {', '.join(PARTS)} (default: all)")
    parser.add_argument(
        "--budget-s",
        type=float,
        help=f"seconds for the whole command (default {FULL.budget_s:.0f}; rows that cannot start in time are skipped)",
    )
    # a rehearsal without a GPU: every row for real on the CPU, small (not a measurement)
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda", help=argparse.SUPPRESS)
    parser.add_argument("--tiny", action="store_true", help=argparse.SUPPRESS)
    # in a child process: one ResNet-18 run or the plain loop, its JSON report on stdout
    parser.add_argument("--child", choices=("resnet", "plain"), help=argparse.SUPPRESS)
    parser.add_argument("--actors", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--client-batch", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--rounds", type=int, default=6, help=argparse.SUPPRESS)  # --child plain
    parser.add_argument("--threads", type=int, default=2, help=argparse.SUPPRESS)  # --child plain
    args = parser.parse_args(argv)
    sizes = TINY if args.tiny else FULL
    if args.child == "plain":
        print(json.dumps(plain_child(args.rounds, args.device, args.threads)))
        return 0
    if args.child:
        report = resnet_child(sizes, args.actors, args.device, sizes.workload_threads, args.client_batch)
        print(json.dumps(report))
        return 0
    try:
        parts = parse_only(args.only, args.skip_tests)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if args.budget_s is not None:
        sizes = dataclasses.replace(sizes, budget_s=args.budget_s)
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print(
            f"gpu_check: no CUDA GPU here (torch {torch.__version__}, CUDA build {torch.version.cuda or 'none'}): "
            "nothing was run; run it on a GPU machine",
            file=sys.stderr,
        )
        return 2
    machine = machine_name(args.device)
    recorder = Recorder(args.json)
    check = Check(sizes, args.device, args.tiny, machine, recorder)
    mode = " (--tiny on the CPU: a rehearsal, not a measurement)" if args.device == "cpu" else ""
    check.say(
        f"gpu_check on {machine}, torch {torch.__version__}, {os.cpu_count()} CPUs{mode}; parts: {', '.join(parts)}"
    )
    # SIGTERM (a time limit) ends the run like Ctrl-C: the running child is ended, the table printed
    signal.signal(signal.SIGTERM, _interrupt)
    interrupted = False
    try:
        for part in parts:
            getattr(check, part)()
    except KeyboardInterrupt:
        interrupted = True
        check.say("interrupted: the table holds what was measured")
    print(
        f"\nGPU check on {machine} ({args.device}), total {time.perf_counter() - check.started:.0f} s. Single runs: "
        f"one run per way, medians over rounds 2..N of that run (the workload {sizes.workload_rounds} rounds, "
        f"ResNet-18 {sizes.resnet_rounds}). Ratios to the plain loop and the speed-ups (studies: over 1 trial at a "
        "time; client batching K: over K=1, per round) are measured side by side in this run; train = a round's time "
        "less the driver's evaluation and aggregation; peak GPU memory: torch's, of the one process that trains "
        "every client."
    )
    print(format_table(recorder.rows), flush=True)
    failed = recorder.failed
    if failed:
        print(f"\n{len(failed)} row(s) failed or skipped: {', '.join(r['name'] for r in failed)}", flush=True)
    return 1 if failed or interrupted else 0


if __name__ == "__main__":
    sys.exit(main())
