"""`scripts/reproduce.py NAME`: one paper-shaped table end to end, by name.

It runs the two commands a researcher would: `tune.py` on the searched variants (selected on validation accuracy at
the file's alpha), then `ablate.py` on every variant at its tuned values over seeds x Dirichlet alphas (scored on the
test set), both in this process on one Ray cluster and one MLflow store. Then it writes the results page
`<out>/<NAME>.md`: the protocol (the space file's header), the tuned values, the table, each variant against the
paper's reference (and the paper's method against its other baselines) with a corrected paired verdict, a screenshot
of the dashboard, the commands, the date and the machine.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import metadata, resources
from pathlib import Path

from raytune_fl.cli import common, progress, stopping
from raytune_fl.config import ConfigError, SearchSpace, load_space
from raytune_fl.metrics import BEST_PREFIX, CLIENT_TEST_ACC, PERSONAL_TEST_ACC, PERSONAL_VAL_ACC, TEST_ACC, VAL_ACC
from raytune_fl.registry import UnknownNameError

# the paper spaces are package data (pyproject.toml), so an installed wheel finds them from any folder; a wheel
# is installed unpacked, so this is a real folder (the repository's search_spaces/papers/ links to its files)
PAPERS_DIR = Path(str(resources.files("raytune_fl") / "spaces" / "papers"))


DEFAULT_ALPHAS = "0.1,0.5"  # the papers' harshest label skew and a milder one


@dataclass(frozen=True)
class PaperTable:
    title: str
    reference: str  # the variant every other one is compared with
    shape: str  # what the paper's table compares, and where the numbers here differ in kind from the paper's
    alphas: str = DEFAULT_ALPHAS  # the ablation's Dirichlet alphas unless --alphas is given
    # training seeds per cell unless --seeds is given: 5, held out from the search (ablation/seeds.py), so 5 pairs
    # per comparison; 3 pairs call a difference in a 12-test Holm family only at d_z >= 8.9
    seeds: int = 5
    partition_seeds: int = 1  # splits per cell (1: the file's partition seed) unless --partition-seeds is given
    fairness: bool = False  # the page also compares the client spread (worst, 10th percentile, variance)
    # every baseline the paper compares its method with, `reference` first (page.yaml's `references`): the page
    # compares `contenders` (the paper's method) with each further one on the primary endpoint; () = reference alone
    references: tuple[str, ...] = ()
    contenders: tuple[str, ...] = ()
    # the primary endpoint (ablate.py --metric): test_acc, or personal_test_acc for a table of personalised methods
    # (then client_test_acc, the global model on the same samples, is reported beside it)
    primary: str = TEST_ACC
    # the ablation's settings when they are not Dirichlet alphas (a --grid value, e.g. a shards split's classes per
    # client); "" = the alphas
    grid: str = ""

    def space_file(self, name: str) -> Path:
        """The table's space as the commands name it: the clone's `search_spaces/papers/<name>.yaml` when run from a
        clone's root (the path the docs give), else the copy installed with the package."""
        in_clone = Path("search_spaces") / "papers" / f"{name}.yaml"
        return in_clone if in_clone.is_file() else PAPERS_DIR / f"{name}.yaml"


