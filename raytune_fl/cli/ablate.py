"""`scripts/ablate.py`: every variant at its tuned configuration, over seeds x settings, into a paper-style table."""

from __future__ import annotations

import argparse
import dataclasses
import math
import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from raytune_fl.ablation.seeds import AUTO_START, HELD_OUT, SeedPlan, seed_plan
from raytune_fl.cli import common, progress, stopping
from raytune_fl.config import ConfigError, ExperimentConfig, SearchSpace
from raytune_fl.metrics import TABLE_METRICS, TEST_ACC
from raytune_fl.registry import UnknownNameError

if TYPE_CHECKING:  # the command's --help and its checks load none of them
    import pandas as pd

    from raytune_fl.ablation.grid import GridAxis
    from raytune_fl.ablation.plan import AblationPlan, AutoSeeds
    from raytune_fl.ablation.run import AblationOutcome
    from raytune_fl.engine.data import FederatedData
    from raytune_fl.tracking import StudyTracker


def build_parser() -> argparse.ArgumentParser:
    parser = common.command_parser(
        "ablate.py",
        "Re-run each variant's best configuration (from its tuned study in MLflow, else the YAML's "
        "fixed values) over seeds x settings as Ray Tune trials; write the mean ± std table and the dashboard.",
    )
    _add_seed_options(parser)
    parser.add_argument(
        "--grid",
        action="append",
        default=[],
        metavar="KEY=V1,V2",
        help="a setting axis (repeatable; the table's columns are their product): alpha (Dirichlet), rho "
        "(participation), clients, local_epochs, rounds, lr, batch_size, dropout, or any dotted field of base",
    )
    common.add_overrides(parser)
    parser.add_argument(
        "--ignore-studies", action="store_true", help="use the YAML's fixed values even where a tuned study exists"
    )
    parser.add_argument(
        "--per-setting",
        action="store_true",
        help="each --grid setting runs the configuration its variant was tuned to at that setting (studies made by "
        "tune --per-setting over the same grid), not the one study over the file's base",
    )
    parser.add_argument(
        "--metric",
        choices=TABLE_METRICS,
        default=TABLE_METRICS[0],
        help="the table's final-round score (default: %(default)s): test_acc on the global test set; on each "
        "client's own test part (base.partition.test_fraction), personal_test_acc (the model each client uses: its "
        "own where the method personalises, else the global one) or client_test_acc (the global model)",
    )
    common.add_cluster(parser)
    _add_output_options(parser)
    return parser


def _add_seed_options(parser: argparse.ArgumentParser) -> None:
    """--seeds (a count or auto), its rule and --seeds auto's target, --partition-seeds."""
    parser.add_argument(
        "--seeds",
        type=_seeds_option,
        default=3,
        metavar="N|auto",
        help="training seeds per cell (default: %(default)s), held out from the search: counting up from "
        "base.seed + 1, the first N seeds no tuning trial of an ablated variant's study trained at (MLflow records "
        "both). auto: add seeds in rounds until --target-halfwidth or --max-seeds",
    )
    parser.add_argument(
        "--include-tuning-seed",
        action="store_true",
        help="take base.seed + 0..N-1 instead, the tuning seed included: a tuned variant's cell at it re-runs its "
        "selected trial, which favours it (the table and MLflow say so)",
    )
    parser.add_argument(
        "--target-halfwidth",
        type=float,
        metavar="POINTS",
        help="with --seeds auto: stop adding seeds once every comparison with --reference has an interval at most "
        "this many points wide on each side, at the family's Bonferroni level 1 - 0.05/m (m comparisons; at least as "
        "wide as any interval the comparisons print); it stops on the widths, never on a p-value: the tests stay valid",
    )
    parser.add_argument(
        "--max-seeds",
        type=int,
        metavar="M",
        help="with --seeds auto: the most training seeds per cell (it stops there whatever the widths)",
    )
    parser.add_argument(
        "--reference",
        metavar="VARIANT",
        help="with --seeds auto: the variant every other is compared with (default: the file's first variant)",
    )
    parser.add_argument(
        "--partition-seeds",
        type=int,
        default=1,
        metavar="N",
        help="splits per cell, crossed with --seeds: base.partition.seed + 0..N-1, so the table's spread includes "
        "the partition's noise (default: %(default)s, the file's split only)",
    )


