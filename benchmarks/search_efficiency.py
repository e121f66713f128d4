"""Search efficiency: the trial-rounds each searcher needs to come within one SE of the best any searcher found.

One small study, FedAvgM's server learning rate and momentum (baselines.yaml's ranges) on the benchmark workload
(docs/explanation/workload.md: MNIST-5k, Dirichlet alpha 0.1 over 10 clients) with a 10 % validation split, clients
in the trial's process (`resources.actors: 0`), `--rounds` rounds, is searched by each searcher with the same budget
of `--trials` trials, over `--seeds` sampler seeds (variants `<searcher>-1`, `-2`, ...: each variant's sampler seed
comes from its name; the training seed is the same everywhere, so every searcher searches the same landscape).
Each searcher's studies are one `scripts/tune.py` run, read back from its MLflow store.

- Cost: trial-rounds, the rounds the trials trained (a trial ASHA or Hyperband stopped counts the rounds it ran),
  counted in the order the driver logged them (trials that run side by side, as PBT's, count as they interleave).
- Target: the best validation accuracy any study's selection reached (a trial that ran every round), less its
  binomial standard error sqrt(p(1-p)/n_val). A study reaches it at the round a trial ends every round at or above
  it; the trial-rounds logged up to then are what it needed ("not reached": within its budget it did not).
- Selected: what the study selects (tune/selection.py: trials that ran every round first, then the best final
  val_acc), its val_acc and test_acc.
- Warm start (`tpe_warm`): `--per-setting` from alpha = WARM_SOURCE_ALPHA to the workload's alpha, so that the
  second setting's study starts from the first's best configurations; it is compared with the cold TPE + ASHA
  studies (`tpe_asha`) at that setting: the trial-rounds to the cold studies' best val_acc within one SE. The source
  studies' trial-rounds are said apart (a per-setting run pays them anyway).

The pure part (the histories and what is computed from them) imports neither Ray nor MLflow.
"""

from __future__ import annotations

import argparse
import datetime
import math
import shlex
import statistics
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from benchmarks.proc import run_echoed
from benchmarks.search import base_config
from benchmarks.workload import WORKLOAD
from raytune_fl.tune.selection import best_of
from raytune_fl.tune.uncertainty import accuracy_se

REPO = Path(__file__).resolve().parents[1]
TUNE_SCRIPT = REPO / "scripts" / "tune.py"
EXPERIMENT = "bench-search-efficiency"
METHOD = "fedavgm"  # two continuous hyperparameters with a clear optimum: what a searcher must find
SEARCH: dict[str, dict[str, list[float]]] = {  # baselines.yaml's fedavgm ranges
    "server_lr": {"loguniform": [0.3, 3.0]},
    "server_momentum": {"uniform": [0.0, 0.95]},
}
# `--space wide`: the clients' learning rate over two decades beside them, where lr x server_lr x momentum can
# diverge: a good region a cold study takes longer to find, so a warm start has something to save
SPACES: dict[str, dict[str, dict[str, list[float]]]] = {
    "small": SEARCH,
    "wide": {"optimizer.lr": {"loguniform": [0.001, 0.3]}, **SEARCH},
}
STORE = "mlflow.db"  # in the workdir
WARM_SOURCE_ALPHA = 0.5  # the neighbouring setting a warm-started study takes its first configurations from


@dataclass(frozen=True)
class Searcher:
    """How a searcher runs: its `tune:` settings beside the shared ones (trials, metric, seed)."""

    tune: Mapping[str, Any]
    grid: bool = False  # its ranges carry explicit grid points (as many as the trial budget allows)
    warm: bool = False  # warm-started: run per setting, the source setting first


