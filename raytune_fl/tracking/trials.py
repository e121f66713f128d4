"""A study's trials in MLflow: one child run per trial, its metrics per round (step = round), its end.

Plain bookkeeping keyed by trial id: whatever runs the trials (the Ray Tune callback in tune/callbacks.py) says
when a trial starts, reports a round, ends, fails or is restarted. Resuming, a trial continues in its own run:
found by its trial_id tag, reopened, and rounds it already logged are not logged twice (a trial restarts from its
last checkpoint, which may be a round or two before the last round the killed driver logged; the seeded rounds
repeat exactly). A report's system samples (opt-in, tracking/system_metrics.py) are logged beside its metrics at the
same step, under MLflow's `system/` names, and kept out of the round table and the replay's comparison.
"""

from __future__ import annotations

import math
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import pandas as pd
from mlflow.entities import Metric
from mlflow.tracking import MlflowClient

from raytune_fl.data.identity import DataIdentity
from raytune_fl.engine.report import CLIENT_ACC_KEY, CLIENT_LOG_KEY, SPECTRUM_KEY, RoundReport
from raytune_fl.metrics import ACTOR_FAILURES_TOTAL, ROUND, SYSTEM_PREFIX
from raytune_fl.tracking import store
from raytune_fl.tracking.records import RunRecord, ended_status
from raytune_fl.tracking.schema import (
    CLIENT_ACCURACY_FILE,
    CLIENT_ROUNDS_FILE,
    ROUND_METRICS_FILE,
    RUN_FAILED,
    RUN_FINISHED,
    RUN_KILLED,
    RUN_RUNNING,
    SPECTRUM_FILE,
    SUPERSEDED_SUFFIX,
    TAG_ACTOR_FAILURES,
    TAG_CELL,
    TAG_DIVERGENCE,
    TAG_PARENT_RUN,
    TAG_REPLAY_DIFFERED,
    TAG_RESUMED,
    TAG_ROUNDS_COMPLETED,
    TAG_SUPERSEDED_BY,
    TAG_TRIAL_ID,
    TAG_TRIAL_RESTARTS,
    TAG_TRIAL_STATUS,
    TRIAL_DIVERGED,
    TRIAL_ERROR,
    TRIAL_FINISHED,
    TRIAL_INTERRUPTED,
    TRIAL_RUNNING,
    TRUE,
)


class RunWriter(Protocol):
    """What a trial's runs need of the study's tracker (tracker.StudyTracker): its store, experiment and params."""

    client: MlflowClient
    experiment_id: str

    def log_params(self, run_id: str, params: dict[str, Any]) -> None: ...

    def log_datasets(self, run_id: str, identities: list[DataIdentity]) -> None: ...

    def describe(self, run_id: str, text: str) -> None: ...


def replay_differs(logged: dict[str, Any], replayed: dict[str, float]) -> bool:
    """Whether a replayed round's learning metrics differ from the ones logged for it (timings always differ)."""
    for key, value in replayed.items():
        if key.endswith("_s") or key not in logged or not math.isfinite(value):
            continue
        if float(logged[key]) != value:
            return True
    return False


# per-round lists a trial reports, filed as long-format Parquet artifacts: key -> (file, columns, rows of a round)
def _indexed_rows(step: int, values: list) -> list[tuple]:
    return [(step, i, value) for i, value in enumerate(values)]


_ROUND_LISTS: dict[str, tuple[str, list[str] | None, Callable[[int, list], list]]] = {
    SPECTRUM_KEY: (SPECTRUM_FILE, [ROUND, "index", "singular_value"], _indexed_rows),
    CLIENT_ACC_KEY: (CLIENT_ACCURACY_FILE, [ROUND, "client", "accuracy"], _indexed_rows),
    # per client and round: trained / dropped / late / lost, steps, simulated time, staleness (dict rows)
    CLIENT_LOG_KEY: (CLIENT_ROUNDS_FILE, None, lambda step, values: list(values)),
}


class TrialRecords(Protocol):
    """The runs of a parent's trials (tracking/records.py's TuneTrials, CellTrials): `record(config, index)` is the
    run of a new trial, `index` its number among the parent's runs."""

    def record(self, config: dict[str, Any], index: int) -> RunRecord: ...


