"""Every read of the MLflow store: run searches, metric histories, artifact listings and downloads.

The writers (tracker.py, trials.py) find their own runs through here too; the report reads nothing else. Tag
names and values come from schema.py, param and tag values are decoded with its codec.
"""

from __future__ import annotations

import math
import os
import re
import urllib.parse
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pandas as pd
import yaml
from mlflow.entities import Metric, Run
from mlflow.tracking import MlflowClient

from raytune_fl.config import ParamSchedule
from raytune_fl.metrics import (
    BEST_PREFIX,
    CLIENT_ACC_BOTTOM10,
    CLIENT_ACC_P10,
    CLIENT_ACC_VAR,
    CLIENT_ACC_WORST,
    CLIENT_TEST_ACC,
    EPSILON,
    LAST_K,
    PERSONAL_TEST_ACC,
    PERSONAL_VAL_ACC,
    ROUND,
    TEST_ACC,
    TEST_ACC_LAST_K,
    TEST_LOSS,
    VAL_ACC,
    VAL_LOSS,
)
from raytune_fl.tracking.schema import (
    RAN_EVERY_ROUND,
    ROLE_PARENT,
    RUN_FINISHED,
    RUN_KILLED,
    RUN_RUNNING,
    STAGE_ABLATION,
    STAGE_TUNE,
    TAG_BEST_BASIS,
    TAG_BEST_PREFIX,
    TAG_BEST_SCHEDULE,
    TAG_CELL,
    TAG_DATASET,
    TAG_INTERRUPTED,
    TAG_METHOD,
    TAG_PARENT_RUN,
    TAG_PLAN,
    TAG_RESUME_COMMAND,
    TAG_ROLE,
    TAG_ROUNDS_COMPLETED,
    TAG_SEED,
    TAG_SETTING,
    TAG_STAGE,
    TAG_SUPERSEDED_BY,
    TAG_TRIAL_ID,
    TAG_TRIAL_STATUS,
    TAG_TUNING_SEEDS,
    TAG_VARIANT,
    TRIAL_UNKNOWN,
    decode_value,
    same_setting,
)

__all__ = [
    "RESULT_METRICS",
    "Artifacts",
    "MlflowClient",
    "Run",
    "StudyRecord",
    "ablation_results",
    "child_runs",
    "existing_experiment",
    "experiment_id",
    "find_ablation_parent",
    "is_child",
    "latest_study",
    "logged_rounds",
    "metric_history",
    "one_run_per_cell",
    "open_client",
    "search_all",
    "stage_runs",
    "trial_run",
]

# the final-round metrics an ablation table row keeps
# an ablation run's final values; the client spread is NaN where diagnostics.client_accuracy was off (and p10 in
# runs logged before bottom10 replaced it)
RESULT_METRICS = (
    TEST_ACC,
    VAL_ACC,
    TEST_LOSS,
    VAL_LOSS,
    CLIENT_ACC_WORST,
    CLIENT_ACC_BOTTOM10,
    CLIENT_ACC_P10,
    CLIENT_ACC_VAR,
    EPSILON,  # base.privacy: the budget a run spent (NaN without privacy)
    # partition.test_fraction: on each client's own test part (NaN without one); personal_val_acc: methods that
    # personalise (NaN for the rest)
    PERSONAL_TEST_ACC,
    CLIENT_TEST_ACC,
    PERSONAL_VAL_ACC,
)
_PROGRESS_BAR = "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"
T = TypeVar("T")


def open_client(tracking_uri: str) -> MlflowClient:
    return MlflowClient(tracking_uri)


def existing_experiment(tracking_uri: str, name: str) -> tuple[MlflowClient, str] | None:
    """A client of the store and the id of its experiment `name`, or None where the store or the experiment does not
    exist yet; nothing is made (a client would make a SQLite file, or a directory store, that is not there)."""
    local = _local_store(tracking_uri)
    if local is not None and not local.exists():
        return None
    client = open_client(tracking_uri)
    found = experiment_id(client, name)
    return None if found is None else (client, found)


def store_exists(tracking_uri: str) -> bool:
    """Whether a store is there to read (a server or a database: assumed); nothing is made."""
    local = _local_store(tracking_uri)
    return local is None or local.exists()


def _local_store(uri: str) -> Path | None:
    """The file (SQLite) or folder (a directory store) a local store keeps; None for a server or a database."""
    if uri.startswith("sqlite:///"):
        return Path(uri.removeprefix("sqlite:///").split("?", 1)[0])
    if uri.startswith("file:"):
        return Path(urllib.parse.unquote(urllib.parse.urlparse(uri).path))
    if "://" in uri or uri in ("databricks", "databricks-uc", "uc"):
        return None
    return Path(uri)


