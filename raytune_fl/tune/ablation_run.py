"""Running an ablation plan: one grid of Tune trials, one MLflow parent with a child run per cell, the table."""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
from ray import tune

from raytune_fl.config import flatten
from raytune_fl.engine.federation import FederatedData
from raytune_fl.report.store import ablation_results
from raytune_fl.report.table import summarise, to_csv, to_markdown
from raytune_fl.tracking import StudyTracker
from raytune_fl.tracking.mlflow_tracking import MlflowTrialLogger, TrialRun
from raytune_fl.tune.ablation import AblationCell, AblationPlan, ablation_trial, cell_run
from raytune_fl.tune.resources import placement_group_factory
from raytune_fl.tune.storage import Storage
from raytune_fl.tune.study import ProgressPrinter, _print, run_config

TABLE_METRIC = "test_acc"  # the papers report final test accuracy; selection already happened on validation


@dataclass
class AblationOutcome:
    parent_run_id: str
    results: pd.DataFrame  # one row per cell (ablation_results columns)
    summary: pd.DataFrame  # one row per (variant, setting): mean, std, n, runs, best
    files: dict[str, Path] = field(default_factory=dict)  # results.parquet, table.md, table.csv
    wall_time_s: float = 0.0

    @property
    def unfinished(self) -> int:
        return int((self.results["status"] != "finished").sum()) if len(self.results) else 0


def find_parent(tracker: StudyTracker, fingerprint: str) -> tuple[str | None, set[str]]:
    """The newest ablation parent with this plan and the cells it already finished (for --resume)."""
    parents = tracker.client.search_runs(
        [tracker.experiment_id],
        filter_string=f"tags.stage = 'ablation' and tags.role = 'parent' and tags.plan = '{fingerprint}'",
        order_by=["attributes.start_time DESC"],
    )
    if not parents:
        return None, set()
    run_id = parents[0].info.run_id
    finished = tracker.client.search_runs(
        [tracker.experiment_id],
        filter_string=f"tags.mlflow.parentRunId = '{run_id}' and tags.trial_status = 'finished'",
    )
    return run_id, {run.data.tags.get("cell", "") for run in finished}


def start_parent(tracker: StudyTracker, plan: AblationPlan, data: dict[str, FederatedData]) -> str:
    """The ablation's parent run: the plan, where each variant's configuration came from, each setting's partition."""
    sources = plan.sources.values()
    run_id = tracker.start_run(
        "ablation",
        tags={
            "stage": "ablation",
            "role": "parent",
            "plan": plan.fingerprint,
            "seeds": ",".join(map(str, plan.seeds)),
            "grid": json.dumps({axis.name: list(axis.values) for axis in plan.axes}, default=str),
            "variants": ",".join(plan.sources),
            "study_run_ids": json.dumps({s.variant: s.study_run_id for s in sources}),
            **{f"config_source.{s.variant}": s.note[:500] for s in sources},
        },
        params={**flatten(plan.space.base.model_dump(mode="json")), "seeds": len(plan.seeds)},
        config={
            "name": plan.space.name,
            "base": plan.space.base.model_dump(mode="json"),
            "grid": {a.name: {"field": f"base.{a.field}", "values": list(a.values)} for a in plan.axes},
            "seeds": plan.seeds,
            "variants": {s.variant: {"method": s.method, "params": s.params, "source": s.note} for s in sources},
        },
    )
    for label, experiment in plan.experiments.items():
        part = experiment.partition
        folder = "partition" if len(plan.experiments) == 1 else f"partition/{setting_folder(label)}"
        tracker.log_partition(run_id, data[label], f"{experiment.dataset}: {part.kind}, {label}", folder)
    return run_id


def setting_folder(label: str) -> str:
    return label.replace("=", "-").replace(",", "_")


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
        tune.with_parameters(ablation_trial, cells=by_key), placement_group_factory(resources)
    )
    tuner = tune.Tuner(
        trainable,
        param_space={"cell": tune.grid_search(list(by_key))},
        # the next cell runs in the finished cell's process, with its client actors (actors/pool.py)
        tune_config=tune.TuneConfig(num_samples=1, max_concurrent_trials=max_concurrent, reuse_actors=True),
        run_config=run_config(name, storage, callbacks, cells[0].experiment.faults.trial_retries),
    )
    return tuner.fit()