PAPERS: dict[str, PaperTable] = {
    "feduv_table4": PaperTable(
        "FedUV (CVPR 2024), Table 4's shape: each of FedUV's two terms alone and both",
        reference="fedavg",
        shape="FedAvg, Freeze (the table's never-trained classifier row), the variance hinge alone, the uniformity "
        "term alone, and both (the official code's form of each term).",
    ),
    "univarfl_comparison": PaperTable(
        "UniVarFL's comparison under FedUV's training protocol: the paper's baselines at its alpha grid",
        reference="fedavg",
        shape="FedAvg, FedProx, MOON and Freeze (the baselines UniVarFL's paper compares with), UniVarFL at the "
        "paper's defaults and tuned, and FedUV (official code) as the project's addition, on MNIST-5k.",
        alphas="0.01,1",
        references=("fedavg", "fedprox", "moon", "freeze"),
        contenders=("univarfl_default", "univarfl_tuned"),
    ),
    "univarfl_paper": PaperTable(
        "UniVarFL under its own protocol's shape: E = 10, all clients, alpha 0.01 and 1.0",
        reference="fedavg",
        shape="FedAvg, FedProx, MOON and Freeze (the paper's baselines), UniVarFL at the paper's defaults and "
        "tuned, and FedUV (official code) as the project's addition, at 10 local epochs per round on digits.",
        alphas="0.01,1",
        references=("fedavg", "fedprox", "moon", "freeze"),
        contenders=("univarfl_default", "univarfl_tuned"),
    ),
    "qffl_forms": PaperTable(
        "q-FFL's two Lipschitz estimates: the paper's and the per-step default, on fairness",
        reference="fedavg",
        shape="FedAvg (q = 0) and q-FFL at q = 1 in its paper form and its per-step form.",
        alphas="0.1,0.5",
        seeds=3,
        partition_seeds=2,
        fairness=True,
    ),
    "privacy_budget": PaperTable(
        "Differential privacy's cost: FedAvg, FedProx and SCAFFOLD under local DP-SGD at epsilon 2, 8 and no noise",
        reference="fedavg",
        shape="FedAvg, FedProx and SCAFFOLD, each without noise (epsilon = infinity) and at epsilon = 8 and 2 (delta "
        "1e-5) under local DP-SGD, at their defaults; UniVarFL has no per-sample loss and cannot run under it.",
        alphas="0.5",
        seeds=3,
    ),
    "privacy_central": PaperTable(
        "Client-level DP's cost: FedAvg, FedProx and UniVarFL under central DP-FedAvg at epsilon 2, 8 and no noise",
        reference="fedavg",
        shape="FedAvg, FedProx and UniVarFL, each without noise (epsilon = infinity) and at epsilon = 8 and 2 (delta "
        "1e-5) under central DP-FedAvg over 100 clients, at their defaults; SCAFFOLD's server reads more than the "
        "mean update and is refused under it.",
        alphas="0.5",
        seeds=3,
    ),
    "personalised": PaperTable(
        "Personalised FL beside global methods: each client's own test part, at Dirichlet alpha 0.1 and 1.0",
        reference="fedavg",
        shape="FedAvg (the global model each client uses), FedAvg with fine-tuning at evaluation, FedPer, FedRep, "
        "FedBABU, Ditto, APFL, pFedMe, FedBN and FedPAC (each client's own model), UniVarFL and FedUV (global "
        "models), scored on each client's own test part.",
        alphas="0.1,1",
        seeds=3,
        primary=PERSONAL_TEST_ACC,
    ),
    "personalised_shards": PaperTable(
        "Personalised FL on the pathological split: 2 classes per client",
        reference="fedavg",
        shape="The personalised table's variants on a shards split where every client holds 2 classes, scored on "
        "each client's own test part.",
        seeds=3,
        primary=PERSONAL_TEST_ACC,
        grid="partition.classes_per_client=2",
    ),
    "fedld_table2": PaperTable(
        "FedLD (MICCAI 2024), Table 2's shape: margin control x principal-gradient aggregation",
        reference="neither",
        shape="neither component (FedAvg through FedLD's code path), margin control alone, principal-gradient "
        "aggregation alone, and both.",
    ),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=common.console_prog("reproduce.py"),
        description="Reproduce one paper-shaped table on the embedded data: tune each searched variant "
        "(validation accuracy), ablate every variant over seeds x Dirichlet alphas (test accuracy), and write "
        "the results page.",
    )
    parser.add_argument("name", choices=sorted(PAPERS), help="which table")
    parser.add_argument(
        "--seeds",
        type=int,
        help="training seeds per cell, held out from the search (default: the table's, 5; qffl_forms 3)",
    )
    parser.add_argument(
        "--partition-seeds",
        type=int,
        help="partition seeds per cell, crossed with --seeds (default: the table's, 1 = the file's split)",
    )
    parser.add_argument(
        "--alphas", help=f"Dirichlet alphas of the ablation (default: the table's, {DEFAULT_ALPHAS} or 0.01,1)"
    )
    parser.add_argument("--num-samples", type=int, help="trials per searched variant (default: the file's)")
    parser.add_argument("--rounds", type=int, help="override base.rounds in both stages (default: the file's)")
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="override a field, as tune.py's --set"
    )
    parser.add_argument(
        "--out",
        default="docs/results",
        type=common.expand_home,
        help="where <NAME>.md and <NAME>/ go (default: %(default)s)",
    )
    parser.add_argument(
        "--work",
        type=common.expand_home,
        help="where the MLflow store, Ray Tune results and the ablation's files go (default: reports/reproduce/NAME)",
    )
    parser.add_argument("--address", help="Ray cluster to join; default: RAY_ADDRESS, else a private local cluster")
    parser.add_argument("--no-screenshot", action="store_true", help="do not screenshot the dashboard")
    parser.add_argument("--verbose", action="store_true", help="tune.py's and ablate.py's --verbose")
    parser.add_argument(
        "--resume",
        action="store_true",
        help="continue a run stopped by Ctrl-C or SIGTERM (same NAME, options and --work): the tuning resumes "
        "(tune.py --resume), then the ablation (ablate.py --resume) if it had begun",
    )
    return parser


