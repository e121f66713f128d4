"""MLflow layout: experiment = space name, a parent run per variant study or ablation, a child run per trial.

Everything is written from the driver process (a SQLite store locks under concurrent writers), through an
explicit MlflowClient and run ids: no global "active run" state. Tag names are schema.py's; reads go through
store.py.
"""

from __future__ import annotations

import json
import logging
import math
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd
from mlflow.entities import Dataset, DatasetInput, InputTag, Metric, Param, RunTag
from mlflow.tracking import MlflowClient

from raytune_fl.data.identity import DataIdentity, source_text
from raytune_fl.data.record import partition_heatmap, partition_table, save_partition_parquet
from raytune_fl.tracking import store
from raytune_fl.tracking.new_store import seed_new_store
from raytune_fl.tracking.records import WALL_TIME, RunEnd, RunRecord
from raytune_fl.tracking.schema import (
    CONFIG_FILE,
    CONTEXT_TRAIN,
    DATASET_CONTEXT,
    EXPERIMENT_KIND_TRAINING,
    LEFT_RUNNING,
    PARTITION_FILE,
    PARTITION_FOLDER,
    RUN_FAILED,
    RUN_FINISHED,
    RUN_KILLED,
    RUN_RUNNING,
    TAG_DESCRIPTION,
    TAG_EXPERIMENT_KIND,
    TAG_FAILURE,
    TAG_INTERRUPTED,
    TAG_PARETO_FRONT,
    TAG_RESUME_COMMAND,
    TAG_RESUMED,
    TAG_TRIAL_STATUS,
    TRIAL_INTERRUPTED,
    TRUE,
    encode_value,
)
from raytune_fl.tracking.trials import TrialTracker

if TYPE_CHECKING:
    from raytune_fl.engine.data import FederatedData

_log = logging.getLogger(__name__)  # unconfigured: Python prints a warning's text alone on stderr


@dataclass
class PartitionFiles:
    table: pd.DataFrame
    folder: tempfile.TemporaryDirectory  # the Parquet table and the heat map, as they are logged


def draw_partition(data: FederatedData, title: str) -> PartitionFiles:
    dataset = data.dataset
    table = partition_table(
        dataset.y_train,
        data.client_parts,
        dataset.num_classes,
        class_names=dataset.class_names,
        domains=dataset.domains_train,
        domain_names=dataset.domain_names,
    )
    # a command that refuses exits while this thread may still be drawing: the folder's clean-up at exit then races
    # the drawing, which must not print a traceback after the refusal (seen as a flaky test_cluster_mode)
    folder = tempfile.TemporaryDirectory(prefix="partition-", ignore_cleanup_errors=True)
    save_partition_parquet(table, Path(folder.name) / PARTITION_FILE)
    partition_heatmap(table, Path(folder.name) / "partition.png", title)
    return PartitionFiles(table, folder)


class PartitionDrawings:
    """Each (data, title)'s partition record, drawn once, on a thread; and runs' logging of it, on the same thread
    after the drawing. Pickled empty: Tune pickles its callbacks, which hold the tracker."""

    def __init__(self) -> None:
        self._empty()

    def _empty(self) -> None:
        self._thread: ThreadPoolExecutor | None = None
        self._drawn: dict[tuple[int, str], tuple[FederatedData, Future[PartitionFiles]]] = {}
        self._logging: dict[str, list[Future[None]]] = {}

    def get(self, data: FederatedData, title: str) -> Future[PartitionFiles]:
        key = (id(data), title)
        if key not in self._drawn:  # the data is kept with its drawing, so its id is not reused meanwhile
            self._drawn[key] = (data, self._submit(draw_partition, data, title))
        return self._drawn[key][1]

    def log_when_drawn(
        self, run_id: str, data: FederatedData, title: str, log: Callable[[PartitionFiles], Any]
    ) -> None:
        """`log(files)` on the thread, after the drawing (submitted before it: one thread, in order)."""
        drawn = self.get(data, title)
        self._logging.setdefault(run_id, []).append(self._submit(lambda: log(drawn.result())))

    def wait_logged(self, run_id: str) -> None:
        """Until `run_id`'s records are logged; the first failure is raised."""
        for pending in self._logging.pop(run_id, []):
            pending.result()

    def _submit(self, job: Callable[..., Any], *args: Any) -> Future[Any]:
        if self._thread is None:
            self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="partition-record")
        return self._thread.submit(job, *args)

    def __getstate__(self) -> dict[str, Any]:
        return {}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._empty()