NO_EARLY_STOP = {"asha": None}
SEARCHERS: dict[str, Searcher] = {
    "tpe_asha": Searcher({"sampler": "tpe", "scheduler": {"asha": {}}}),  # today's default
    "tpe": Searcher({"sampler": "tpe", "scheduler": NO_EARLY_STOP}),
    "random": Searcher({"sampler": "random", "scheduler": NO_EARLY_STOP}),
    "grid": Searcher({"sampler": "grid", "scheduler": NO_EARLY_STOP}, grid=True),
    "gp": Searcher({"sampler": "gp", "scheduler": NO_EARLY_STOP}),
    "cmaes": Searcher({"sampler": "cmaes", "scheduler": NO_EARLY_STOP}),
    "qmc": Searcher({"sampler": "qmc", "scheduler": NO_EARLY_STOP}),
    "hyperband": Searcher({"sampler": "tpe", "scheduler": {**NO_EARLY_STOP, "hyperband": {}}}),
    "median": Searcher({"sampler": "tpe", "scheduler": {**NO_EARLY_STOP, "median": {}}}),
    # Ray's PBT draws its first population at random (it admits no searcher) and runs it side by side
    "pbt": Searcher({"sampler": "random", "scheduler": {**NO_EARLY_STOP, "pbt": {}}}),
    # PB2: PBT whose copying trials take values a GP bandit proposes (the benchmark's ranges are all numeric)
    "pb2": Searcher({"sampler": "random", "scheduler": {**NO_EARLY_STOP, "pbt": {"explore": "bandit"}}}),
    "tpe_warm": Searcher({"sampler": "tpe", "scheduler": {"asha": {}}}, warm=True),
}
COLD = "tpe_asha"  # what the warm-started studies are compared with
QUICK_SEARCHERS = ("tpe_asha", "random")


# ---------------------------------------------------------------- the histories and what they give (pure)


@dataclass(frozen=True)
class RoundPoint:
    """One round a trial trained, as the driver logged it."""

    time_ms: int  # when the driver logged it: the order trial-rounds were spent in
    round: int
    val_acc: float
    test_acc: float


@dataclass(frozen=True)
class TrialHistory:
    points: tuple[RoundPoint, ...]  # in round order

    @property
    def last(self) -> RoundPoint:
        return self.points[-1]

    def ran_every_round(self, rounds: int) -> bool:
        return self.last.round >= rounds


@dataclass(frozen=True)
class Study:
    """One searcher's study under one sampler seed."""

    searcher: str
    seed: int  # the variant's index: <searcher>-<seed>
    rounds: int
    val_samples: int | None  # the validation images val_acc is a proportion of
    trials: tuple[TrialHistory, ...]  # in start order
    setting: str | None = None  # a per-setting study's setting (the warm start's source or target)
    wall_s: float = math.nan  # the study's wall time, its start to its end (Ray's start before it not included)


def spent_order(trials: Sequence[TrialHistory]) -> list[tuple[int, RoundPoint]]:
    """(trial index, round) of every trained round, in the order the driver logged them."""
    points = [(point, index) for index, trial in enumerate(trials) for point in trial.points]
    return [(index, point) for point, index in sorted(points, key=lambda p: (p[0].time_ms, p[1], p[0].round))]


def trial_rounds(trials: Sequence[TrialHistory]) -> int:
    """The study's whole cost: every round every trial trained."""
    return sum(len(trial.points) for trial in trials)


def trial_rounds_to_reach(trials: Sequence[TrialHistory], rounds: int, target: float) -> int | None:
    """The trial-rounds spent until a trial ended its last round at `target` or above; None: none did."""
    for spent, (_, point) in enumerate(spent_order(trials), 1):
        if point.round >= rounds and point.val_acc >= target:
            return spent
    return None


def selected(trials: Sequence[TrialHistory], rounds: int) -> TrialHistory | None:
    """The trial the study selects: one that ran every round first, then the best final val_acc."""
    return best_of(((t.ran_every_round(rounds), t.last.val_acc, t) for t in trials), maximize=True)


def best_so_far(trials: Sequence[TrialHistory], rounds: int) -> list[dict[str, Any]]:
    """Per trial, in the order they ended: its rounds, its final val_acc, and the best val_acc of the trials that ran
    every round by then (NaN before the first)."""
    ended = sorted(range(len(trials)), key=lambda i: (trials[i].last.time_ms, i))
    best, rows = math.nan, []
    for index in ended:
        trial = trials[index]
        value = trial.last.val_acc
        if trial.ran_every_round(rounds) and math.isfinite(value) and (math.isnan(best) or value > best):
            best = value
        rows.append({"trial": index + 1, "rounds_run": len(trial.points), "val_acc": trial.last.val_acc,
                     "best_so_far": best})  # fmt: skip
    return rows


def target_of(best_val_acc: float, val_samples: int | None) -> float:
    """Within one standard error of the best: best - sqrt(p(1-p)/n) (the best itself when n is unknown)."""
    return best_val_acc - (accuracy_se(best_val_acc, val_samples) or 0.0)


