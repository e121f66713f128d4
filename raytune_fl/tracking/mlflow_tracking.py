"""MLflow layout: experiment = space name, a parent run per variant study, a child run per trial.

Everything is written from the Tune driver process (a SQLite store locks under concurrent writers),
through an explicit MlflowClient and run ids: no global "active run" state.
"""

from __future__ import annotations

import json
import math
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
from mlflow.entities import Metric, Param, RunTag
from mlflow.tracking import MlflowClient
from ray import tune

from raytune_fl.data.record import partition_heatmap, partition_table, save_partition_parquet
from raytune_fl.engine.federation import CLIENT_ACC_KEY, CLIENT_LOG_KEY, SPECTRUM_KEY, FederatedData

# Tune's own bookkeeping keys: not our metrics
_TUNE_KEYS = {
    "training_iteration",
    "time_this_iter_s",
    "time_total_s",
    "timestamp",
    "pid",
    "hostname",
    "node_ip",
    "done",
    "time_since_restore",
    "iterations_since_restore",
    "checkpoint_dir_name",
    "should_checkpoint",
}
_MAX_PARAM_LEN = 6000  # MLflow's limit on a param value


def default_tracking_uri(directory: str | Path = ".") -> str:
    return f"sqlite:///{(Path(directory) / 'mlflow.db').resolve()}"


