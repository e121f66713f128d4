"""A Tune run, new or restored, for a study and an ablation alike: its RunConfig, its Tuner, Tune's console kept
quiet, and the one workaround for Ray's API a restore needs (`replace_restored_callbacks`)."""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path
from typing import Any

from ray import tune
from ray.tune.logger import CSVLoggerCallback, JsonLoggerCallback

from raytune_fl.config import TuneSettings, VariantTrials
from raytune_fl.runtime.storage import Storage, resolve_storage
from raytune_fl.tracking.system_metrics import system_metrics_on
from raytune_fl.tune.interrupt import tune_run
from raytune_fl.tune.refusal import StopOnRefusal
from raytune_fl.tune.resources import placement_group_factory
from raytune_fl.tune.search import Search
from raytune_fl.tune.trainable import federated_trial


def study_trainable(trials: VariantTrials, scheduled: bool = False) -> Any:
    """A variant's trials: the federated trial with the variant's experiment, on its placement group; `scheduled`
    (PBT): each trial keeps and reports its hyperparameter schedule."""
    # the driver's MLflow switch, handed to the trials: they sample their node and send it with each round
    trainable = tune.with_parameters(
        federated_trial, trials=trials, system_metrics=system_metrics_on(), scheduled=scheduled
    )
    return tune.with_resources(trainable, placement_group_factory(trials.experiment.resources))


def new_tuner(
    trainable: Any,
    settings: TuneSettings,
    search: Search,
    run: tune.RunConfig,
) -> tune.Tuner:
    return tune.Tuner(
        trainable,
        param_space=search.param_space,
        tune_config=tune.TuneConfig(
            # several objectives: the searcher holds them, and no scheduler ranks trials on one number
            metric=None if settings.multi_objective else settings.primary,
            mode=None if settings.multi_objective else settings.mode,
            search_alg=search.algorithm,
            scheduler=search.scheduler,
            num_samples=search.num_samples,
            # PBT: its generator draws the whole population (a limit would count paused trials as running)
            max_concurrent_trials=None if search.pbt else settings.max_concurrent,
            reuse_actors=True,  # the next trial runs in the finished trial's process, with its client actors
        ),
        run_config=run,
    )


def restorable(path: str | None, storage: Storage) -> bool:
    """Whether a Tune experiment can be restored from `path` (within the storage's filesystem)."""
    return path is not None and tune.Tuner.can_restore(path, storage_filesystem=storage.filesystem)


def restore_tuner(path: str, trainable: Any, storage: Storage, callbacks: list[tune.Callback]) -> tune.Tuner:
    """The experiment at `path` (a study a stopped or killed driver left), its unfinished and errored trials
    resumed from their last checkpoints, with this process's callbacks."""
    quiet_tune()  # as run_config does for a new Tuner
    tuner = tune.Tuner.restore(
        path, trainable, resume_unfinished=True, resume_errored=True, storage_filesystem=storage.filesystem
    )
    replace_restored_callbacks(tuner, callbacks)
    return tuner


def replace_restored_callbacks(tuner: tune.Tuner, callbacks: list[tune.Callback]) -> None:
    """Ray 2.50-2.60 (what pyproject.toml admits, checked with 2.60): Tuner.restore takes no RunConfig and brings back
    the callbacks pickled at the first start. Ours hold this process's MLflow bookkeeping and console, so they
    replace those through Tune's private state: the one place that reaches into it, to go once a Ray release's
    restore takes callbacks."""
    local = tuner._local_tuner
    if local is None:  # Tuner.restore in a driver process always makes a local tuner
        raise RuntimeError("a restored Tuner without a local tuner: its callbacks cannot be replaced")
    local.get_run_config().callbacks = with_result_files(callbacks)


def fit(tuner: tune.Tuner) -> tune.ResultGrid:
    """The trials run; a Ctrl-C or SIGTERM is Tune's graceful stop, raised as StudyInterrupted once fit() returned
    (tune/interrupt.py)."""
    with tune_run():
        return tuner.fit()