def latest_per_cell(results: pd.DataFrame) -> pd.DataFrame:
    """A cell re-run by --resume has several runs: keep a finished one, else the newest."""
    if results.empty:
        return results
    # ablation_results lists newest first: a lower _order is a newer run
    ranked = results.assign(_finished=results["status"] == "finished", _order=range(len(results)))
    ranked = ranked.sort_values(["_finished", "_order"], ascending=[False, True])
    kept = ranked.drop_duplicates("cell", keep="first")
    return kept.drop(columns=["_finished", "_order"])


def plan_order(results: pd.DataFrame, cells: list[AblationCell]) -> pd.DataFrame:
    """Rows in plan order (settings, then variants as in the file, then seeds): the table's order."""
    position = {cell.key: i for i, cell in enumerate(cells)}
    order = results["cell"].map(position).fillna(len(position))
    return results.assign(_pos=order).sort_values("_pos", kind="stable").drop(columns="_pos").reset_index(drop=True)


def write_table(results: pd.DataFrame, seeds: int, out_dir: Path) -> tuple[pd.DataFrame, dict[str, Path]]:
    summary = summarise(results, TABLE_METRIC)
    files = {
        "results.parquet": out_dir / "ablation_results.parquet",
        "table.md": out_dir / "ablation_table.md",
        "table.csv": out_dir / "ablation_table.csv",
    }
    results.to_parquet(files["results.parquet"], index=False)
    files["table.md"].write_text(to_markdown(summary, TABLE_METRIC, seeds=seeds))
    files["table.csv"].write_text(to_csv(summary))
    return summary, files


def run_ablation(
    plan: AblationPlan,
    tracker: StudyTracker,
    data: dict[str, FederatedData],
    *,
    storage: str | Path | Storage,  # a directory or URI (tune/storage.py)
    out_dir: Path,
    resume: tuple[str, set[str]] | None = None,
    out: Callable[[str], None] = _print,
) -> AblationOutcome:
    """Runs the plan's cells (with `resume`: under that parent, skipping the cells it finished), logs every run to
    MLflow, and writes the results and the table to `out_dir` and to the parent run's `ablation/` artifacts."""
    started = time.time()
    if resume is None:
        parent_run_id, done = start_parent(tracker, plan, data), set()
    else:
        (parent_run_id, done) = resume
        tracker.reopen(parent_run_id)
    out(f"MLflow ablation run: {parent_run_id}")
    todo = [cell for cell in plan.cells if cell.key not in done]
    by_key = {cell.key: cell for cell in todo}

    def describe(trial: Any, index: int) -> TrialRun:
        cell = by_key[trial.config["cell"]]
        name, tags, params = cell_run(cell)
        return TrialRun(name, tags, params, rounds=cell.experiment.rounds)

    logger = MlflowTrialLogger(tracker, parent_run_id, plan.rounds, describe, resuming=bool(done))
    printer = ProgressPrinter("ablation", len(todo), plan.rounds, plan.space.tune.metric, out)
    status = "FAILED"
    outcome = AblationOutcome(parent_run_id, pd.DataFrame(), pd.DataFrame())
    try:
        if todo:
            run_cells(
                todo,
                name=f"{plan.space.name}-ablation-{time.strftime('%Y%m%d-%H%M%S')}",
                storage=storage,
                max_concurrent=plan.space.tune.max_concurrent,
                callbacks=[printer, logger],
            )
        status = "FINISHED"
    except KeyboardInterrupt:
        status = "KILLED"
        raise
    finally:  # whatever finished is in MLflow: the table is written from it even after an interruption
        logger.close_open_runs()
        tracker.close_running_children(parent_run_id)
        results = ablation_results(tracker.client, tracker.experiment_id, parent_run_id)
        outcome.results = plan_order(latest_per_cell(results), plan.cells)
        counts = outcome.results["status"].value_counts().to_dict() if len(outcome.results) else {}
        outcome.wall_time_s = time.time() - started
        metrics = {"wall_time_s": outcome.wall_time_s, **{f"runs_{k}": float(v) for k, v in counts.items()}}
        if len(outcome.results):
            outcome.summary, outcome.files = write_table(outcome.results, len(plan.seeds), out_dir)
            with tempfile.TemporaryDirectory() as tmp:  # the run keeps its own copy under ablation/
                for artifact, path in outcome.files.items():
                    (Path(tmp) / artifact).write_bytes(path.read_bytes())
                tracker.client.log_artifacts(parent_run_id, tmp, artifact_path="ablation")
        tracker.finish_parent(parent_run_id, metrics, {}, status)
    return outcome