def _tag(name: str, value: str) -> str:
    """A filter-string clause on a tag."""
    return f"tags.{name} = '{value}'"


def _and(*clauses: str) -> str:
    return " and ".join(clauses)


def is_child(run: Run) -> bool:
    return TAG_PARENT_RUN in run.data.tags


# ---------------------------------------------------------------- searches


@dataclass(frozen=True)
class StudyRecord:
    """A tune-stage parent run: what the variant's study selected, or (`stopped`) that it was cut before it did."""

    run_id: str
    method: str
    params: dict[str, Any]  # the selected trial's hyperparameters (searched + fixed), typed again
    metrics: dict[str, float]  # best_val_acc, best_test_acc, ...
    start_time_ms: int
    dataset: str = ""  # what it was tuned on: an ablation on other data should say so
    # "" for a finished study; else how the newest study ended without selecting: "interrupted" (Ctrl-C, SIGTERM)
    # or "running" (still running, or its driver killed), and the command that finishes it where it was recorded
    stopped: str = ""
    resume_command: str = ""
    tuning_seeds: tuple[int, ...] = ()  # the training seeds its trials used; () for a study that did not record them
    schedule: ParamSchedule | None = None  # a PBT study: the selected trial's schedule (what `ablate` replays)


def recorded_tuning_seeds(tags: dict[str, str]) -> tuple[int, ...]:
    """A tune parent's tuning seeds: its tuning_seeds tag, else the seed its best_basis names ("single trial, seed
    0", what older studies recorded), else ()."""
    text = tags.get(TAG_TUNING_SEEDS)
    if text is None:
        found = re.search(r"seed (-?\d+)", tags.get(TAG_BEST_BASIS, ""))
        return (int(found.group(1)),) if found else ()
    return tuple(int(s) for s in text.split(",") if s.strip())


def experiment_id(client: MlflowClient, name: str) -> str | None:
    found = client.get_experiment_by_name(name)
    return None if found is None else found.experiment_id


def search_all(client: MlflowClient, experiment: str, filter_string: str) -> list[Run]:
    """Every matching run, newest first (search_runs pages at 1,000)."""
    runs: list[Run] = []
    token = None
    while True:
        page = client.search_runs(
            [experiment], filter_string=filter_string, order_by=["attributes.start_time DESC"], page_token=token
        )
        runs.extend(page)
        token = page.token
        if not token:
            return runs


def stage_runs(client: MlflowClient, experiment: str, stage: str) -> list[Run]:
    """Every run (parents and children) of a stage (schema.STAGE_TUNE / STAGE_ABLATION), newest first."""
    return search_all(client, experiment, _tag(TAG_STAGE, stage))


def latest_study(client: MlflowClient, experiment: str, variant: str, setting: str | None = None) -> StudyRecord | None:
    """The newest FINISHED tune parent of `variant` that selected a configuration, or None; but when a newer study
    of it was interrupted or is still RUNNING, that one (`stopped` says which): an older selection is not what the
    user last asked for. `setting` (as fields: partition.alpha=0.1): its study tuned at that grid setting (tune
    --per-setting); None: its study over the file's base, never one tuned per setting."""
    runs = client.search_runs(
        [experiment],
        filter_string=_and(_tag(TAG_STAGE, STAGE_TUNE), _tag(TAG_VARIANT, variant)),
        order_by=["attributes.start_time DESC"],
    )
    for run in runs:
        tags = run.data.tags
        if TAG_PARENT_RUN in tags or not same_setting(tags.get(TAG_SETTING), setting):
            continue
        if run.info.status == RUN_RUNNING or (run.info.status == RUN_KILLED and TAG_INTERRUPTED in tags):
            stopped = "running" if run.info.status == RUN_RUNNING else "interrupted"
            return StudyRecord(
                run.info.run_id,
                tags.get(TAG_METHOD, ""),
                {},
                {},
                run.info.start_time,
                tags.get(TAG_DATASET, ""),
                stopped=stopped,
                resume_command=tags.get(TAG_RESUME_COMMAND, ""),
            )
        if run.info.status != RUN_FINISHED or not any(key.startswith(BEST_PREFIX) for key in run.data.metrics):
            continue  # a failed study, or one that selected nothing
        params = {
            key.removeprefix(TAG_BEST_PREFIX): decode_value(v)
            for key, v in tags.items()
            if key.startswith(TAG_BEST_PREFIX)
        }
        return StudyRecord(
            run.info.run_id,
            tags.get(TAG_METHOD, ""),
            params,
            dict(run.data.metrics),
            run.info.start_time,
            tags.get(TAG_DATASET, ""),
            tuning_seeds=recorded_tuning_seeds(tags),
            schedule=ParamSchedule.from_json(tags[TAG_BEST_SCHEDULE]) if TAG_BEST_SCHEDULE in tags else None,
        )
    return None