def _add_output_options(parser: argparse.ArgumentParser) -> None:
    """Where the table goes, --resume, and what else the run writes and prints."""
    parser.add_argument(
        "--out", type=common.expand_home, help="where the table and results go; default: reports/<space name>/"
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="continue the latest ablation with the same plan: cells that finished are kept, the rest run",
    )
    parser.add_argument("--no-dashboard", action="store_true", help="skip building the dashboard at the end")
    parser.add_argument(
        "--log-models",
        action="store_true",
        help="log each finished cell's final global model as an MLflow PyTorch model on its run (a few seconds "
        "and about a model's size of artifact storage per cell)",
    )
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="also print a line when each cell starts and one per cell round (its scores, loss and round time); "
        "by default a live status line (a line per cell and a summary every 30 s when not a terminal)",
    )
    from raytune_fl.tracking.system_metrics import SYSTEM_METRICS_HELP, SystemMetricsFlag  # MLflow's switch

    parser.add_argument("--system-metrics", action=SystemMetricsFlag, help=SYSTEM_METRICS_HELP)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    state = stopping.StopState("before the ablation started")
    with stopping.guarded("ablate", argv), progress.watch_silences():  # a line when a phase is silent for long
        try:
            return _main(args, state)
        except stopping.StudyInterrupted as stop:  # Ctrl-C or SIGTERM: the finished cells are kept in MLflow
            return state.stopped(stop)


def _parent_started(state: stopping.StopState, run_id: str) -> None:
    """From the ablation's parent run on, a stop leaves an ablation that --resume continues."""
    state.cut = (
        f"ablation run {run_id} stopped (KILLED): its finished cells are kept, the cut ones run again on "
        "--resume; no table was written"
    )
    state.resumable = True


@dataclass(frozen=True)
class Checked:
    """The command line and the data, checked before anything is written or Ray starts."""

    space: SearchSpace
    variants: list[str]
    axes: list[GridAxis]
    auto: AutoSeeds | None  # --seeds auto's target, cap and reference variant (None: a fixed number of seeds)
    uri: str
    out_dir: Path
    data: dict[str, FederatedData]  # every partition the cells train on, by data label


def _main(args: argparse.Namespace, state: stopping.StopState) -> int:
    try:
        checked = _check(args)
    except (ConfigError, UnknownNameError) as error:
        return common.fail(error)
    from raytune_fl.tracking.store import existing_experiment

    uri, space = checked.uri, checked.space
    print(f"MLflow tracking URI: {uri}  (experiment {space.name!r})", flush=True)
    try:  # read from the store, which may not exist yet: the tuned studies and --resume's ablation
        found = existing_experiment(uri, space.name)
    except Exception as error:  # each tracking backend fails with its own exception types
        return common.fail(f"--mlflow-uri: cannot use {uri}: {type(error).__name__}: {error}")
    try:
        plan = _plan(args, checked, found)
    except ConfigError as error:
        return common.fail(error)
    resume = None
    if args.resume:
        resumed = _resumed(args, plan, found, uri)
        if resumed is None:
            return common.fail(
                f"--resume: MLflow has no ablation with this plan (same space, overrides, grid and seeds) in "
                f"experiment {space.name!r} at {uri}"
            )
        plan, resume = resumed
    try:  # every check passed: Ray (one trial must fit on it), then what the ablation writes
        tracker = _open(args, checked)
    except ConfigError as error:
        return common.fail(error)
    try:
        plan, outcome = _run(args, checked, tracker, plan, resume, state)
    except ConfigError as error:  # a cell's configuration error, found in its trial (tune/refusal.py): no "next"
        return common.fail(error)
    return _report(args, checked, plan, outcome, tracker.experiment_id)