def _param_value(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text[:_MAX_PARAM_LEN]


def round_metrics(result: dict[str, Any]) -> dict[str, float]:
    """The numeric metrics a trial reported, without Tune's bookkeeping."""
    return {
        k: float(v)
        for k, v in result.items()
        if k not in _TUNE_KEYS and isinstance(v, (int, float)) and not isinstance(v, bool) and k != "round"
    }


class StudyTracker:
    def __init__(self, tracking_uri: str, experiment_name: str) -> None:
        self.uri = tracking_uri
        self.client = MlflowClient(tracking_uri)
        found = self.client.get_experiment_by_name(experiment_name)
        if found is None:
            artifact_location = None
            if tracking_uri.startswith("sqlite:///"):  # keep artifacts beside the database, not in the cwd
                db = Path(tracking_uri.removeprefix("sqlite:///"))
                artifact_location = (db.parent / "mlartifacts" / experiment_name).resolve().as_uri()
            self.experiment_id = self.client.create_experiment(experiment_name, artifact_location=artifact_location)
        else:
            self.experiment_id = found.experiment_id
        self.experiment_name = experiment_name

    def start_parent(self, variant: str, tags: dict[str, str], params: dict[str, Any], config: dict[str, Any]) -> str:
        """A variant study's parent run (stage=tune)."""
        return self.start_run(variant, {"variant": variant, "stage": "tune", **tags}, params, config)

    def start_run(self, run_name: str, tags: dict[str, str], params: dict[str, Any], config: dict[str, Any]) -> str:
        run = self.client.create_run(self.experiment_id, run_name=run_name, tags=tags)
        self.log_params(run.info.run_id, params)
        self.client.log_dict(run.info.run_id, config, "config.yaml")
        return run.info.run_id

    def log_partition(
        self, run_id: str, data: FederatedData, title: str, artifact_path: str = "partition"
    ) -> pd.DataFrame:
        """Per client: sample count and label histogram, as Parquet and a heat map, under partition/."""
        dataset = data.dataset
        table = partition_table(
            dataset.y_train,
            data.client_parts,
            dataset.num_classes,
            class_names=dataset.class_names,
            domains=dataset.domains_train,
            domain_names=dataset.domain_names,
        )
        with tempfile.TemporaryDirectory() as tmp:
            save_partition_parquet(table, Path(tmp) / "partition.parquet")
            partition_heatmap(table, Path(tmp) / "partition.png", title)
            self.client.log_artifacts(run_id, tmp, artifact_path=artifact_path)
        return table

    def log_params(self, run_id: str, params: dict[str, Any]) -> None:
        items = [Param(k, _param_value(v)) for k, v in params.items()]
        for start in range(0, len(items), 100):  # MLflow caps a batch at 100 params
            self.client.log_batch(run_id, params=items[start : start + 100])

    def reopen(self, run_id: str) -> None:
        """A resumed study continues in the run it started in (no new parent, no orphan)."""
        self.client.update_run(run_id, status="RUNNING")

    def close_running_children(self, parent_run_id: str, status: str = "KILLED") -> int:
        """Child runs still RUNNING once a study ends belong to trials that died with a killed driver before
        Tune recorded them (a resume re-creates such trials under new runs); they are closed, not left RUNNING."""
        runs = self.client.search_runs(
            [self.experiment_id],
            filter_string=f"tags.mlflow.parentRunId = '{parent_run_id}' and attributes.status = 'RUNNING'",
        )
        for run in runs:
            self.client.set_tag(run.info.run_id, "trial_status", "interrupted")
            self.client.set_terminated(run.info.run_id, status)
        return len(runs)

    def finish_parent(
        self, run_id: str, metrics: dict[str, float], tags: dict[str, Any], status: str = "FINISHED"
    ) -> None:
        now = int(time.time() * 1000)
        finite = [Metric(k, float(v), now, 0) for k, v in metrics.items() if math.isfinite(v)]
        self.client.log_batch(run_id, metrics=finite, tags=[RunTag(k, _param_value(v)) for k, v in tags.items()])
        self.client.set_terminated(run_id, status)

    def trial_logger(
        self,
        parent_run_id: str,
        variant: str,
        method: str,
        base_params: dict[str, Any],
        rounds: int,
        resuming: bool = False,
    ) -> MlflowTrialLogger:
        """The tune stage's logger: runs named `<variant>-<index>`, params = base + the sampled hyperparameters."""

        def describe(trial: Any, index: int) -> TrialRun:
            tags = {"variant": variant, "method": method, "stage": "tune"}
            return TrialRun(f"{variant}-{index:03d}", tags, {**base_params, **trial.config})

        return MlflowTrialLogger(self, parent_run_id, rounds, describe, resuming)


@dataclass(frozen=True)
class TrialRun:
    """How a trial appears in MLflow: its run name, tags to filter by and params to compare."""

    name: str
    tags: dict[str, str]
    params: dict[str, Any]
    rounds: int | None = None  # the rounds this trial runs when it differs from the logger's (an ablation grid)


# per-round lists a trial reports, filed as long-format Parquet artifacts: key -> (file, columns, rows of a round)
def _indexed_rows(step: int, values: list) -> list[tuple]:
    return [(step, i, value) for i, value in enumerate(values)]


_ROUND_LISTS: dict[str, tuple[str, list[str] | None, Callable[[int, list], list]]] = {
    SPECTRUM_KEY: ("classifier_spectrum.parquet", ["round", "index", "singular_value"], _indexed_rows),
    CLIENT_ACC_KEY: ("client_accuracy.parquet", ["round", "client", "accuracy"], _indexed_rows),
    # per client and round: trained / dropped / late / lost, steps, simulated time, staleness (dict rows)
    CLIENT_LOG_KEY: ("client_rounds.parquet", None, lambda step, values: list(values)),
}


class MlflowTrialLogger(tune.Callback):
    """A Tune callback (runs in the driver): one child run per trial, metrics per round (step = round).

    Resuming (Tuner.restore), a trial continues in its own run: found by its `trial_id` tag, reopened, and
    rounds it already logged are not logged twice (a trial restarts from its last checkpoint, which may be
    a round or two before the last round the killed driver logged; the seeded rounds repeat exactly).
    """

    def __init__(
        self,
        tracker: StudyTracker,
        parent_run_id: str,
        rounds: int,
        describe: Callable[[Any, int], TrialRun],
        resuming: bool = False,
    ) -> None:
        self.tracker, self.client = tracker, tracker.client
        self.parent_run_id, self.rounds, self.describe = parent_run_id, rounds, describe
        self.resuming = resuming
        self.run_ids: dict[str, str] = {}
        self.history: dict[str, list[dict[str, Any]]] = {}
        self.lists: dict[str, dict[str, list]] = {}  # trial -> round-list key -> rows
        self.diverged: dict[str, str] = {}
        self.trial_index: dict[str, int] = {}
        self.trial_rounds: dict[str, int] = {}
        self.restarts: dict[str, int] = {}  # trial -> times Tune restarted it from a checkpoint

    def _existing_run(self, trial_id: str) -> Any:
        runs = self.client.search_runs(
            [self.tracker.experiment_id],
            filter_string=f"tags.mlflow.parentRunId = '{self.parent_run_id}' and tags.trial_id = '{trial_id}'",
        )
        return runs[0] if runs else None

    def _open(self, trial: Any) -> str:
        """The trial's run: already open, or found again (resume), or new."""
        if trial.trial_id in self.run_ids:
            return self.run_ids[trial.trial_id]
        existing = self._existing_run(trial.trial_id) if self.resuming else None
        rows: list[dict[str, Any]] = []
        if existing is not None:
            run_id = existing.info.run_id
            self.client.update_run(run_id, status="RUNNING")
            self.client.set_tag(run_id, "resumed", "true")
            rows = self._logged_rows(run_id, existing.data.metrics)
        else:
            if self.resuming and not self.trial_index:  # number new runs after the ones the first attempt made
                done = self.client.search_runs(
                    [self.tracker.experiment_id], filter_string=f"tags.mlflow.parentRunId = '{self.parent_run_id}'"
                )
                self.trial_index = {run.data.tags.get("trial_id", run.info.run_id): i for i, run in enumerate(done)}
            index = self.trial_index.setdefault(trial.trial_id, len(self.trial_index))
            described = self.describe(trial, index)
            if described.rounds is not None:
                self.trial_rounds[trial.trial_id] = described.rounds
            tags = {
                **described.tags,
                "mlflow.parentRunId": self.parent_run_id,
                "trial_id": trial.trial_id,
                "trial_status": "running",
            }
            run = self.client.create_run(self.tracker.experiment_id, run_name=described.name, tags=tags)
            run_id = run.info.run_id
            self.tracker.log_params(run_id, described.params)
        self.run_ids[trial.trial_id] = run_id
        self.history[trial.trial_id] = rows
        self.lists[trial.trial_id] = {key: [] for key in _ROUND_LISTS}
        return run_id

    def _logged_rows(self, run_id: str, latest: dict[str, float]) -> list[dict[str, Any]]:
        by_round: dict[int, dict[str, Any]] = {}
        for key in latest:
            for point in self.client.get_metric_history(run_id, key):
                by_round.setdefault(point.step, {"round": point.step})[key] = point.value
        return [by_round[step] for step in sorted(by_round)]

    def on_trial_start(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self._open(trial)

    def on_trial_result(self, iteration: int, trials: list, trial: Any, result: dict, **info: Any) -> None:
        run_id = self._open(trial)
        step = int(result.get("round", result.get("training_iteration", 0)))
        history = self.history[trial.trial_id]
        if history and step <= history[-1]["round"]:
            return  # replayed after a resume from an earlier checkpoint: already logged, identical by seeding
        metrics = round_metrics(result)
        now = int(time.time() * 1000)
        batch = [Metric(k, v, now, step) for k, v in metrics.items() if math.isfinite(v)]
        self.client.log_batch(run_id, metrics=batch)
        history.append({"round": step, **metrics})
        for key, (_, _, rows_of) in _ROUND_LISTS.items():
            if isinstance(result.get(key), list):
                self.lists[trial.trial_id][key].extend(rows_of(step, result[key]))
        if result.get("diverged"):
            self.diverged[trial.trial_id] = str(result.get("divergence", "non-finite loss"))

    def _close(self, trial: Any, status: str, trial_status: str) -> None:
        run_id = self.run_ids.pop(trial.trial_id, None)
        if run_id is None:
            return
        rows = self.history.pop(trial.trial_id, [])
        last_round = rows[-1]["round"] if rows else 0
        reason = self.diverged.pop(trial.trial_id, None)
        if reason is not None:
            trial_status = "diverged"  # stopped itself; the study went on
            self.client.set_tag(run_id, "divergence", reason[:500])
        elif trial_status == "finished" and last_round < self.trial_rounds.pop(trial.trial_id, self.rounds):
            trial_status = "stopped_early"  # ASHA stopped it: its last value is a truncated score
        self.client.set_tag(run_id, "trial_status", trial_status)
        self.client.set_tag(run_id, "rounds_completed", str(last_round))
        failures = rows[-1].get("actor_failures_total", 0) if rows else 0
        self.client.set_tag(run_id, "actor_failures", str(int(failures)))
        tables = {"round_metrics.parquet": pd.DataFrame(rows) if rows else None}
        for key, collected in self.lists.pop(trial.trial_id, {}).items():
            name, columns, _ = _ROUND_LISTS[key]
            if collected:
                tables[name] = pd.DataFrame(collected, columns=columns)
        with tempfile.TemporaryDirectory() as tmp:
            for name, table in tables.items():
                if table is not None:
                    table.to_parquet(Path(tmp) / name, index=False)
                    self.client.log_artifact(run_id, str(Path(tmp) / name))
        self.client.set_terminated(run_id, status)

    def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self._close(trial, "FINISHED", "finished")

    def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self._close(trial, "FAILED", "error")

    def on_trial_recover(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        """The trial's process died (a lost node, say) and Tune restarts it from its last checkpoint: same run."""
        run_id = self.run_ids.get(trial.trial_id)
        if run_id is not None:
            self.restarts[trial.trial_id] = self.restarts.get(trial.trial_id, 0) + 1
            self.client.set_tag(run_id, "trial_restarts", str(self.restarts[trial.trial_id]))

    def close_open_runs(self, status: str = "KILLED") -> None:
        """After an interruption: no child run may stay RUNNING."""
        for trial_id, run_id in list(self.run_ids.items()):
            self.client.set_tag(run_id, "trial_status", "interrupted")
            self.client.set_terminated(run_id, status)
            del self.run_ids[trial_id]