def best_found(studies: Iterable[Study]) -> tuple[float, int | None]:
    """The best val_acc any study selected among trials that ran every round, and its study's validation size."""
    found = []
    for study in studies:
        pick = selected(study.trials, study.rounds)
        if pick is not None and pick.ran_every_round(study.rounds):
            found.append((pick.last.val_acc, study.val_samples))
    return max(found, key=lambda f: f[0]) if found else (math.nan, None)


def median_cost(costs: Sequence[int | None]) -> float:
    """The median trial-rounds over seeds, "not reached" (None) counted as more than any (inf)."""
    return statistics.median([math.inf if c is None else c for c in costs])


def mean_se(values: Sequence[float]) -> tuple[float, float]:
    """The mean and its standard error over seeds (NaN SE for one seed)."""
    if len(values) < 2:
        return (values[0] if values else math.nan), math.nan
    return statistics.mean(values), statistics.stdev(values) / math.sqrt(len(values))


@dataclass(frozen=True)
class SearcherResult:
    """One searcher over its seeds: per seed, what it needed and what it selected."""

    searcher: str
    to_target: tuple[int | None, ...]
    budget: tuple[int, ...]  # the whole study's trial-rounds
    best_val: tuple[float, ...]
    test_acc: tuple[float, ...]
    wall_s: float  # per study, the median


def searcher_result(name: str, studies: Sequence[Study], target: float) -> SearcherResult:
    picks = [(study, selected(study.trials, study.rounds)) for study in studies]
    return SearcherResult(
        name,
        tuple(trial_rounds_to_reach(s.trials, s.rounds, target) for s in studies),
        tuple(trial_rounds(s.trials) for s in studies),
        tuple(p.last.val_acc if p else math.nan for _, p in picks),
        tuple(p.last.test_acc if p else math.nan for _, p in picks),
        statistics.median(s.wall_s for s in studies),
    )


@dataclass(frozen=True)
class WarmComparison:
    """Warm-started studies against the cold ones at the same setting: trial-rounds to the cold studies' best."""

    target: float
    cold: tuple[int | None, ...]
    warm: tuple[int | None, ...]
    source_budget: tuple[int, ...]  # the source setting's studies' trial-rounds

    @property
    def ratio(self) -> float:
        """median warm / median cold (the issue's target: at most 0.5); NaN when the cold ones never reached it."""
        cold, warm = median_cost(self.cold), median_cost(self.warm)
        return warm / cold if math.isfinite(cold) and cold > 0 else math.nan


def warm_comparison(cold: Sequence[Study], warm: Sequence[Study], source: Sequence[Study]) -> WarmComparison:
    target = target_of(*best_found(cold))
    return WarmComparison(
        target,
        tuple(trial_rounds_to_reach(s.trials, s.rounds, target) for s in cold),
        tuple(trial_rounds_to_reach(s.trials, s.rounds, target) for s in warm),
        tuple(trial_rounds(s.trials) for s in source),
    )


# ---------------------------------------------------------------- the tables


def cost_text(costs: Sequence[int | None]) -> str:
    """`median (min-max)` over seeds, with how many reached it when not all did."""
    reached = sorted(c for c in costs if c is not None)
    if not reached:
        return f"not reached (0/{len(costs)})"
    median = median_cost(costs)
    top = "not reached" if len(reached) < len(costs) else str(reached[-1])
    shown = "not reached" if math.isinf(median) else f"{median:g}"
    span = f" ({reached[0]}-{top})" if len(costs) > 1 else ""
    count = f", {len(reached)}/{len(costs)} reached" if len(reached) < len(costs) else ""
    return f"{shown}{span}{count}"


def mean_se_text(values: Sequence[float]) -> str:
    mean, se = mean_se(values)
    return f"{mean:.4f}" + (f" ± {se:.4f}" if math.isfinite(se) else "")