def _alphas(text: str) -> list[float]:
    try:
        values = [float(a) for a in text.split(",") if a.strip()]
    except ValueError:
        raise ConfigError(f"--alphas: comma-separated positive numbers, e.g. {DEFAULT_ALPHAS} (got {text!r})") from None
    if not values or any(a <= 0 for a in values):
        raise ConfigError(f"--alphas: comma-separated positive numbers, e.g. {DEFAULT_ALPHAS} (got {text!r})")
    return values


Screenshot = Callable[[Path, Path], "Path | None"]  # (dashboard.html, png to write) -> the png, or None


def main(argv: Sequence[str] | None = None, screenshot: Screenshot | None = None) -> int:
    """`screenshot`: how to draw the dashboard as a PNG (scripts/reproduce.py passes tools/dashboard_png.py's,
    which drives Chromium; the package itself holds no browser tooling). None: the page links the HTML only."""
    args = build_parser().parse_args(argv)
    with stopping.guarded("reproduce", argv), progress.watch_silences():  # a line when a phase is silent for long
        try:
            return _main(args, argv, screenshot)
        except stopping.StudyInterrupted as stop:  # stopped outside the stages (they say it themselves)
            return stopping.stopped(stop, f"{args.name} stopped", resumable=Path(_work(args)).exists())


def _work(args: argparse.Namespace) -> Path:
    return Path(args.work or Path("reports") / "reproduce" / args.name).resolve()


@dataclass(frozen=True)
class Stages:
    """The two stages' command lines, checked: what tune and ablate run, in the work folder."""

    work: Path
    uri: str
    searched: list[str]  # the variants tune searches (none: no tune stage)
    tune_argv: list[str]
    ablate_argv: list[str]
    describe: str  # the ablation's shape: "5 seeds x alpha=0.1,0.5"