class StudyTracker:
    def __init__(self, tracking_uri: str, experiment_name: str) -> None:
        self.uri = tracking_uri
        seed_new_store(tracking_uri)  # a new SQLite store without MLflow's migrations (~1 s): new_store.py
        self.client = MlflowClient(tracking_uri)
        found = self.client.get_experiment_by_name(experiment_name)
        if found is None:
            artifact_location = None
            if tracking_uri.startswith("sqlite:///"):  # keep artifacts beside the database, not in the cwd
                db = Path(tracking_uri.removeprefix("sqlite:///"))
                artifact_location = (db.parent / "mlartifacts" / experiment_name).resolve().as_uri()
            self.experiment_id = self.client.create_experiment(
                experiment_name,
                artifact_location=artifact_location,
                tags={TAG_EXPERIMENT_KIND: EXPERIMENT_KIND_TRAINING},
            )
        else:
            self.experiment_id = found.experiment_id
            if TAG_EXPERIMENT_KIND not in found.tags:  # made before the tag was set, or by hand; a set kind is kept
                self.client.set_experiment_tag(self.experiment_id, TAG_EXPERIMENT_KIND, EXPERIMENT_KIND_TRAINING)
        self.experiment_name = experiment_name
        self._partitions = PartitionDrawings()

    def start_run(self, record: RunRecord) -> str:
        """A run as `record` (tracking/records.py) says: name, tags, params, datasets, description, config.yaml."""
        run = self.client.create_run(self.experiment_id, run_name=record.name, tags=record.tags)
        run_id = run.info.run_id
        self.log_params(run_id, record.params)
        if record.config is not None:
            self.client.log_dict(run_id, record.config, CONFIG_FILE)
        self.log_datasets(run_id, list(record.datasets))
        if record.description:
            self.describe(run_id, record.description)
        return run_id

    def render_partition(self, data: FederatedData, title: str) -> None:
        """Start drawing `data`'s partition record (its table as Parquet, the heat map: ~0.7 s, mostly matplotlib)
        on a thread; `log_partition` of the same data and title then logs what was drawn. tune.py calls this before
        it joins Ray, which may still be starting; every variant's parent run logs the same files."""
        self._partitions.get(data, title)

    def log_partition(
        self, run_id: str, data: FederatedData, title: str, artifact_path: str = PARTITION_FOLDER
    ) -> pd.DataFrame:
        """Per client: sample count and label histogram, as Parquet and a heat map, under partition/."""
        files = self._partitions.get(data, title).result()
        self._log_partition_files(run_id, files, artifact_path)
        return files.table

    def log_partition_when_drawn(self, run_id: str, data: FederatedData, title: str) -> None:
        """`log_partition`, done on the drawing thread once the record is drawn: a variant's study starts without
        waiting for it (the drawing is ~0.7 s, mostly matplotlib). `parent_run` waits for it before the run ends,
        and raises its failure there."""
        self._partitions.log_when_drawn(
            run_id, data, title, lambda files: self._log_partition_files(run_id, files, PARTITION_FOLDER)
        )

    def _log_partition_files(self, run_id: str, files: PartitionFiles, artifact_path: str) -> None:
        self.client.log_artifacts(run_id, files.folder.name, artifact_path=artifact_path)

    def log_datasets(self, run_id: str, identities: list[DataIdentity]) -> None:
        """The data a run trained on, as MLflow dataset inputs: the runs page's Dataset column, and filters such
        as `dataset.name LIKE 'mnist5k/dirichlet-0.1%'` or `dataset.digest = '...'`."""
        if identities:
            self.client.log_inputs(run_id, datasets=[dataset_input(identity) for identity in identities])

    def describe(self, run_id: str, text: str) -> None:
        """The run's description (markdown), shown at the top of its page in the MLflow UI."""
        self.client.set_tag(run_id, TAG_DESCRIPTION, text)

    def log_model(self, run_id: str, model: Any, example: Any, step: int, linked_runs: tuple[str, ...] = ()) -> str:
        """A trained global model as an MLflow PyTorch model of `run_id` (tracking/models.py); its model id."""
        from raytune_fl.tracking.models import log_model  # imports torch.export: only when a model is logged

        return log_model(self.client, run_id, model, example, step=step, linked_runs=linked_runs)

    def link_model(self, run_id: str, model_id: str, step: int) -> None:
        """A model logged on another run (a trial's) listed as an output of `run_id` (its study's parent)."""
        from raytune_fl.tracking.models import link_model

        link_model(self.client, run_id, model_id, step=step)

    def delete_model(self, run_id: str, model_id: str) -> None:
        """A model logged on `run_id` taken back (a best-so-far model that a better trial superseded)."""
        from raytune_fl.tracking.models import delete_model

        delete_model(self.client, run_id, model_id)

    def log_params(self, run_id: str, params: dict[str, Any]) -> None:
        items = [Param(k, encode_value(v)) for k, v in params.items()]
        for start in range(0, len(items), 100):  # MLflow caps a batch at 100 params
            self.client.log_batch(run_id, params=items[start : start + 100])

    def log_files(self, run_id: str, files: dict[str, Path], artifact_path: str) -> None:
        """Copies of local files under `artifact_path`, each under its key as name."""
        with tempfile.TemporaryDirectory() as tmp:
            for name, path in files.items():
                (Path(tmp) / name).write_bytes(path.read_bytes())
            self.client.log_artifacts(run_id, tmp, artifact_path=artifact_path)

    def reopen(self, run_id: str) -> None:
        """A resumed study continues in the run it started in (no new parent, no orphan); an interruption it
        records is over once it runs again (a new one sets the tag again)."""
        self.client.update_run(run_id, status=RUN_RUNNING)
        if TAG_INTERRUPTED in self.client.get_run(run_id).data.tags:
            self.client.delete_tag(run_id, TAG_INTERRUPTED)
            if TAG_RESUME_COMMAND in self.client.get_run(run_id).data.tags:
                self.client.delete_tag(run_id, TAG_RESUME_COMMAND)
            self.client.set_tag(run_id, TAG_RESUMED, "true")

    def close_running_children(self, parent_run_id: str, status: str = RUN_KILLED) -> int:
        """Child runs still RUNNING once a study ends belong to trials that died with a killed driver before
        Tune recorded them (a resume re-creates such trials under new runs); they are closed, not left RUNNING."""
        runs = store.child_runs(self.client, self.experiment_id, parent_run_id, running=True)
        for run in runs:
            self.client.set_tag(run.info.run_id, TAG_TRIAL_STATUS, TRIAL_INTERRUPTED)
            self.client.set_terminated(run.info.run_id, status)
        return len(runs)

    def finish_parent(
        self, run_id: str, metrics: dict[str, float], tags: dict[str, Any], status: str = RUN_FINISHED
    ) -> None:
        self.log_results(run_id, metrics, tags)
        self.client.set_terminated(run_id, status)

    def log_results(self, run_id: str, metrics: dict[str, float], tags: dict[str, Any]) -> None:
        """Metrics (the finite ones) and tags on a run, open or ended (an ablation's table comes after its run)."""
        now = int(time.time() * 1000)
        finite = [Metric(k, float(v), now, 0) for k, v in metrics.items() if math.isfinite(v)]
        self.client.log_batch(run_id, metrics=finite, tags=[RunTag(k, encode_value(v)) for k, v in tags.items()])

    def tag_front(self, parent_run_id: str, trial_ids: tuple[str, ...]) -> None:
        """The trial runs on a study's Pareto front (RunEnd.front), tagged so."""
        for trial_id in trial_ids:
            run = store.trial_run(self.client, self.experiment_id, parent_run_id, trial_id)
            if run is not None:
                self.client.set_tag(run.info.run_id, TAG_PARETO_FRONT, TRUE)

    @contextmanager
    def parent_run(
        self, record: RunRecord, run_id: str | None = None, started: float | None = None
    ) -> Iterator[ParentRun]:
        """A parent run for the length of a `with` block: started as `record` says or, with `run_id` (a resume),
        reopened (`ParentRun.new` tells which). With `started` (a time.time()) the parent ends with its wall time
        since then (wall_time_s).

        The block sets `metrics` and its end (`ParentRun.end_with`, a RunEnd) on the yielded ParentRun. When it
        ends: KeyboardInterrupt -> KILLED (tagged interrupted, with the record's resume command) and re-raised, any
        other exception -> FAILED (tagged failure: the error's first line) and re-raised, a normal exit -> the
        status the block set (FINISHED if none). Then the open runs of the block's `trials` and any child still
        RUNNING are closed (KILLED, trial_status=interrupted), the end's Pareto front is tagged, the partition record
        handed to `log_partition_when_drawn` is logged (FAILED if it cannot be), and the parent finishes with its
        metrics, tags and status. What a caller adds once the run has ended, it logs with `log_results`.
        """
        new = run_id is None
        if run_id is None:
            run_id = self.start_run(record)
        else:
            self.reopen(run_id)
        parent = ParentRun(run_id, new=new)
        try:
            yield parent
            parent.status = parent.status or RUN_FINISHED
        except KeyboardInterrupt as stop:  # Ctrl-C or SIGTERM (tune/interrupt.py): what ran is kept, resumable
            parent.status = RUN_KILLED
            parent.tags[TAG_INTERRUPTED] = "true"
            if record.resume_command:  # what `ablate` names when it refuses a stopped study's variant
                parent.tags[TAG_RESUME_COMMAND] = record.resume_command
            if not self._close_after_stop(parent, started):
                setattr(stop, LEFT_RUNNING, parent.run_id)
            raise
        except BaseException as error:
            parent.status = RUN_FAILED
            parent.tags[TAG_FAILURE] = (str(error).strip() or type(error).__name__).splitlines()[0][:500]
            self._close_parent(parent, started)
            raise
        self._close_parent(parent, started)

    def _close_after_stop(self, parent: ParentRun, started: float | None) -> bool:
        """`_close_parent` for a stopped study, whose stop must not turn into a tracking error: a tracking server
        gone with the job (a `scancel` ends it too) leaves the runs RUNNING, said in one line (returns False). A
        resume reopens the parent and closes its trial runs left RUNNING, as after a killed driver."""
        try:
            self._close_parent(parent, started)
            return True
        except Exception as error:
            said = (str(error).strip() or type(error).__name__).splitlines()[0][:200]
            _log.warning(
                "MLflow did not answer while the study stopped (%s): run %s and its open trial runs stay RUNNING "
                "until --resume reopens it",
                said,
                parent.run_id,
            )
            return False

    def _close_parent(self, parent: ParentRun, started: float | None) -> None:
        """`parent_run`'s end: its children closed, its front tagged, its partition logged, then the parent."""
        run_id = parent.run_id
        try:
            for trials in parent.trials:
                trials.close_open_runs()
            self.close_running_children(run_id)
            self.tag_front(run_id, parent.front)
            try:
                self._partitions.wait_logged(run_id)
            except Exception:
                parent.status = RUN_FAILED
                raise
        finally:
            if started is not None:
                parent.metrics[WALL_TIME] = time.time() - started
            self.finish_parent(run_id, parent.metrics, parent.tags, parent.status or RUN_FAILED)