def run_config(
    name: str,
    storage: str | Path | Storage,
    callbacks: list[tune.Callback],
    trial_retries: int,
    checkpoints_kept: int = 2,
) -> tune.RunConfig:
    """Where a Tune run writes, who hears of its trials, how many checkpoints it keeps, how often a dead trial is
    restarted from its last checkpoint, and that a trial's configuration error ends it (tune and ablation alike)."""
    storage = resolve_storage(storage)
    quiet_tune()
    return tune.RunConfig(
        name=name,
        # the filesystem itself, not a URI: Ray pickles it to the trials with the endpoint it was made with
        storage_path=storage.path,
        storage_filesystem=storage.filesystem,
        callbacks=with_result_files(callbacks),
        failure_config=tune.FailureConfig(max_failures=trial_retries),
        stop=StopOnRefusal(),  # a trial's configuration error ends the run, unretried (tune/refusal.py)
        verbose=0,  # cli/progress.py shows a status line and a line per trial instead of Tune's tables
        # the latest checkpoint is what a resume needs; one more in case the newest was being written (PBT: more,
        # tune/search.py's Search.checkpoints_kept)
        checkpoint_config=tune.CheckpointConfig(num_to_keep=checkpoints_kept),
    )


def with_result_files(callbacks: list[tune.Callback]) -> list[tune.Callback]:
    """`callbacks` and Tune's own result files (result.json, progress.csv), which its result tables read."""
    return [*callbacks, CSVLoggerCallback(), JsonLoggerCallback()]


def quiet_tune() -> None:
    """Tune's console as our commands want it, for a new Tuner and a restored one alike (its settings are read when
    fit() runs, not pickled with the experiment)."""
    # Ray's newer console output prints its own boxes and hints even at verbose=0; the classic one at 0 prints
    # nothing, and our progress display (cli/progress.py) says what a user needs
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    # Tune's own result files (result.json, progress.csv: its result tables read them) but not its TensorBoard
    # logger, which warns on every list-valued or NaN metric (client_log; val_loss with no validation data)
    os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")
    trials_without_runtime_env()
    if _missing_checkpoint_deletion not in _TUNE_CONTROLLER_LOGGER.filters:
        _TUNE_CONTROLLER_LOGGER.addFilter(_missing_checkpoint_deletion)


# A resume after a kill: the experiment state may list a checkpoint the killed run had already deleted (keeping its
# newest two); when the resumed trial's next checkpoint makes Tune delete it again, the FileNotFoundError is logged as
# an ERROR with a traceback ("Error handling checkpoint"), though the new checkpoint is registered and nothing is
# lost. Only that case is left out.
_TUNE_CONTROLLER_LOGGER = logging.getLogger("ray.tune.execution.tune_controller")


def _missing_checkpoint_deletion(record: logging.LogRecord) -> bool:
    error = record.exc_info[1] if record.exc_info else None
    return not (str(record.msg).endswith("Error handling checkpoint %s") and isinstance(error, FileNotFoundError))


def trials_without_runtime_env() -> None:
    """Trials (and so their client actors, which inherit it) without the runtime_env Tune gives each: Ray starts a
    worker with a runtime_env as a new process, so they never took the idle workers Ray prestarts (one per CPU, with
    the cluster), and the first trial's process and actors each waited for a Python and Ray start-up (~0.5 s less
    to the first trial's first round without, measured). Tune's default is `PL_DISABLE_FORK` for PyTorch Lightning,
    which nothing here runs; the variables Tune passes on from this process (AWS credentials, ...) still go."""
    with contextlib.suppress(ImportError, AttributeError):  # another Ray: its trials start as they do
        from ray.tune.execution import class_cache

        class_cache.DEFAULT_ENV_VARS.pop("PL_DISABLE_FORK", None)