def _check(args: argparse.Namespace) -> Checked:
    """Everything that can be wrong with the command line or the data, before anything is written or Ray starts."""
    from raytune_fl.ablation.grid import check_partition_seeds, parse_grid, settings, splits

    check_seed_options(args)
    if args.partition_seeds < 1:  # before the space is read: the option alone is wrong
        raise ConfigError(f"--partition-seeds: at least 1 (got {args.partition_seeds})")
    if args.per_setting and (not args.grid or args.ignore_studies):
        why = "uses no study (--ignore-studies)" if args.ignore_studies else "needs the --grid it was tuned over"
        raise ConfigError(f"--per-setting: {why}")
    space, variants = common.resolve_space(args)
    auto = None
    if args.seeds == AUTO:
        from raytune_fl.ablation.plan import AutoSeeds

        auto = AutoSeeds(args.target_halfwidth, args.max_seeds, check_reference(args.reference, variants))
    axes = parse_grid(args.grid)
    check_partition_seeds(args.partition_seeds, axes)
    experiments = settings(space, axes)
    _check_metric(args.metric, experiments)
    uri = common.check_mlflow_uri(args)
    common.check_address(args.address)
    common.check_cluster_fits(args.address, space.base.resources, space.base.precision)
    out_dir = Path(args.out or Path("reports") / space.name)
    common.check_new_folder(out_dir, "--out")
    data = {}
    for label, experiment in splits(experiments, args.partition_seeds).items():  # every partition cells train on
        try:
            data[label] = common.check_data(experiment, [space.variants[name].method for name in variants])
        except ConfigError as error:
            raise ConfigError(f"setting {label}: {error}") from None
    return Checked(space, variants, axes, auto, uri, out_dir, data)


def _check_metric(metric: str, experiments: dict[str, ExperimentConfig]) -> None:
    """--metric: a score on each client's own test part needs one in every setting."""
    if metric == TEST_ACC:
        return
    for label, experiment in experiments.items():
        if experiment.partition.test_fraction == 0:
            where = "" if len(experiments) == 1 else f" (setting {label})"
            raise ConfigError(
                f"--metric {metric}: scored on each client's own test part, and base.partition.test_fraction is 0"
                f"{where}; set it (e.g. 0.2)"
            )


def _plan(args: argparse.Namespace, checked: Checked, found: tuple[Any, str] | None) -> AblationPlan:
    """Each variant's configuration (its tuned study's, else the YAML's) and the plan of cells over them, said."""
    from raytune_fl.ablation.plan import make_plan
    from raytune_fl.ablation.sources import merged_source, searched_seeds, setting_sources, variant_source
    from raytune_fl.tracking.store import latest_study

    space, variants = checked.space, checked.variants
    sources, per_setting = {}, None
    if args.per_setting:  # each setting's own study
        per_setting = setting_sources(space, variants, checked.axes, found, args.space)
        sources = {name: merged_source(name, per_setting) for name in variants}
    for name in variants if per_setting is None else ():
        study = None if args.ignore_studies or found is None else latest_study(found[0], found[1], name)
        sources[name] = variant_source(space, name, study)
    for source in sources.values():
        shown = ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in source.params.items())
        print(f"[{source.variant}] {source.method}: {source.note} [{shown or 'method defaults'}]", flush=True)
    auto = checked.auto
    seeding = _seeds(args, space, auto.start if auto is not None else args.seeds, searched_seeds(sources))
    plan = make_plan(space, checked.axes, seeding, sources, args.partition_seeds, per_setting, auto)
    plan = dataclasses.replace(plan, metric=args.metric)
    print(plan.summary_line(), flush=True)
    print(f"seeds: {seeding.describe()}", flush=True)
    return plan