class TrialTracker:
    """The child runs of one parent run, one per trial, written from the driver process."""

    def __init__(
        self,
        tracker: RunWriter,
        parent_run_id: str,
        rounds: int,
        records: TrialRecords,
        resuming: bool = False,
    ) -> None:
        self.tracker, self.client = tracker, tracker.client
        self.parent_run_id, self.rounds, self.records = parent_run_id, rounds, records
        self.resuming = resuming
        self.run_ids: dict[str, str] = {}
        self.history: dict[str, list[dict[str, Any]]] = {}
        self.lists: dict[str, dict[str, list]] = {}  # trial -> round-list key -> rows
        self.diverged: dict[str, str] = {}
        self.replay_differed: dict[str, list[int]] = {}  # trial -> rounds its replay logged anew
        self.trial_index: dict[str, int] = {}
        self.trial_rounds: dict[str, int] = {}
        self.restarts: dict[str, int] = {}  # trial -> times it was restarted from a checkpoint
        self._pending: list[Callable[..., None]] = []  # flushes of writers that call this tracker from a thread

    def __getstate__(self) -> dict[str, Any]:  # pickled with Tune's callbacks; a writer's thread is not
        return {**self.__dict__, "_pending": []}

    def wait_for(self, flush: Callable[..., None]) -> None:
        """Another thread writes this tracker's events (tune/callbacks.py): `flush(raise_error=False)` waits for
        those writes, and `close_open_runs` calls it first."""
        self._pending.append(flush)

    def open(self, trial_id: str, config: dict[str, Any]) -> str:
        """The trial's run: already open, or found again (resume), or new."""
        if trial_id in self.run_ids:
            return self.run_ids[trial_id]
        experiment = self.tracker.experiment_id
        existing = store.trial_run(self.client, experiment, self.parent_run_id, trial_id) if self.resuming else None
        rows: list[dict[str, Any]] = []
        if existing is not None:
            run_id = existing.info.run_id
            self.client.update_run(run_id, status=RUN_RUNNING)
            self.client.set_tag(run_id, TAG_RESUMED, TRUE)
            learning = [key for key in existing.data.metrics if not key.startswith(SYSTEM_PREFIX)]  # the round table's
            rows = store.logged_rounds(self.client, run_id, learning)
        else:
            if self.resuming and not self.trial_index:  # number new runs after the ones the first attempt made
                done = store.child_runs(self.client, experiment, self.parent_run_id)
                self.trial_index = {run.data.tags.get(TAG_TRIAL_ID, run.info.run_id): i for i, run in enumerate(done)}
            index = self.trial_index.setdefault(trial_id, len(self.trial_index))
            described = self.records.record(config, index)
            if described.rounds is not None:
                self.trial_rounds[trial_id] = described.rounds
            tags = {
                **described.tags,
                TAG_PARENT_RUN: self.parent_run_id,
                TAG_TRIAL_ID: trial_id,
                TAG_TRIAL_STATUS: TRIAL_RUNNING,
            }
            run = self.client.create_run(experiment, run_name=described.name, tags=tags)
            run_id = run.info.run_id
            if self.resuming and TAG_CELL in tags:
                self._supersede(tags[TAG_CELL], run_id)
            self.tracker.log_params(run_id, described.params)
            self.tracker.log_datasets(run_id, list(described.datasets))
            if described.description:
                self.tracker.describe(run_id, described.description)
        self.run_ids[trial_id] = run_id
        self.history[trial_id] = rows
        self.lists[trial_id] = {key: [] for key in _ROUND_LISTS}
        return run_id

    def _supersede(self, cell: str, run_id: str) -> None:
        """An ablation cell run again by --resume (a new Tune run: a new trial, so a new run): its cut runs are
        tagged superseded_by and renamed, so that neither the UI nor the results show two runs of the cell."""
        for old in store.cut_cell_runs(self.client, self.tracker.experiment_id, self.parent_run_id, cell):
            if old.info.run_id == run_id:
                continue
            self.client.set_tag(old.info.run_id, TAG_SUPERSEDED_BY, run_id)
            self.client.update_run(old.info.run_id, name=f"{old.info.run_name}{SUPERSEDED_SUFFIX}")

    def log_round(self, trial_id: str, config: dict[str, Any], report: RoundReport) -> None:
        """A round's report: its metrics (step = round), its per-round lists, whether the trial diverged (its last
        round's metrics also say, at `close`, whether it ended at chance: collapsed)."""
        run_id = self.open(trial_id, config)
        step = report.round
        history = self.history[trial_id]
        metrics = report.metrics()
        if history and step <= history[-1][ROUND]:  # replayed after a resume from an earlier checkpoint
            row = next((r for r in history if r[ROUND] == step), None)
            if row is None or not replay_differs(row, metrics):
                return  # already logged, and the replay gave the same values (always so on a CPU)
            # a GPU without deterministic kernels replays other values: the curve goes on from the replay, said so
            history[history.index(row)] = {ROUND: step, **metrics}
            for key, rows in self.lists[trial_id].items():  # the replay's per-round lists replace the logged ones
                self.lists[trial_id][key] = [r for r in rows if (r[ROUND] if isinstance(r, dict) else r[0]) != step]
            self.replay_differed.setdefault(trial_id, []).append(step)
            self.client.set_tag(run_id, TAG_REPLAY_DIFFERED, ",".join(map(str, self.replay_differed[trial_id])))
        else:
            history.append({ROUND: step, **metrics})
        now = int(time.time() * 1000)
        logged = {**metrics, **(report.system or {})}  # the trial process's system samples of this round, if any
        batch = [Metric(k, v, now, step) for k, v in logged.items() if math.isfinite(v)]
        self.client.log_batch(run_id, metrics=batch)
        for key, values in report.lists().items():
            self.lists[trial_id][key].extend(_ROUND_LISTS[key][2](step, values))
        if report.diverged:
            self.diverged[trial_id] = report.divergence or "non-finite loss"

    def complete(self, trial_id: str) -> None:
        self.close(trial_id, RUN_FINISHED, TRIAL_FINISHED)

    def fail(self, trial_id: str) -> None:
        self.close(trial_id, RUN_FAILED, TRIAL_ERROR)

    def close(self, trial_id: str, status: str, trial_status: str) -> None:
        """The trial's run ends: its status tags, its round table and per-round lists as Parquet artifacts."""
        run_id = self.run_ids.pop(trial_id, None)
        if run_id is None:
            return
        rows = self.history.pop(trial_id, [])
        last_round = rows[-1][ROUND] if rows else 0
        reason = self.diverged.pop(trial_id, None)
        rounds = self.trial_rounds.pop(trial_id, self.rounds)
        if reason is not None:
            trial_status = TRIAL_DIVERGED  # stopped itself; the study went on
            self.client.set_tag(run_id, TAG_DIVERGENCE, reason[:500])
        elif trial_status == TRIAL_FINISHED:  # or stopped early by ASHA, or ran every round to a score at chance
            trial_status = ended_status(rows[-1] if rows else {}, last_round, rounds)
        self.client.set_tag(run_id, TAG_TRIAL_STATUS, trial_status)
        self.client.set_tag(run_id, TAG_ROUNDS_COMPLETED, str(last_round))
        failures = rows[-1].get(ACTOR_FAILURES_TOTAL, 0) if rows else 0
        self.client.set_tag(run_id, TAG_ACTOR_FAILURES, str(int(failures)))
        tables = {ROUND_METRICS_FILE: pd.DataFrame(rows) if rows else None}
        for key, collected in self.lists.pop(trial_id, {}).items():
            name, columns, _ = _ROUND_LISTS[key]
            if collected:
                tables[name] = pd.DataFrame(collected, columns=columns)
        with tempfile.TemporaryDirectory() as tmp:
            for name, table in tables.items():
                if table is not None:
                    table.to_parquet(Path(tmp) / name, index=False)
                    self.client.log_artifact(run_id, str(Path(tmp) / name))
        self.client.set_terminated(run_id, status)

    def restarted(self, trial_id: str) -> None:
        """The trial's process died (a lost node, say) and it restarts from its last checkpoint: same run."""
        run_id = self.run_ids.get(trial_id)
        if run_id is not None:
            self.restarts[trial_id] = self.restarts.get(trial_id, 0) + 1
            self.client.set_tag(run_id, TAG_TRIAL_RESTARTS, str(self.restarts[trial_id]))

    def close_open_runs(self, status: str = RUN_KILLED) -> None:
        """After an interruption: no child run may stay RUNNING."""
        for flush in self._pending:  # an error of theirs is not raised here: the interruption's is on its way
            flush(raise_error=False)
        for trial_id, run_id in list(self.run_ids.items()):
            self.client.set_tag(run_id, TAG_TRIAL_STATUS, TRIAL_INTERRUPTED)
            self.client.set_terminated(run_id, status)
            del self.run_ids[trial_id]
