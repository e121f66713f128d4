"""PBT's learning-rate schedule against the best constant rate at equal compute, both ablated over held-out seeds.

FedUV, whose official code decays the clients' learning rate by a cosine over the rounds, on the benchmark workload
(docs/explanation/workload.md: MNIST-5k, Dirichlet alpha 0.1 over 10 clients) with a 10 % validation split, its own
hyperparameters at their defaults, clients in the trial's process. The clients' learning rate `optimizer.lr` is
searched three ways, each with the same budget of `--trials` trials of `--rounds` rounds (trial-rounds):

- `constant`: TPE over a constant rate (no early stopping, so every trial spends its rounds);
- `cosine`: TPE over the base rate of the paper's cosine decay (a schedule chosen by hand, for reference);
- `pbt`: PBT over rounds, a population of `--trials` drawn from the same range, the worse quarter copying a better
  trial's checkpoint every `--interval` rounds and going on with its rate perturbed: the selected trial's schedule.

`ablate` then re-runs each selection (PBT's: its schedule, replayed segment by segment) over `--seeds` training
seeds no tuning trial used, and the report gives per way the final test accuracy (mean ± SE over the seeds) and,
each way against `constant`, the mean of the per-seed differences (the same seeds and split for every way, so the
pairs share their noise) with its 95 % t-interval: a difference whose interval holds 0 is inside the noise.

The pure part (the paired differences, the spaces) imports neither Ray nor MLflow.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from benchmarks.proc import run_echoed
from benchmarks.search import base_config
from benchmarks.search_efficiency import machine_lines, positive_int

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = REPO / "scripts"
EXPERIMENT = "bench-pbt-schedule"
METHOD = "feduv"  # its official code decays the learning rate (cosine over the rounds, stepped once per round)
LR_RANGE = {"loguniform": [0.003, 0.3]}  # two decades around the workload's 0.01
COSINE = {"lr": 0.01, "momentum": 0.9, "weight_decay": 1.0e-5, "schedule": {"kind": "cosine"}}  # the workload's
WAYS = ("constant", "cosine", "pbt")
REFERENCE = "constant"
STORE = "mlflow.db"
RESULTS_FILE = "ablation_results.parquet"  # what ablate writes into --out, a row per cell


@dataclass(frozen=True)
class Budget:
    trials: int  # per way: TPE's trials, PBT's population
    rounds: int
    interval: int  # PBT's rounds between perturbations
    seeds: int  # ablation seeds

    def described(self) -> str:
        spent = self.trials * self.rounds
        return (
            f"{self.trials} trials x {self.rounds} rounds per way ({spent} trial-rounds), PBT every {self.interval} "
            f"rounds; ablated over {self.seeds} held-out seeds"
        )


# ---------------------------------------------------------------- the spaces (pure)


def variant(way: str) -> dict[str, Any]:
    out: dict[str, Any] = {"method": METHOD, "search": {"optimizer.lr": dict(LR_RANGE)}}
    if way == "cosine":
        out["optimizer"] = dict(COSINE)
    return out


def space(ways: Sequence[str], budget: Budget, tune: Mapping[str, Any]) -> dict[str, Any]:
    base = base_config(budget.rounds, actors=0)
    common = {"num_samples": budget.trials, "metric": "val_acc", "seed": 0}
    return {"name": EXPERIMENT, "base": base, "variants": {w: variant(w) for w in ways}, "tune": {**common, **tune}}


def tpe_space(budget: Budget) -> dict[str, Any]:
    """`constant` and `cosine`: TPE, every trial to its last round (the budget is the trials' rounds)."""
    return space(["constant", "cosine"], budget, {"sampler": "tpe", "max_concurrent": 1, "scheduler": {"asha": None}})


def pbt_space(budget: Budget) -> dict[str, Any]:
    pbt = {"interval": budget.interval, "quantile": 0.25}
    return space(["pbt"], budget, {"sampler": "random", "scheduler": {"asha": None, "pbt": pbt}})


def ablation_space(budget: Budget) -> dict[str, Any]:
    """All three ways in one file: `ablate` finds each one's newest study by its name (its tune section unused)."""
    return space(WAYS, budget, {"sampler": "tpe", "max_concurrent": 1, "scheduler": {"asha": None}})


# ---------------------------------------------------------------- the comparison (pure)


def t_quantile(df: int) -> float:
    from scipy import stats

    return float(stats.t.ppf(0.975, df))


@dataclass(frozen=True)
class Paired:
    way: str
    mean: float
    low: float
    high: float
    n: int

    @property
    def inside_noise(self) -> bool:
        return self.low <= 0 <= self.high


def mean_se(values: Sequence[float]) -> tuple[float, float]:
    mean = statistics.fmean(values)
    return mean, (statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else math.nan)


def paired(way: str, scores: Mapping[int, float], reference: Mapping[int, float]) -> Paired:
    """`way` minus the reference over the seeds both ran: the mean difference and its 95 % t-interval."""
    seeds = sorted(set(scores) & set(reference))
    diffs = [scores[s] - reference[s] for s in seeds]
    mean, se = mean_se(diffs)
    half = t_quantile(len(diffs) - 1) * se if len(diffs) > 1 else math.nan
    return Paired(way, mean, mean - half, mean + half, len(diffs))


def format_report(scores: Mapping[str, Mapping[int, float]], schedules: Mapping[str, str]) -> str:
    lines = ["| way | selected configuration | ablated test_acc, mean ± SE | minus constant, mean [95 % CI] |"]
    lines.append("|---|---|---|---|")
    for way in [w for w in WAYS if w in scores]:
        mean, se = mean_se(list(scores[way].values()))
        versus = "-"
        if way != REFERENCE and REFERENCE in scores:
            d = paired(way, scores[way], scores[REFERENCE])
            noise = "inside the noise" if d.inside_noise else ("better" if d.low > 0 else "worse")
            versus = f"{d.mean:+.4f} [{d.low:+.4f}, {d.high:+.4f}] ({noise}, {d.n} seeds)"
        lines.append(f"| {way} | {schedules.get(way, '?')} | {mean:.4f} ± {se:.4f} ({len(scores[way])}) | {versus} |")
    return "\n".join(lines)


# ---------------------------------------------------------------- the runs


def shown(line: str) -> bool:
    """The lines worth echoing: a variant's start, a trial's end, the selected schedule, an error."""
    return line.startswith(("===", "error", "schedule", "ablation:")) or (line.startswith("[") and "trial " in line)


def run_script(script: str, args: Sequence[str], label: str) -> float:
    """scripts/<script> with `args`, its trial and variant lines echoed; returns its wall time."""
    return run_echoed([sys.executable, str(SCRIPTS / script), *args], label, shown, width=220)


def write_space(path: Path, data: Mapping[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(dict(data), sort_keys=False))
    return path


def run_all(budget: Budget, workdir: Path, uri: str, tune: bool = True) -> Path:
    """Tune the three ways (unless `tune` is False: the workdir's studies), then ablate them; returns the
    ablation's out folder."""
    common = ["--mlflow-uri", uri, "--storage", str(workdir / "ray_results")]
    tpe = write_space(workdir / "tpe.yaml", tpe_space(budget))
    pbt = write_space(workdir / "pbt.yaml", pbt_space(budget))
    both = write_space(workdir / "ablation.yaml", ablation_space(budget))
    for label, path in (("constant+cosine", tpe), ("pbt", pbt)) if tune else ():
        print(f"tune {label}: {budget.trials} trials x {budget.rounds} rounds per way", flush=True)
        wall = run_script("tune.py", ["--space", str(path), *common, "--no-models"], label)
        print(f"tune {label}: done in {wall:.0f} s", flush=True)
    out = workdir / f"reports-{budget.seeds}-seeds"
    print(f"ablate: {len(WAYS)} ways x {budget.seeds} held-out seeds", flush=True)
    wall = run_script("ablate.py", ["--space", str(both), *common, "--seeds", str(budget.seeds), "--out", str(out),
                                    "--no-dashboard"], "ablate")  # fmt: skip
    print(f"ablate: done in {wall:.0f} s", flush=True)
    return out


def read_scores(out: Path) -> dict[str, dict[int, float]]:
    """Per way, per training seed: the cell's final test accuracy (the ablation's results file)."""
    import pandas as pd

    frame = pd.read_parquet(out / RESULTS_FILE)
    frame = frame[frame["status"] == "finished"]  # a failed cell scores nothing (ablate's table says so too)
    return {str(way): dict(zip(rows["seed"].astype(int), rows["test_acc"].astype(float), strict=True))
            for way, rows in frame.groupby("variant")}  # fmt: skip


def read_schedules(uri: str) -> dict[str, str]:
    """Per way, what its study selected: PBT's schedule, TPE's constant (or base) rate."""
    from raytune_fl.config import ParamSchedule
    from raytune_fl.tracking.schema import TAG_BEST_SCHEDULE, TAG_PARENT_RUN, TAG_STAGE, TAG_VARIANT
    from raytune_fl.tracking.store import experiment_id, open_client, search_all

    client = open_client(uri)
    runs = search_all(client, experiment_id(client, EXPERIMENT), f"tags.{TAG_STAGE} = 'tune'")
    out = {}
    for parent in sorted((r for r in runs if TAG_PARENT_RUN not in r.data.tags), key=lambda r: r.info.start_time):
        way, tags = parent.data.tags.get(TAG_VARIANT, ""), parent.data.tags
        if TAG_BEST_SCHEDULE in tags:
            out[way] = ParamSchedule.from_json(tags[TAG_BEST_SCHEDULE]).describe()
        elif "best.optimizer.lr" in tags:
            out[way] = f"lr={float(tags['best.optimizer.lr']):.4g}" + (" (cosine)" if way == "cosine" else "")
    return out


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.pbt_schedule", description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=positive_int, default=8, help="trials (PBT: population) per way (default 8)")
    parser.add_argument("--rounds", type=positive_int, default=20, help="rounds per trial (default 20)")
    parser.add_argument("--interval", type=positive_int, default=4, help="PBT's rounds between perturbations (4)")
    parser.add_argument("--seeds", type=positive_int, default=5, help="held-out seeds per way in ablate (default 5)")
    parser.add_argument("--quick", action="store_true", help="tiny: 4 trials of 4 rounds, interval 2, 2 seeds")
    parser.add_argument("--workdir", help="keep the MLflow store, spaces and reports here (default: temporary)")
    parser.add_argument("--out", help="also write the table (markdown, with the machine and command) here")
    parser.add_argument("--reuse", action="store_true", help="tune nothing: ablate the studies a --workdir holds "
                        "again (e.g. over more --seeds; give the --trials and --rounds they ran)")  # fmt: skip
    args = parser.parse_args(argv)
    if args.reuse and not (args.workdir and (Path(args.workdir) / STORE).exists()):
        parser.error(f"--reuse: ablates the studies of a --workdir's {STORE}; give a --workdir that holds one")
    if args.quick:
        args.trials, args.rounds, args.interval, args.seeds = 4, 4, 2, 2
    if args.interval >= args.rounds:
        parser.error(f"--interval: {args.interval} must be below --rounds ({args.rounds}): PBT perturbs between rounds")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    budget = Budget(args.trials, args.rounds, args.interval, args.seeds)
    header = machine_lines(argv)
    header[1] = header[1].replace("benchmarks.search_efficiency", "benchmarks.pbt_schedule")
    print("\n".join(header), flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-pbt-schedule-") as scratch:
        workdir = Path(args.workdir or scratch)
        workdir.mkdir(parents=True, exist_ok=True)
        uri = f"sqlite:///{workdir / STORE}"
        out = run_all(budget, workdir, uri, tune=not args.reuse)
        text = format_report(read_scores(out), read_schedules(uri))
    text = f"{budget.described()}\n\n{text}"
    print(text)
    if args.out:
        Path(args.out).write_text("\n".join(header) + "\n\n" + text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