def _seeds(args: argparse.Namespace, space: SearchSpace, count: int, searched: Iterable[int]) -> SeedPlan:
    """`count` training seeds by the rule the command line chose (held out from `searched`, or the tuning seed's)."""
    return seed_plan(space.base.seed, count, searched, args.include_tuning_seed)


def _resumed(
    args: argparse.Namespace, plan: AblationPlan, found: tuple[Any, str] | None, uri: str
) -> tuple[AblationPlan, tuple[str, set[str]]] | None:
    """--resume: the latest ablation of this plan, and the cells it finished; None when there is none. A --seeds
    auto plan continues from as many seeds as its rounds had run."""
    from raytune_fl.tracking.store import find_ablation_parent

    parent_run_id, done = find_ablation_parent(found[0], found[1], plan.fingerprint) if found else (None, set())
    if parent_run_id is None:
        return None
    auto, seeding = plan.auto, plan.seed_plan
    if auto is not None and seeding is not None:  # the rounds it already ran: continue from as many seeds as it had
        ran = len({cell.seed for cell in _all_cells(plan, auto, seeding) if cell.key in done})
        plan = plan.with_seeds(_seeds(args, plan.space, max(auto.start, ran), seeding.searched))
    print(f"resuming ablation run {parent_run_id}: {len(done)} of {len(plan.cells)} runs had finished", flush=True)
    return plan, (parent_run_id, done)


def _open(args: argparse.Namespace, checked: Checked) -> StudyTracker:
    """Ray joined (one trial must fit on it), then what the ablation writes: --storage, --out, the MLflow
    experiment. A ConfigError names the option that is wrong."""
    from raytune_fl.runtime.storage import make_storage
    from raytune_fl.tracking import StudyTracker

    space, uri = checked.space, checked.uri
    common.join_ray(args.address, space.base.resources, plugins=space.plugins)
    make_storage(args.storage)
    try:
        checked.out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ConfigError(f"--out: cannot create {checked.out_dir}: {error.strerror}") from None
    try:
        return StudyTracker(uri, space.name)
    except Exception as error:  # each tracking backend fails with its own exception types
        raise ConfigError(f"--mlflow-uri: cannot use {uri}: {type(error).__name__}: {error}") from None


def _run(
    args: argparse.Namespace,
    checked: Checked,
    tracker: StudyTracker,
    plan: AblationPlan,
    resume: tuple[str, set[str]] | None,
    state: stopping.StopState,
) -> tuple[AblationPlan, AblationOutcome]:
    """The plan's cells; with --seeds auto, more seeds while an interval is wider than the target."""
    from raytune_fl.ablation.run import AblationOptions, run_ablation

    options = AblationOptions(
        tracker,
        args.storage,
        checked.out_dir,
        log_models=args.log_models,
        watch=progress.console(args.verbose, after=_after_cells(args)),
        on_parent=lambda run_id: _parent_started(state, run_id),
    )
    outcome = run_ablation(plan, checked.data, options, resume)
    auto = plan.auto
    while auto is not None and plan.seed_plan is not None:  # --seeds auto: more seeds while an interval is too wide
        widths, level = halfwidths(outcome.results, auto.reference, plan.metric)
        more = next_seed_count(widths, len(plan.seeds), auto, level)
        print(auto_line(widths, len(plan.seeds), auto, more, level), flush=True)
        if more is None or outcome.unfinished:
            break
        plan = plan.with_seeds(_seeds(args, plan.space, more, plan.seed_plan.searched))
        outcome = run_ablation(plan, checked.data, options, (outcome.parent_run_id, outcome.done_cells))
    return plan, outcome