def _main(args: argparse.Namespace, argv: Sequence[str] | None, screenshot: Screenshot | None) -> int:
    paper = PAPERS[args.name]
    space_file = paper.space_file(args.name)
    try:  # what the two stages would refuse, before the work folder is made or Ray starts
        stages = _stages(args, paper, space_file)
    except (ConfigError, UnknownNameError) as error:
        return common.fail(error)
    from raytune_fl.cli.ablate import main as ablate_main
    from raytune_fl.cli.tune import main as tune_main

    started = time.time()
    if stages.searched:
        print(f"=== {args.name}: tuning {', '.join(stages.searched)} ===", flush=True)
        if (code := tune_main(stages.tune_argv)) != 0:
            return code
    tuned_s = time.time() - started
    print(f"=== {args.name}: ablation over {stages.describe} ===", flush=True)
    code = ablate_main(stages.ablate_argv)
    results_file = stages.work / "ablation" / "ablation_results.parquet"
    if code in stopping.EXIT_CODES or not results_file.exists():  # stopped: the page waits for --resume
        return code or 1
    wall = {"tune": tuned_s, "ablate": time.time() - started - tuned_s}
    assets = Path(args.out) / args.name
    assets.mkdir(parents=True, exist_ok=True)
    shot = None
    if not args.no_screenshot:
        if screenshot is None:
            print("no dashboard screenshot: run scripts/reproduce.py from a checkout (tools/dashboard_png.py)")
        else:
            shot = screenshot(stages.work / "ablation" / "dashboard.html", assets / "dashboard.png")
    commands = _commands(argv, stages.tune_argv, stages.ablate_argv, stages.searched)
    run = PageRun(args.name, paper, space_file, stages.uri, results_file, assets, commands, wall, shot)
    page = write_results(run)
    print(f"results page: {page}", flush=True)
    print_next_steps(page, space_file, stages.uri)
    return code


def _stages(args: argparse.Namespace, paper: PaperTable, space_file: Path) -> Stages:
    """The options checked (what the two stages would refuse), the work folder made, and each stage's command
    line (with --resume, each stage resumes where it had begun; one that had not begun starts)."""
    work = _work(args)
    seeds = paper.seeds if args.seeds is None else args.seeds
    partition_seeds = paper.partition_seeds if args.partition_seeds is None else args.partition_seeds
    if seeds < 1:
        raise ConfigError(f"--seeds: at least 1 (got {seeds})")
    if partition_seeds < 1:
        raise ConfigError(f"--partition-seeds: at least 1 (got {partition_seeds})")
    if paper.grid and args.alphas is not None:
        raise ConfigError(f"--alphas: table {args.name}'s settings are not alphas but {paper.grid}; leave it out")
    alphas = _alphas(paper.alphas if args.alphas is None else args.alphas)
    common.check_new_folder(work, "--work")
    if args.resume and not (work / "mlflow.db").exists():
        raise ConfigError(f"--resume: no {args.name} run in {work} to resume (no mlflow.db); start it without it")
    common.check_new_folder(Path(args.out), "--out")
    stage_args = argparse.Namespace(
        space=str(space_file),
        plugin=[],
        rounds=args.rounds,
        num_samples=args.num_samples,
        set=args.set,
        variants=None,
        address=args.address,
        storage=str(work / "ray_results"),
    )
    space, _ = common.resolve_space(stage_args, warnings=False)  # the stages say the warnings
    common.check_address(args.address)
    work.mkdir(parents=True, exist_ok=True)
    uri = f"sqlite:///{work / 'mlflow.db'}"
    shared = ["--space", str(space_file), "--mlflow-uri", uri, "--storage", str(work / "ray_results")]
    shared += [f"--set={s}" for s in args.set] + ([f"--rounds={args.rounds}"] if args.rounds is not None else [])
    shared += ["--address", args.address] if args.address else []
    shared += ["--verbose"] if args.verbose else []
    searched = [name for name, variant in space.variants.items() if variant.search]
    tune_argv = [*shared, "--variants", ",".join(searched), "--no-models"]
    tune_argv += [f"--num-samples={args.num_samples}"] if args.num_samples is not None else []
    grid = paper.grid or "alpha=" + ",".join(f"{a:g}" for a in alphas)
    ablate_argv = [*shared, "--seeds", str(seeds), "--grid", grid, "--out", str(work / "ablation")]
    ablate_argv += ["--partition-seeds", str(partition_seeds)] if partition_seeds > 1 else []
    ablate_argv += [f"--metric={paper.primary}"] if paper.primary != TEST_ACC else []
    if args.resume:
        _resumed_stages(space, work, uri, tune_argv, ablate_argv)
    splits = f" x {partition_seeds} partition seeds" if partition_seeds > 1 else ""
    return Stages(work, uri, searched, tune_argv, ablate_argv, f"{seeds} seeds{splits} x {grid}")