def format_table(results: Sequence[SearcherResult], best: float, target: float) -> str:
    lines = [
        f"target: val_acc {target:.4f} (the best any study selected, {best:.4f}, less one SE)",
        "",
        "| searcher | seeds | trial-rounds to target, median (range) | trial-rounds spent, median | "
        "selected val_acc, mean ± SE | selected test_acc, mean ± SE | wall per study |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results:
        wall = f"{r.wall_s:.0f} s" if math.isfinite(r.wall_s) else "n/a"
        lines.append(
            f"| {r.searcher} | {len(r.budget)} | {cost_text(r.to_target)} | {statistics.median(r.budget):g} "
            f"| {mean_se_text(r.best_val)} | {mean_se_text(r.test_acc)} | {wall} |"
        )
    return "\n".join(lines)


def format_warm(comparison: WarmComparison) -> str:
    ratio = f"{comparison.ratio:.2f}"
    if not math.isfinite(comparison.ratio):  # one side never reached the target
        ratio = "n/a (the cold studies never reached it)" if math.isnan(comparison.ratio) else "n/a (warm never did)"
    source = statistics.median(comparison.source_budget) if comparison.source_budget else math.nan
    return "\n".join(
        [
            f"warm start: target val_acc {comparison.target:.4f} (the cold studies' best less one SE)",
            "",
            "| studies | trial-rounds to target, median (range) |",
            "|---|---|",
            f"| cold ({COLD}) | {cost_text(comparison.cold)} |",
            f"| warm-started (tpe_warm) | {cost_text(comparison.warm)} |",
            "",  # the ratio below the table, not a row of it
            f"warm / cold (medians): {ratio} (target: at most 0.5); the source setting's studies spent "
            f"{source:g} trial-rounds (median) before them (a per-setting run pays them for that setting's own "
            "result)",
        ]
    )


# ---------------------------------------------------------------- the studies


@dataclass(frozen=True)
class Budget:
    """What every searcher gets: trials per study, rounds per trial, studies (sampler seeds); and the setting."""

    trials: int
    rounds: int
    seeds: int
    main_alpha: float = WORKLOAD["partition"]["alpha"]
    space: str = "small"  # of SPACES


def grid_points(budget: int, dimensions: int) -> int:
    """Points per axis of a grid of at most `budget` points (at least 2)."""
    return max(2, math.floor(budget ** (1 / dimensions) + 1e-9))  # 1e-9: 16 ** 0.5 is 4, not 3.99...


def centred_axis(distribution: Mapping[str, Sequence[float]], points: int) -> list[float]:
    """`points` grid values over a YAML range, each at the centre of one of `points` equal cells (log cells for
    loguniform): a grid as a researcher lays it, inside the range; a 2-point grid of the ends tries only extremes."""
    (kind, (low, high)), *_ = ((k, v) for k, v in distribution.items() if k in ("loguniform", "uniform"))
    centres = [(i + 0.5) / points for i in range(points)]
    if kind == "loguniform":
        return [low * (high / low) ** c for c in centres]
    return [low + (high - low) * c for c in centres]


def searcher_space(name: str, budget: Budget) -> dict[str, Any]:
    """The search-space file a searcher's `tune.py` run takes: one variant per sampler seed."""
    searcher = SEARCHERS[name]
    search: dict[str, dict[str, Any]] = {k: dict(v) for k, v in SPACES[budget.space].items()}
    if searcher.grid:
        points = grid_points(budget.trials, len(search))
        search = {k: {**v, "grid": centred_axis(v, points)} for k, v in search.items()}
    base = base_config(budget.rounds, actors=0)
    base["partition"] = {**base["partition"], "alpha": budget.main_alpha}
    variants = {f"{name}-{k}": {"method": METHOD, "search": search} for k in range(1, budget.seeds + 1)}
    tune = {"num_samples": budget.trials, "max_concurrent": 1, "metric": "val_acc", "seed": 0, **searcher.tune}
    return {"name": EXPERIMENT, "base": base, "variants": variants, "tune": tune}


def space_problem(name: str, budget: Budget) -> str | None:
    """Why the searcher's space is refused (a sampler or scheduler this tree does not have), None when it is not:
    said before any study runs, not an hour in."""
    from pydantic import ValidationError

    from raytune_fl.config import SearchSpace

    try:
        SearchSpace.model_validate(searcher_space(name, budget))
    except ValidationError as error:
        first = error.errors()[0]
        return f"{'.'.join(map(str, first['loc']))}: {first['msg']}"
    return None


def main_setting(budget: Budget) -> str:
    """The label `tune --per-setting` gives the main setting's studies."""
    return f"partition.alpha={budget.main_alpha}"


def tune_command(name: str, space: Path, uri: str, scratch: Path, budget: Budget) -> list[str]:
    command = [sys.executable, str(TUNE_SCRIPT), "--space", str(space), "--mlflow-uri", uri, "--no-models"]
    command += ["--storage", str(scratch / "ray_results")]
    if SEARCHERS[name].warm:
        command += ["--per-setting", f"partition.alpha={WARM_SOURCE_ALPHA},{budget.main_alpha}"]
    return command


def is_progress(line: str) -> bool:
    """tune.py's lines worth echoing: a variant's start, a trial's end, an error."""
    return line.startswith(("=== variant", "error")) or (line.startswith("[") and " trial " in line)


def run_searcher(name: str, budget: Budget, workdir: Path, uri: str) -> float:
    """A searcher's studies through tune.py, its trial lines echoed; returns its wall time."""
    space = workdir / f"{name}.yaml"
    space.write_text(yaml.safe_dump(searcher_space(name, budget)))
    return run_echoed(tune_command(name, space, uri, workdir, budget), name, is_progress)


# ---------------------------------------------------------------- read back from MLflow


def trial_history(client: Any, run_id: str) -> TrialHistory:
    from raytune_fl.tracking.store import metric_history

    tests = {m.step: m.value for m in metric_history(client, run_id, "test_acc")}
    vals = sorted(metric_history(client, run_id, "val_acc"), key=lambda m: m.step)
    return TrialHistory(tuple(RoundPoint(m.timestamp, m.step, m.value, tests.get(m.step, math.nan)) for m in vals))


def read_studies(uri: str, rounds: int, since_ms: int = 0) -> list[Study]:
    """Every tune study that started at `since_ms` or later and ended, with its trials' histories."""
    from raytune_fl.tracking.schema import METRIC_VAL_SAMPLES, TAG_PARENT_RUN, TAG_SETTING, TAG_STAGE, TAG_VARIANT
    from raytune_fl.tracking.store import experiment_id, open_client, search_all

    client = open_client(uri)
    experiment = experiment_id(client, EXPERIMENT)
    runs = search_all(client, experiment, f"tags.{TAG_STAGE} = 'tune'") if experiment is not None else []
    studies = []
    parents = [r for r in runs if TAG_PARENT_RUN not in r.data.tags and r.info.start_time >= since_ms]
    for parent in [r for r in parents if r.info.status == "FINISHED"]:  # a running or killed study selected nothing
        searcher, _, seed = parent.data.tags.get(TAG_VARIANT, "").rpartition("-")
        children = sorted(
            (r for r in runs if r.data.tags.get(TAG_PARENT_RUN) == parent.info.run_id), key=lambda r: r.info.start_time
        )
        histories = [trial_history(client, child.info.run_id) for child in children]
        samples = parent.data.metrics.get(METRIC_VAL_SAMPLES)
        studies.append(
            Study(
                searcher,
                int(seed),
                rounds,
                int(samples) if samples else None,
                tuple(h for h in histories if h.points),
                parent.data.tags.get(TAG_SETTING),
                (parent.info.end_time - parent.info.start_time) / 1000,
            )
        )
    return sorted(studies, key=lambda s: (s.searcher, s.setting or "", s.seed))


# ---------------------------------------------------------------- the run


def machine_lines(argv: Sequence[str]) -> list[str]:
    """The CPU (model, torch's capability), the date and the exact command, for the top of the output."""
    import torch

    from raytune_fl.cli.reproduce import machine

    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return [
        f"{date}; {machine()}; torch CPU capability {torch.backends.cpu.get_cpu_capability()}",
        f"command: python -m benchmarks.search_efficiency {shlex.join(argv)}".rstrip(),
    ]


def report(studies: Sequence[Study], budget: Budget) -> str:
    """The searchers' table and, when warm-started studies ran, the warm-start comparison."""
    setting = main_setting(budget)
    main = [s for s in studies if s.setting in (None, setting)]
    best, samples = best_found(main)
    target = target_of(best, samples)
    order = [name for name in SEARCHERS if any(s.searcher == name for s in main)]
    results = [searcher_result(n, [s for s in main if s.searcher == n], target) for n in order]
    parts = [format_table(results, best, target)]
    warm = [s for s in main if s.searcher == "tpe_warm"]
    cold = [s for s in main if s.searcher == COLD]
    if warm and cold:
        source = [s for s in studies if s.searcher == "tpe_warm" and s.setting not in (None, setting)]
        parts.append(format_warm(warm_comparison(cold, warm, source)))
    return "\n\n".join(parts)


def trial_records(studies: Sequence[Study]) -> list[dict[str, Any]]:
    """Per study, per trial: its rounds run and the best-so-far val_acc (the --json file)."""
    return [
        {"searcher": s.searcher, "seed": s.seed, "setting": s.setting, "trials": best_so_far(s.trials, s.rounds)}
        for s in studies
    ]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # the bad flag on the first line, the usage after it
        self.exit(2, f"error: {message}\n{self.format_usage()}")


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"at least 1, got {value}")
    return value


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = _Parser(prog="python -m benchmarks.search_efficiency", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help=f"tiny: {', '.join(QUICK_SEARCHERS)}, 1 seed, 3 trials "
                        "of 3 rounds (a test that it runs), unless given below")  # fmt: skip
    parser.add_argument("--searchers", help=f"comma-separated, of {', '.join(SEARCHERS)}; default: all")
    parser.add_argument("--seeds", type=positive_int, help="sampler seeds (studies) per searcher (default 3)")
    parser.add_argument("--trials", type=positive_int, help="trials per study, the budget (default 16)")
    parser.add_argument("--rounds", type=positive_int, help="rounds per trial (default 10)")
    parser.add_argument("--space", choices=SPACES, default="small", help="small: FedAvgM's server_lr and "
                        "server_momentum (default); wide: optimizer.lr over [0.001, 0.3] beside them")  # fmt: skip
    parser.add_argument("--out", help="also write the tables (markdown, with the machine and command) to this file")
    parser.add_argument("--json", help="also write per study and trial its rounds run and best-so-far val_acc here")
    parser.add_argument("--workdir", help="keep the MLflow store and space files here (default: a temporary one)")
    parser.add_argument("--reuse", action="store_true", help="run nothing: report the studies --workdir holds "
                        "(those that ended; give the --rounds they ran)")  # fmt: skip
    args = parser.parse_args(argv)
    chosen = args.searchers or ",".join(QUICK_SEARCHERS if args.quick else SEARCHERS)
    args.searchers = [s.strip() for s in chosen.split(",") if s.strip()]
    unknown = [s for s in args.searchers if s not in SEARCHERS]
    if unknown or not args.searchers:
        parser.error(f"--searchers: unknown {', '.join(unknown) or '(none given)'}; known: {', '.join(SEARCHERS)}")
    quick = {"seeds": 1, "trials": 3, "rounds": 3} if args.quick else {"seeds": 3, "trials": 16, "rounds": 10}
    for key, value in quick.items():
        setattr(args, key, getattr(args, key) or value)
    if args.reuse and not (args.workdir and (Path(args.workdir) / STORE).exists()):
        parser.error(f"--reuse: reports the studies of a --workdir's {STORE}; give a --workdir that holds one")
    return args