def dataset_input(identity: DataIdentity) -> DatasetInput:
    """A DataIdentity as MLflow's dataset input: name, digest, source, tensor schema, and a profile holding the
    sizes and the partition settings (shown when the dataset is clicked in the UI)."""
    schema = {
        "mlflow_tensorspec": {
            "features": json.dumps([{"name": "image", "type": "tensor", "tensor-spec": _spec(identity.shape)}]),
            "targets": json.dumps(
                [{"name": "label", "type": "tensor", "tensor-spec": {"dtype": "int64", "shape": [-1]}}]
            ),
        }
    }
    dataset = Dataset(
        name=identity.name,
        digest=identity.digest,
        source_type="code",
        source=source_text(identity),
        schema=json.dumps(schema),
        profile=json.dumps(identity.profile),
    )
    return DatasetInput(dataset, tags=[InputTag(DATASET_CONTEXT, CONTEXT_TRAIN)])


def _spec(shape: tuple[int, ...]) -> dict[str, Any]:
    return {"dtype": "float32", "shape": [-1, *shape]}


@dataclass
class ParentRun:
    """The parent run inside `StudyTracker.parent_run`: what the block sets is what the parent finishes with."""

    run_id: str
    new: bool = True  # False: a resumed study's parent, reopened
    status: str | None = None  # None: FINISHED on a normal exit
    metrics: dict[str, float] = field(default_factory=dict)
    tags: dict[str, Any] = field(default_factory=dict)
    trials: list[TrialTracker] = field(default_factory=list)  # their open child runs are closed at the end
    front: tuple[str, ...] = ()  # the trials on its Pareto front, their runs tagged as it closes

    def end_with(self, end: RunEnd) -> None:
        """How the block ends the parent (tracking/records.py's RunEnd): its status, metrics, tags and front."""
        self.status = end.status
        self.metrics.update(end.metrics)
        self.tags.update(end.tags)
        self.front = end.front