def _resumed_stages(space: SearchSpace, work: Path, uri: str, tune_argv: list[str], ablate_argv: list[str]) -> None:
    """--resume: each stage resumes where it had begun (its command line gains --resume); one that had not begun
    starts."""
    from raytune_fl.tracking.store import has_ablation
    from raytune_fl.tune.manifest import StudyManifest

    if (work / "ray_results" / Path(StudyManifest.location_name(space))).exists():
        tune_argv.append("--resume")
    if has_ablation(uri, space.name):
        ablate_argv.append("--resume")


def dashboard_command(space_file: Path, uri: str, argv0: str | None = None, cwd: str | Path | None = None) -> str:
    """The command that builds the ablation's whole dashboard again, from the folder this ran in."""
    options = _quoted(["--space", str(space_file), "--mlflow-uri", uri], cwd)
    return f"{common.command_line('dashboard', argv0, cwd)} {options}"


def print_next_steps(
    page: Path, space_file: Path, uri: str, argv0: str | None = None, cwd: str | Path | None = None
) -> None:
    """What to look at next: commands to copy, that work in the folder this ran in (`cwd`, default this
    process's), typed as it was started (`argv0`, default sys.argv[0])."""
    print("\n=== next ===")
    print(f"  the results page:  {page}")
    print(f"  the whole interactive dashboard:  {dashboard_command(space_file, uri, argv0, cwd)}")
    print(f"  the runs in the MLflow UI:  mlflow ui --backend-store-uri {uri} --port 5000")


def _quoted(argv: Sequence[str], cwd: str | Path | None = None) -> str:
    import shlex

    here = str(Path.cwd() if cwd is None else cwd) + os.sep  # paths under the working directory: relative to it
    return " ".join(shlex.quote(a.replace(here, "")) for a in argv)


def _commands(
    argv: Sequence[str] | None, tune_argv: list[str], ablate_argv: list[str], searched: list[str]
) -> list[str]:
    """The reproduce line as given, then the equivalent tune.py + ablate.py pair (a resumed run's without --resume:
    the page says how to make it, not how it was finished)."""
    given = [a for a in (sys.argv[1:] if argv is None else argv) if a != "--resume"]
    tune_argv, ablate_argv = [a for a in tune_argv if a != "--resume"], [a for a in ablate_argv if a != "--resume"]
    run = common.command_line  # as the user started this one, from where (an installed wheel has no scripts/)
    lines = [f"{run('reproduce')} {_quoted(given)}"]
    if searched:
        lines.append(f"{run('tune')} {_quoted(tune_argv)}")
    lines.append(f"{run('ablate')} {_quoted(ablate_argv)}")
    return lines


def machine() -> str:
    """CPU, cores, memory, and the versions of what computed the numbers."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
        kib = int(
            next(s for s in Path("/proc/meminfo").read_text().splitlines() if s.startswith("MemTotal")).split()[1]
        )
        memory = f", {kib / 2**20:.0f} GiB"
    except (OSError, StopIteration, ValueError):
        memory = ""
    versions = ", ".join(f"{p} {metadata.version(p)}" for p in ("torch", "ray", "optuna", "mlflow", "numpy"))
    return f"{cpu}, {os.cpu_count()} cores{memory}, no GPU used; Python {platform.python_version()}, {versions}"


def source_commit() -> str:
    """The repository's commit, '+ changes' when its tracked files differ from it; '' outside a git checkout."""
    import subprocess

    root = Path(__file__).resolve().parent  # the code's own folder: a wheel's site-packages is no checkout
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "-uno"], cwd=root, capture_output=True, text=True)
    except OSError:
        return ""
    if head.returncode != 0:
        return ""
    return head.stdout.strip() + (" + uncommitted changes" if dirty.stdout.strip() else "")


@dataclass(frozen=True)
class PageRun:
    """What a reproduce run hands its results page: the table, where its records are, how it was made."""

    name: str
    paper: PaperTable
    space_file: Path
    uri: str  # the MLflow store both stages logged to
    results_file: Path  # the ablation's results (Parquet)
    assets: Path  # where the page's files go (<out>/<name>/)
    commands: list[str]
    wall: dict[str, float]  # seconds per stage
    shot: Path | None = None  # the dashboard's screenshot