def run_searchers(names: Sequence[str], budget: Budget, workdir: Path, uri: str) -> None:
    for index, name in enumerate(names, 1):
        print(f"[{index}/{len(names)}] {name}: {budget.seeds} studies x {budget.trials} trials x "
              f"{budget.rounds} rounds", flush=True)  # fmt: skip
        wall = run_searcher(name, budget, workdir, uri)
        print(f"[{index}/{len(names)}] {name}: done in {wall:.0f} s (Ray's start included)", flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    budget = Budget(args.trials, args.rounds, args.seeds, space=args.space)
    refused = {name: why for name in args.searchers if not args.reuse and (why := space_problem(name, budget))}
    if refused:
        said = "; ".join(f"{name}: {why}" for name, why in refused.items())
        print(f"error: --searchers: refused by this tree's config: {said}", file=sys.stderr)
        return 2
    header = machine_lines(argv)
    print("\n".join(header), flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-search-efficiency-") as scratch:
        workdir = Path(args.workdir or scratch)
        workdir.mkdir(parents=True, exist_ok=True)
        uri, since_ms = f"sqlite:///{workdir / STORE}", 0 if args.reuse else int(time.time() * 1000)
        if not args.reuse:
            run_searchers(args.searchers, budget, workdir, uri)
        studies = [s for s in read_studies(uri, budget.rounds, since_ms) if s.searcher in args.searchers]
    text = report(studies, budget)
    print(text)
    if args.out:
        Path(args.out).write_text("\n".join(header) + "\n\n" + text + "\n")
    if args.json:
        import json

        Path(args.json).write_text(json.dumps(trial_records(studies), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