def ablation_results(client: MlflowClient, experiment: str, parent_run_id: str) -> pd.DataFrame:
    """One row per child run of an ablation parent, with its final-round metrics (MLflow's latest = highest step)."""
    rows = []
    for run in search_all(client, experiment, _tag(TAG_PARENT_RUN, parent_run_id)):
        tags, metrics = run.data.tags, run.data.metrics
        if TAG_SUPERSEDED_BY in tags:  # a cut cell's run that --resume ran again: the new run is the cell's
            continue
        rows.append(
            {
                "run_id": run.info.run_id,
                "run_name": run.info.run_name,
                "variant": tags.get(TAG_VARIANT, ""),
                "method": tags.get(TAG_METHOD, ""),
                "seed": int(tags.get(TAG_SEED, -1)),
                "setting": tags.get(TAG_SETTING, ""),
                "cell": tags.get(TAG_CELL, ""),
                "status": tags.get(TAG_TRIAL_STATUS, TRIAL_UNKNOWN),
                "rounds_completed": int(tags.get(TAG_ROUNDS_COMPLETED, 0)),
                **{name: float(metrics.get(name, math.nan)) for name in RESULT_METRICS},
                TEST_ACC_LAST_K: last_k_mean(client, run.info.run_id, TEST_ACC),
            }
        )
    columns = ["run_id", "run_name", "variant", "method", "seed", "setting", "cell", "status", "rounds_completed"]
    return pd.DataFrame(rows, columns=[*columns, *RESULT_METRICS, TEST_ACC_LAST_K])


def last_k_mean(client: MlflowClient, run_id: str, key: str, k: int = LAST_K) -> float:
    """The mean of the run's last `k` logged values of `key` (by round); NaN when it logged none."""
    points = sorted(client.get_metric_history(run_id, key), key=lambda point: point.step)[-k:]
    return sum(point.value for point in points) / len(points) if points else math.nan


def one_run_per_cell(runs: Sequence[T], cell: Callable[[T], str], status: Callable[[T], str]) -> list[T]:
    """A cell re-run by `ablate.py --resume` has several runs: keep its newest run that ran every round (finished,
    or collapsed at chance), else its newest.

    `runs` newest first (as the searches list them), any type (Run, a table's row positions); the kept ones come
    back in that order. The ablation table and the dashboard both keep the runs this chooses.
    """
    kept: dict[str, int] = {}
    for index, run in enumerate(runs):
        key = cell(run)
        if key not in kept or (status(runs[kept[key]]) not in RAN_EVERY_ROUND and status(run) in RAN_EVERY_ROUND):
            kept[key] = index
    chosen = set(kept.values())
    return [run for index, run in enumerate(runs) if index in chosen]


def find_ablation_parent(client: MlflowClient, experiment: str, fingerprint: str) -> tuple[str | None, set[str]]:
    """The newest ablation parent with this plan and the cells it already finished (for --resume)."""
    parents = client.search_runs(
        [experiment],
        filter_string=_and(_tag(TAG_STAGE, STAGE_ABLATION), _tag(TAG_ROLE, ROLE_PARENT), _tag(TAG_PLAN, fingerprint)),
        order_by=["attributes.start_time DESC"],
    )
    if not parents:
        return None, set()
    run_id = parents[0].info.run_id
    children = search_all(client, experiment, _tag(TAG_PARENT_RUN, run_id))
    # a collapsed cell ran every round: it is a result (at chance), not a cell to run again
    return run_id, {
        run.data.tags.get(TAG_CELL, "") for run in children if run.data.tags.get(TAG_TRIAL_STATUS) in RAN_EVERY_ROUND
    }


def has_ablation(tracking_uri: str, experiment_name: str) -> bool:
    """Whether the store holds an ablation parent in that experiment (reproduce --resume: its ablation began)."""
    found = existing_experiment(tracking_uri, experiment_name)
    if found is None:
        return False
    client, experiment = found
    runs = client.search_runs(
        [experiment], filter_string=_and(_tag(TAG_STAGE, STAGE_ABLATION), _tag(TAG_ROLE, ROLE_PARENT)), max_results=1
    )
    return bool(runs)


def child_runs(client: MlflowClient, experiment: str, parent_run_id: str, *, running: bool = False) -> list[Run]:
    """A parent's child runs (the first page of MLflow's search: up to 1,000), only those RUNNING if `running`."""
    clauses = [_tag(TAG_PARENT_RUN, parent_run_id)]
    if running:
        clauses.append(f"attributes.status = '{RUN_RUNNING}'")
    return client.search_runs([experiment], filter_string=_and(*clauses))