def write_results(run: PageRun) -> Path:
    """The page's committed files from the run (export), then every page and the index rendered from them."""
    from raytune_fl.report import results_page

    record = export(run, machine(), source_commit())
    results_page.write(run.assets.parent)
    return run.assets.parent / f"{record.name}.md"


def export(run: PageRun, machine_text: str, commit: str, *, generated: str | None = None, notes: Sequence[str] = ()):
    """Writes `assets/`: runs.csv (one row per run), table.csv, gradients.csv (when the runs probed gradients) and
    page.yaml (the tuned values read from the MLflow store, the protocol, the commands, the machine). The page is
    rendered from these files alone (report/results_page.py)."""
    import pandas as pd

    from raytune_fl.metrics import CLIENT_ACC_BOTTOM10, CLIENT_ACC_VAR, CLIENT_ACC_WORST, TEST_ACC_LAST_K
    from raytune_fl.report import results_page
    from raytune_fl.tracking import StudyTracker

    space, paper = load_space(run.space_file), run.paper
    results = pd.read_parquet(run.results_file)
    tracker = StudyTracker(run.uri, space.name)
    _write_tables(results, run.assets, tracker, paper.primary)
    header = [line[1:].strip() for line in run.space_file.read_text().splitlines() if line.startswith("#")]
    metrics = [TEST_ACC, TEST_ACC_LAST_K] + (
        [CLIENT_ACC_WORST, CLIENT_ACC_BOTTOM10, CLIENT_ACC_VAR] if paper.fairness else []
    )
    if paper.primary != TEST_ACC:  # scored on each client's own test part: the global model's beside, then the test set
        metrics = [paper.primary, CLIENT_TEST_ACC, TEST_ACC]
    record = results_page.PageRecord(
        name=run.name,
        title=paper.title,
        reference=paper.reference,
        shape=paper.shape,
        generated=generated or datetime.date.today().isoformat(),
        commands=list(run.commands),
        machine=machine_text,
        commit=commit,
        wall_min={stage: round(seconds / 60, 1) for stage, seconds in run.wall.items()},
        space_file=str(run.space_file),
        protocol=[line for line in header if not line.startswith(("python scripts/", "raytune-fl "))],
        run=run_facts(space, results),
        tuned=tuned_values(space, tracker),
        metrics=metrics,
        notes=list(notes),
        dashboard=run.shot.name if run.shot is not None else None,
        held_out=held_out_facts(space),
        references=list(paper.references),
        contenders=list(paper.contenders),
        primary=paper.primary,
        tuned_on=space.tune.primary,
    )
    record.dump(run.assets)
    return record


def _write_tables(results, assets: Path, tracker, primary: str = TEST_ACC) -> None:
    """table.csv, runs.csv (the columns the page shows) and, when the runs probed gradients, gradients.csv."""
    from raytune_fl.ablation.table import summarise, to_csv
    from raytune_fl.metrics import CLIENT_ACC_BOTTOM10, CLIENT_ACC_VAR, CLIENT_ACC_WORST, TEST_ACC_LAST_K
    from raytune_fl.report import gradients, results_page
    from raytune_fl.tracking.store import prefixed_rounds

    assets.mkdir(parents=True, exist_ok=True)
    (assets / results_page.TABLE_FILE).write_text(to_csv(summarise(results, primary)))
    columns = ["variant", "method", "setting", "seed", "partition_seed", "status", "rounds_completed", TEST_ACC]
    extra = [TEST_ACC_LAST_K, VAL_ACC, CLIENT_ACC_WORST, CLIENT_ACC_BOTTOM10, CLIENT_ACC_VAR]
    extra += [PERSONAL_TEST_ACC, CLIENT_TEST_ACC, PERSONAL_VAL_ACC]  # where the runs have a test part of their own
    columns = [c for c in columns if c in results] + [c for c in extra if c in results and results[c].notna().any()]
    results[columns].to_csv(assets / results_page.RUNS_FILE, index=False)
    grads = gradients.histories(lambda run_id: prefixed_rounds(tracker.client, run_id, gradients.PREFIXES), results)
    if not grads.empty:
        grads.to_csv(assets / results_page.GRADIENTS_FILE, index=False)