def _report(
    args: argparse.Namespace, checked: Checked, plan: AblationPlan, outcome: AblationOutcome, experiment_id: str
) -> int:
    """The table, where everything is, the dashboard, and what to run next; the exit code (1: a cell unfinished)."""
    space, uri, files = checked.space, checked.uri, outcome.files
    splits_text = f" x {args.partition_seeds} partition seeds" if args.partition_seeds > 1 else ""
    scored = "test accuracy" if plan.metric == TEST_ACC else plan.metric
    print(f"\n=== {space.name}: final-round {scored} (%), mean ± std over {len(plan.seeds)} seeds{splits_text} ===")
    print(files["table.md"].read_text() if files else "(no run finished)")
    for what, path in files.items():
        print(f"{what:>16}: {path}")
    print(f"MLflow: experiment {space.name!r}, ablation run {outcome.parent_run_id} at {uri}")
    print(f"total wall time: {outcome.wall_time_s:.0f}s", flush=True)
    if not args.no_dashboard:
        from raytune_fl.report.dashboard import build_dashboard

        print("building the dashboard...", flush=True)  # seconds: MLflow's records read back, plotly's figures
        report = build_dashboard(uri, space, checked.out_dir / "dashboard.html")
        print(f"dashboard: {report.path}  (opens from disk in a browser; no server needed)", flush=True)
    if outcome.unfinished:
        print(f"{outcome.unfinished} of {len(plan.cells)} runs did not finish: see the (n/runs) cells and run tags")
    print_next_steps(args, uri, space.name, experiment_id, unfinished=bool(outcome.unfinished))
    return 1 if outcome.unfinished else 0


AUTO = "auto"  # --seeds auto


def _seeds_option(text: str) -> int | str:
    """--seeds: a count, or `auto`."""
    if text.strip().lower() == AUTO:
        return AUTO
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a whole number of seeds or 'auto' (got {text!r})") from None


def check_seed_options(args: argparse.Namespace) -> None:
    """--seeds and the options that only --seeds auto takes, before the space is read."""
    auto_only = {
        "--target-halfwidth": args.target_halfwidth,
        "--max-seeds": args.max_seeds,
        "--reference": args.reference,
    }
    if args.seeds != AUTO:
        if args.seeds < 1:
            raise ConfigError(f"--seeds: at least 1 (got {args.seeds})")
        given = [name for name, value in auto_only.items() if value is not None]
        if given:
            raise ConfigError(f"{given[0]}: only with --seeds auto (got --seeds {args.seeds})")
        return
    if args.target_halfwidth is None or args.max_seeds is None:
        missing = "--target-halfwidth" if args.target_halfwidth is None else "--max-seeds"
        raise ConfigError(f"{missing}: --seeds auto needs it, e.g. --seeds auto --target-halfwidth 2 --max-seeds 10")
    if not math.isfinite(args.target_halfwidth) or args.target_halfwidth <= 0:
        raise ConfigError(f"--target-halfwidth: a positive number of points (got {args.target_halfwidth})")
    start = AUTO_START
    if args.max_seeds < start:
        raise ConfigError(f"--max-seeds: at least {start}, the seeds of the first round (got {args.max_seeds})")


def check_reference(reference: str | None, variants: list[str]) -> str:
    """--reference: one of the ablated variants; default the first."""
    if reference is None:
        return variants[0]
    if reference not in variants:
        raise ConfigError(f"--reference: {reference!r} is not an ablated variant; one of {', '.join(variants)}")
    if len(variants) < 2:
        raise ConfigError("--seeds auto: needs at least 2 variants (it narrows the comparisons with --reference)")
    return reference


def halfwidths(results: pd.DataFrame, reference: str, metric: str = TEST_ACC) -> tuple[dict[str, float], float]:
    """Each comparison with `reference` ('variant at setting') -> its interval's half-width in points, at the
    family's Bonferroni level 1 - 0.05/m (m comparisons): fixed by m and the runs' spread, never by which
    differences are called, and at least as wide as any interval the comparison table prints (report/comparison.py);
    inf where there are too few runs for an interval. Also that level."""
    from raytune_fl.report.comparison import ALPHA_LEVEL, at_level, differences

    if not len(results) or reference not in set(results["variant"]):
        return {}, 1 - ALPHA_LEVEL
    found = differences(results, reference, metric)
    level = 1 - ALPHA_LEVEL / max(1, max((d.family for d in found), default=1))
    out = {}
    for d in found:
        wide = at_level(d, level)
        width = (wide.ci_high - wide.ci_low) / 2 * 100
        out[f"{d.variant} at {d.setting}"] = width if math.isfinite(width) else math.inf
    return out, level