def study_with_trials(tracking_uri: str, parent_run_id: str) -> tuple[Run, list[Run]]:
    """A study's parent run and its trial runs, oldest first (a warm start reads another study's best); LookupError
    where the store has no such run."""
    client = open_client(tracking_uri)
    try:
        parent = client.get_run(parent_run_id)
    except Exception as error:  # each tracking backend says "no such run" with its own exception type
        raise LookupError(f"no MLflow run {parent_run_id} at {tracking_uri} ({type(error).__name__})") from None
    trials = child_runs(client, parent.info.experiment_id, parent_run_id)
    return parent, sorted(trials, key=lambda run: run.info.start_time)


def cut_cell_runs(client: MlflowClient, experiment: str, parent_run_id: str, cell: str) -> list[Run]:
    """The runs of ablation `cell` under the parent that did not run every round and are not superseded yet: what
    a new run of the cell (ablate --resume) replaces."""
    runs = search_all(client, experiment, _and(_tag(TAG_PARENT_RUN, parent_run_id), _tag(TAG_CELL, cell)))
    return [
        run
        for run in runs
        if run.data.tags.get(TAG_TRIAL_STATUS) not in RAN_EVERY_ROUND and TAG_SUPERSEDED_BY not in run.data.tags
    ]


def trial_run(client: MlflowClient, experiment: str, parent_run_id: str, trial_id: str) -> Run | None:
    """The child run a trial logged to, found by its trial_id tag (a resumed trial continues in it)."""
    runs = client.search_runs(
        [experiment], filter_string=_and(_tag(TAG_PARENT_RUN, parent_run_id), _tag(TAG_TRIAL_ID, trial_id))
    )
    return runs[0] if runs else None


# ---------------------------------------------------------------- metric histories


def metric_history(client: MlflowClient, run_id: str, key: str) -> list[Metric]:
    return client.get_metric_history(run_id, key)


def logged_rounds(client: MlflowClient, run_id: str, keys: Iterable[str]) -> list[dict[str, Any]]:
    """The rounds a run logged, as rows {round, metric: value, ...} in round order (step = round)."""
    by_round: dict[int, dict[str, Any]] = {}
    for key in keys:
        for point in client.get_metric_history(run_id, key):
            by_round.setdefault(point.step, {ROUND: point.step})[key] = point.value
    return [by_round[step] for step in sorted(by_round)]


def prefixed_rounds(client: MlflowClient, run_id: str, prefixes: tuple[str, ...]) -> list[dict[str, Any]]:
    """logged_rounds of every metric of the run whose name starts with one of `prefixes` (e.g. grad_norm_)."""
    keys = [key for key in client.get_run(run_id).data.metrics if key.startswith(prefixes)]
    return logged_rounds(client, run_id, keys)


# ---------------------------------------------------------------- artifacts


@contextmanager
def _no_progress_bar() -> Iterator[None]:
    """MLflow draws a progress bar per download; dozens of them would bury the progress lines."""
    before = os.environ.get(_PROGRESS_BAR)
    os.environ[_PROGRESS_BAR] = "false"
    try:
        yield
    finally:
        if before is None:
            del os.environ[_PROGRESS_BAR]
        else:
            os.environ[_PROGRESS_BAR] = before


class Artifacts:
    """Downloads each artifact once into a temporary folder; a missing artifact is None, not an exception."""

    def __init__(self, client: MlflowClient, root: Path) -> None:
        self.client, self.root = client, root
        self._listings: dict[tuple[str, str], list[Any]] = {}
        self._local: dict[tuple[str, str], Path] = {}

    def listing(self, run_id: str, folder: str = "") -> list[Any]:
        key = (run_id, folder)
        if key not in self._listings:
            self._listings[key] = list(self.client.list_artifacts(run_id, folder or None))
        return self._listings[key]

    def files(self, run_id: str, folder: str) -> list[str]:
        """Every file path under `folder`, recursively."""
        found: list[str] = []
        for info in self.listing(run_id, folder):
            found.extend(self.files(run_id, info.path) if info.is_dir else [info.path])
        return found

    def local(self, run_id: str, path: str) -> Path | None:
        folder = path.rpartition("/")[0]
        if not any(info.path == path and not info.is_dir for info in self.listing(run_id, folder)):
            return None
        if (run_id, path) not in self._local:
            (self.root / run_id).mkdir(parents=True, exist_ok=True)
            with _no_progress_bar():
                local = self.client.download_artifacts(run_id, path, str(self.root / run_id))
            self._local[run_id, path] = Path(local)
        return self._local[run_id, path]

    def parquet(self, run_id: str, path: str) -> pd.DataFrame | None:
        local = self.local(run_id, path)
        return None if local is None else pd.read_parquet(local)

    def yaml(self, run_id: str, path: str) -> dict[str, Any] | None:
        local = self.local(run_id, path)
        return None if local is None else yaml.safe_load(local.read_text())
