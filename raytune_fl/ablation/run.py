"""Running an ablation plan: one grid of Tune trials, one MLflow parent with a child run per cell, the table."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import pandas as pd
from ray import tune

from raytune_fl.ablation.plan import AblationCell, AblationPlan
from raytune_fl.ablation.table import LEVEL, privacy_line, summarise, to_csv, to_markdown
from raytune_fl.ablation.trainable import ablation_trial
from raytune_fl.data.identity import DataIdentity
from raytune_fl.engine.data import FederatedData, data_identity_of
from raytune_fl.export.trial_model import log_trial_model
from raytune_fl.metrics import TEST_ACC
from raytune_fl.runtime.storage import Storage
from raytune_fl.tracking import ParentRun, StudyTracker, TrialTracker
from raytune_fl.tracking.records import (
    AblationFacts,
    CellTrials,
    RunRecord,
    ablation_cell,
    ablation_parent,
    ablation_parent_end,
)
from raytune_fl.tracking.schema import (
    ABLATION_FOLDER,
    ABLATION_RESULTS_FILE,
    ABLATION_SUMMARY_FILE,
    PARTITION_FOLDER,
    RAN_EVERY_ROUND,
    RUN_FAILED,
    RUN_KILLED,
    setting_folder,
)
from raytune_fl.tracking.store import ablation_results, one_run_per_cell
from raytune_fl.tracking.system_metrics import system_metrics_on
from raytune_fl.tune.callbacks import ForwardInterrupt, MlflowTrialLogger, TrialEventsCallback, print_line
from raytune_fl.tune.events import Watch, Watcher
from raytune_fl.tune.interrupt import resume_command, tune_run
from raytune_fl.tune.refusal import raise_refusal
from raytune_fl.tune.resources import placement_group_factory
from raytune_fl.tune.tuner import run_config


@dataclass
class AblationOutcome:
    parent_run_id: str
    results: pd.DataFrame  # one row per cell (ablation_results columns)
    summary: pd.DataFrame  # one row per (variant, setting): table.summarise's columns
    files: dict[str, Path] = field(default_factory=dict)  # results.parquet, table.md, table.csv, summary.csv
    wall_time_s: float = 0.0

    @property
    def unfinished(self) -> int:
        """Cells whose run did not run every round (diverged, failed, cut): what --resume reruns and what makes the
        command exit 1. A collapsed run finished (at chance): it is reported in its cell ("k collapsed") and left
        out of the mean, not counted here, since running it again with the same seed gives the same run."""
        if not len(self.results):
            return 0
        return int((~self.results["status"].isin(RAN_EVERY_ROUND)).sum())

    @property
    def done_cells(self) -> set[str]:
        """The cells whose run ran every round (finished, or collapsed at chance): never run again."""
        if not len(self.results):
            return set()
        return set(self.results.loc[self.results["status"].isin(RAN_EVERY_ROUND), "cell"])


def parent_record(plan: AblationPlan, data: dict[str, FederatedData]) -> RunRecord:
    """The ablation's parent run: the plan, where each variant's configuration came from, each setting's partition
    (each split's, with partition seeds)."""
    facts = AblationFacts(
        space=plan.space,
        fingerprint=plan.fingerprint,
        seeds=plan.seeds,
        split_seeds=plan.split_seeds,
        partition_seeds=plan.partition_seeds,
        grid={a.name: {"field": f"base.{a.field}", "values": list(a.values)} for a in plan.axes},
        settings=list(plan.experiments),
        sources=list(plan.sources.values()),
        **seed_facts(plan),
        resume_command=resume_command(),
    )
    return ablation_parent(facts, list(identities(plan, data).values()))


def seed_facts(plan: AblationPlan) -> dict[str, Any]:
    """What the parent records of the seeds: the rule, which seeds the search used and which score, --seeds auto's
    target."""
    if plan.seed_plan is None:
        return {}
    auto = plan.auto
    return {
        "seed_rule": plan.seed_plan.rule,
        "seeds_note": plan.seed_plan.describe(),
        "tuning_seeds": list(plan.seed_plan.searched),
        "auto": (
            f"interval half-width (level 1 - 0.05/m) <= {auto.target_halfwidth:g} points against "
            f"{auto.reference}, at most {auto.max_seeds} seeds"
            if auto is not None
            else ""
        ),
    }


def log_partitions(tracker: StudyTracker, run_id: str, plan: AblationPlan, data: dict[str, FederatedData]) -> None:
    """Each partition the cells train on, under partition/ (partition/<setting>/ for more than one)."""
    partitions = plan.partitions
    for label, experiment in partitions.items():
        part = experiment.partition
        folder = PARTITION_FOLDER if len(partitions) == 1 else f"{PARTITION_FOLDER}/{setting_folder(label)}"
        tracker.log_partition(run_id, data[label], f"{experiment.dataset}: {part.kind}, {label}", folder)


def identities(plan: AblationPlan, data: dict[str, FederatedData]) -> dict[str, DataIdentity]:
    """Each partition's data, by data label (a grid over the partition, or partition seeds, give each its own)."""
    return {label: data_identity_of(experiment, data[label]) for label, experiment in plan.partitions.items()}


def log_cell_models(
    tracker: StudyTracker,
    parent_run_id: str,
    results: tune.ResultGrid,
    cells: dict[str, AblationCell],
    data: dict[str, FederatedData],
    out: Callable[[str], None],
) -> int:
    """Each finished cell's final global model on its run (`ablate.py --log-models`); how many were logged."""
    logged = 0
    for result in cast("Iterable[tune.Result]", results):  # a ResultGrid iterates by index
        key = (result.config or {}).get("cell")
        cell = cells.get(key) if key is not None else None
        if result.error is not None or cell is None:
            continue
        done = log_trial_model(tracker, parent_run_id, result, cell.trial, data[cell.data_label], link_parent=False)
        if done is not None:
            logged += 1
            model_id, _, trained = done
            score = trained.metrics[TEST_ACC]
            out(f"model of {cell.key}: models:/{model_id} (round {trained.round}, test_acc {score:.4f})")
    return logged


def run_cells(
    cells: list[AblationCell],
    *,
    name: str,
    storage: str | Path | Storage,
    max_concurrent: int,
    callbacks: list[tune.Callback],
) -> tune.ResultGrid:
    """The cells as one grid of Tune trials (FIFO: there is nothing to stop early, every cell runs every round)."""
    by_key = {cell.key: cell for cell in cells}
    resources = cells[0].experiment.resources  # a grid cannot change resources (ablation._NOT_GRIDDABLE)
    trainable = tune.with_resources(
        # the driver's MLflow switch, handed to the cells: they sample their node and send it with each round
        tune.with_parameters(ablation_trial, cells=by_key, system_metrics=system_metrics_on()),
        placement_group_factory(resources),
    )
    tuner = tune.Tuner(
        trainable,
        param_space={"cell": tune.grid_search(list(by_key))},
        # the next cell runs in the finished cell's process, with its client actors (actors/pool.py)
        tune_config=tune.TuneConfig(num_samples=1, max_concurrent_trials=max_concurrent, reuse_actors=True),
        run_config=run_config(
            name, storage, [*callbacks, ForwardInterrupt()], cells[0].experiment.faults.trial_retries
        ),
    )
    with tune_run():  # Ctrl-C/SIGTERM: Tune stops the cells, then StudyInterrupted is raised here
        return tuner.fit()


def latest_per_cell(results: pd.DataFrame) -> pd.DataFrame:
    """One row per cell (rows newest first, as ablation_results lists them): tracking.store's one_run_per_cell."""
    cells, statuses = results["cell"].tolist(), results["status"].tolist()
    kept = one_run_per_cell(range(len(results)), cell=cells.__getitem__, status=statuses.__getitem__)
    return results.iloc[kept]


def plan_order(results: pd.DataFrame, cells: list[AblationCell]) -> pd.DataFrame:
    """Rows in plan order (settings, then variants as in the file, then seeds): the table's order."""
    position = {cell.key: i for i, cell in enumerate(cells)}
    order = results["cell"].map(position).fillna(len(position))
    return results.assign(_pos=order).sort_values("_pos", kind="stable").drop(columns="_pos").reset_index(drop=True)


def with_partition_seeds(results: pd.DataFrame, cells: list[AblationCell]) -> pd.DataFrame:
    """A partition_seed column after seed: each row's cell's split (-1 for a run of no cell of the plan, as
    ablation_results says -1 for a missing seed). What report.comparison pairs runs on, with the seed."""
    seeds = {cell.key: cell.partition_seed for cell in cells}
    column = results["cell"].map(seeds).fillna(-1).astype(int)
    out = results.drop(columns="partition_seed", errors="ignore")
    at = out.columns.get_loc("seed") + 1 if "seed" in out else len(out.columns)
    out.insert(at, "partition_seed", column)
    return out


def write_table(
    results: pd.DataFrame,
    seeds: int,
    out_dir: Path,
    partition_seeds: int = 1,
    seeds_note: str = "",
    metric: str = TEST_ACC,
) -> tuple[pd.DataFrame, dict[str, Path]]:
    """The results and the table of `metric` (`seeds_note`: which seeds were searched and which scored, its first
    line)."""
    summary = summarise(results, metric)
    files = {
        ABLATION_RESULTS_FILE: out_dir / "ablation_results.parquet",
        "table.md": out_dir / "ablation_table.md",
        "table.csv": out_dir / "ablation_table.csv",
        ABLATION_SUMMARY_FILE: out_dir / "ablation_summary.csv",
    }
    results.to_parquet(files[ABLATION_RESULTS_FILE], index=False)
    table = to_markdown(summary, metric, seeds=seeds, partition_seeds=partition_seeds)
    if spent := privacy_line(results):
        table += f"\n{spent}\n"
    files["table.md"].write_text(f"{seeds_note[:1].upper()}{seeds_note[1:]}.\n\n{table}" if seeds_note else table)
    files["table.csv"].write_text(to_csv(summary))
    # the numbers behind the table: mean, std, n, runs and the 95 % t-interval of the mean (ci_low, ci_high)
    summary.drop(columns="best").assign(level=LEVEL).to_csv(files[ABLATION_SUMMARY_FILE], index=False)
    return summary, files


@dataclass(frozen=True)
class AblationOptions:
    """How a command runs its ablation: where it writes, what it logs, who follows it."""

    tracker: StudyTracker
    storage: str | Path | Storage  # where Tune keeps the cells: a directory or URI (runtime/storage.py)
    out_dir: Path  # the results and the table
    out: Callable[[str], None] = print_line
    log_models: bool = False  # each finished cell's final global model as an MLflow model on its run
    watch: Watcher | None = None  # how the caller follows the cells (the CLI: its console progress)
    on_parent: Callable[[str], None] | None = None  # told the parent run's id once it exists (--resume finds it)


def run_ablation(
    plan: AblationPlan,
    data: dict[str, FederatedData],
    options: AblationOptions,
    resume: tuple[str, set[str]] | None = None,
) -> AblationOutcome:
    """Runs the plan's cells (with `resume`: under that parent, skipping the cells it finished), logs every run to
    MLflow, and once the parent run has closed writes the results and the table to `out_dir` and to the parent
    run's `ablation/` artifacts (`settle`), whatever stopped it."""
    started, tracker = time.time(), options.tracker
    parent_run_id, done = resume if resume is not None else (None, set())
    outcome = AblationOutcome("", pd.DataFrame(), pd.DataFrame())
    closed: ParentRun | None = None
    try:
        with tracker.parent_run(parent_record(plan, data), parent_run_id) as parent:
            closed, outcome.parent_run_id = parent, parent.run_id
            _run_under(parent, plan, data, options, done)
    finally:
        if closed is not None:  # its children closed: what finished is in MLflow
            settle(options, plan, started, outcome, closed.status)
    return outcome


def _run_under(
    parent: ParentRun, plan: AblationPlan, data: dict[str, FederatedData], options: AblationOptions, done: set[str]
) -> None:
    """The cells not `done` yet, run under the open `parent` (their runs its children)."""
    tracker, out = options.tracker, options.out
    if parent.new:
        log_partitions(tracker, parent.run_id, plan, data)
    if options.on_parent is not None:
        options.on_parent(parent.run_id)
    out(f"MLflow ablation run: {parent.run_id}")
    todo = [cell for cell in plan.cells if cell.key not in done]
    trials = TrialTracker(tracker, parent.run_id, plan.rounds, cell_records(plan, data, todo), bool(done))
    parent.trials.append(trials)
    followers = [TrialEventsCallback(options.watch(cells_watch(plan, todo)))] if options.watch is not None else []
    if todo:
        results = run_cells(
            todo,
            name=f"{plan.space.name}-ablation-{time.strftime('%Y%m%d-%H%M%S')}",
            storage=options.storage,
            max_concurrent=plan.space.tune.max_concurrent,
            callbacks=[*followers, MlflowTrialLogger(trials)],
        )
        raise_refusal(results, "the ablation")  # a cell's configuration error: the parent FAILED (tune/refusal.py)
        if options.log_models:
            log_cell_models(tracker, parent.run_id, results, {cell.key: cell for cell in todo}, data, out)


def cell_records(plan: AblationPlan, data: dict[str, FederatedData], cells: list[AblationCell]) -> CellTrials:
    """Each cell's run, by cell key: where its configuration came from, the data it trains on."""
    datasets = identities(plan, data)
    return CellTrials(
        {cell.key: ablation_cell(cell, plan.sources[cell.variant].note, (datasets[cell.data_label],)) for cell in cells}
    )


def cells_watch(plan: AblationPlan, cells: list[AblationCell]) -> Watch:
    """The cells as a progress display follows them: every cell runs every round (FIFO), so the time left is an
    estimate, not a bound; no "best" across cells."""
    rounds = {cell.key: cell.experiment.rounds for cell in cells}  # a grid may vary them
    return Watch(
        "ablation",
        len(cells),
        plan.rounds,
        plan.space.tune.primary,
        noun="cell",
        show_best=False,
        rounds_of=lambda config: rounds[config["cell"]],
        total_rounds=sum(rounds.values()),
    )


def settle(
    options: AblationOptions, plan: AblationPlan, started: float, outcome: AblationOutcome, status: str | None
) -> None:
    """Once the parent has closed (with `status`): whatever finished is in MLflow; the table is written from it
    unless Ctrl-C or SIGTERM stopped the ablation (--resume runs the rest and writes it: a table of some cells is
    not the plan's) or an error ended it (FAILED: a cell's configuration error stops every cell, and a table of
    the failed cell would read as a result). The parent gains its runs' counts, the seeds and the table's metrics
    after its end."""
    tracker = options.tracker
    results = ablation_results(tracker.client, tracker.experiment_id, outcome.parent_run_id)
    outcome.results = with_partition_seeds(plan_order(latest_per_cell(results), plan.cells), plan.cells)
    counts = outcome.results["status"].value_counts().to_dict() if len(outcome.results) else {}
    outcome.wall_time_s = time.time() - started
    summary = None
    if len(outcome.results) and status not in (RUN_KILLED, RUN_FAILED):
        note = plan.seed_plan.describe() if plan.seed_plan is not None else ""
        outcome.summary, outcome.files = write_table(
            outcome.results, len(plan.seeds), options.out_dir, plan.partition_seeds, note, plan.metric
        )
        summary = outcome.summary
        tracker.log_files(outcome.parent_run_id, outcome.files, ABLATION_FOLDER)  # the run keeps its own copy
    auto = seed_facts(plan)["auto"] if plan.auto is not None else ""  # a resume may have changed the target
    end = ablation_parent_end(plan.seeds, auto, outcome.wall_time_s, counts, summary, plan.metric)
    tracker.log_results(outcome.parent_run_id, end.metrics, end.tags)