def next_seed_count(widths: dict[str, float], seeds: int, auto: AutoSeeds, level: float = 0.95) -> int | None:
    """How many seeds the next round runs, None when done: every width at most the target, or the cap reached.
    The widest interval is projected as t(level, n-1)/sqrt(n) shrinks (its spread taken as measured), at most
    doubling the seeds a round: a spread from a few seeds is itself noisy."""
    from scipy import stats

    widest = max(widths.values(), default=math.inf)
    if widest <= auto.target_halfwidth or seeds >= auto.max_seeds:
        return None
    needed = seeds + 1
    if math.isfinite(widest):
        q = (1 + level) / 2
        scale = widest / (stats.t.ppf(q, seeds - 1) / math.sqrt(seeds))  # the spread, in the widths' units
        while needed < 2 * seeds and stats.t.ppf(q, needed - 1) / math.sqrt(needed) * scale > auto.target_halfwidth:
            needed += 1
    else:
        needed = 2 * seeds
    return min(auto.max_seeds, needed)


def auto_line(widths: dict[str, float], seeds: int, auto: AutoSeeds, more: int | None, level: float = 0.95) -> str:
    """One line per round of --seeds auto: the widest interval against the target, and what happens next."""
    if not widths:
        return f"seeds auto: {seeds} seeds: no comparison with {auto.reference} to measure; stopping"
    where, widest = max(widths.items(), key=lambda item: item[1])
    state = (
        f"seeds auto: {seeds} seeds: widest half-width {widest:.2f} points ({where}; {100 * level:.4g} % interval), "
        f"target {auto.target_halfwidth:g}"
    )
    if more is not None:
        return f"{state}: running {more} seeds"
    if widest <= auto.target_halfwidth:
        return f"{state}: reached"
    return f"{state}: not reached at --max-seeds {auto.max_seeds}; the table states the widths it got"


def _all_cells(plan: AblationPlan, auto: AutoSeeds, seeding: SeedPlan) -> list:
    """The cells at --max-seeds (what a resumed --seeds auto may have run), by `seeding`'s rule."""
    return plan.with_seeds(
        seed_plan(plan.space.base.seed, auto.max_seeds, seeding.searched, seeding.rule != HELD_OUT)
    ).cells


def _after_cells(args: argparse.Namespace) -> str:
    """What follows the cells' last line (a phase: cli/progress.py)."""
    if args.log_models:
        return "saving each finished cell's model to MLflow"
    return "writing the table from the cells' MLflow runs"


def print_next_steps(
    args: argparse.Namespace,
    uri: str,
    experiment: str,
    experiment_id: str,
    *,
    unfinished: bool = False,
    argv0: str | None = None,
    cwd: str | Path | None = None,
) -> None:
    """What to run next: commands to copy, that work in the folder the ablation ran in (`cwd`, default this
    process's), typed as it was started (`argv0`, default sys.argv[0]). `unfinished`: the command that runs the
    cells that did not finish too (the command line as given, with --resume)."""
    from raytune_fl.tune import interrupt

    print("\n=== next ===")
    for line in common.mlflow_ui_lines(uri, experiment_id, experiment):
        print(line)
    dashboard = f"{common.command_line('dashboard', argv0, cwd)} {shlex.join(common.space_options(args))}"
    what = "build the dashboard" if args.no_dashboard else "the dashboard again, after more runs"
    print(f"  {what} (the table, curves over seeds, the studies):  {dashboard}")
    if unfinished:
        print(f"  run the cells that did not finish:  {interrupt.resume_command()}")