def tuned_values(space, tracker) -> list[dict[str, str]]:
    """Each variant's tuned values as the page lists them (its latest study's, from the MLflow store), or what it
    ran with when nothing was searched."""
    from raytune_fl.tracking.store import latest_study

    tuned = []
    for variant, spec in space.variants.items():
        study = latest_study(tracker.client, tracker.experiment_id, variant) if spec.search else None
        if study is None:
            fixed = ", ".join(f"{k}={v}" for k, v in spec.fixed.items()) or "method defaults"
            tuned.append({"variant": variant, "method": spec.method, "values": f"nothing searched ({fixed})"})
            tuned[-1]["best_val_acc"] = "–"
            continue
        shown = {k: v for k, v in study.params.items() if k in spec.search}
        values = ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in shown.items())
        best = study.metrics.get(BEST_PREFIX + space.tune.primary, float("nan"))
        tuned.append({"variant": variant, "method": spec.method, "values": values, "best_val_acc": f"{best * 100:.1f}"})
    return tuned


def held_out_facts(space) -> dict[str, float] | None:
    """What the page says a client is scored on: the training images, the validation fraction and the clients
    (the page divides them: an average per client); None when the data cannot be loaded again here."""
    from raytune_fl.cli.common import check_data

    try:
        data = check_data(space.base)
    except ConfigError:
        return None
    part = space.base.partition
    held = {"train_images": len(data.dataset.y_train), "val_fraction": part.val_fraction}
    return {**held, "clients": part.clients}  # not-a-metric: page.yaml's held_out key


def run_facts(space, results) -> dict[str, str]:
    """The run's side of the protocol table (report/paper_protocols.ASPECTS), from the space and the runs."""
    base = space.base
    opt = base.optimizer
    schedule = getattr(getattr(opt, "schedule", None), "kind", None) or "constant"
    seeds = results["seed"].nunique()
    scored = sorted(int(seed) for seed in results["seed"].unique())
    # which seeds scored, beside the one the search trained at (ablation/seeds.py holds it out by default)
    tuning = "including" if base.seed in scored else "held out from"
    held_out = f" ({', '.join(map(str, scored))}; {tuning} the tuning seed {base.seed})"
    splits = results["partition_seed"].nunique() if "partition_seed" in results else 1
    alphas = ", ".join(s.removeprefix("alpha=") for s in dict.fromkeys(results["setting"]))
    part = base.partition
    skew = f"Dirichlet α ∈ {{{alphas}}}" if part.kind == "dirichlet" else f"{part.label}, {alphas}"
    test = f", {int(part.test_fraction * 100)} % as its own test part" if part.test_fraction else ""
    searched = [v for v, spec in space.variants.items() if spec.search]
    return {
        "data": f"{base.dataset} (embedded), {int(part.val_fraction * 100)} % of each client's samples held out for "
        f"validation{test}",
        "model": base.model,
        "clients": str(base.partition.clients),  # not-a-metric: the protocol table's row
        "participation": "every client in every round"
        if base.participation >= 1
        else f"{base.participation:g} of the clients a round",
        "rounds": str(int(results["rounds_completed"].max())),
        "local epochs": f"E = {base.local_epochs}",
        "label skew": skew,
        "optimiser": f"SGD, lr {opt.lr:g}, momentum {opt.momentum:g}, weight decay {opt.weight_decay:g}; "
        f"{schedule} schedule; batch {base.batch_size}",
        "hyperparameters": "fixed as in the space file"
        + (f"; tuned: {', '.join(searched)} (values below)" if searched else ""),
        "compared": ", ".join(space.variants),
        "seeds": f"{seeds} training seeds" + (f" x {splits} partition seeds" if splits > 1 else "") + held_out,
    }
