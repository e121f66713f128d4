"""One variant study: OptunaSearch (TPE, seeded) + ASHA on rounds, logged to MLflow."""

from __future__ import annotations

import contextlib
import logging
import os
import time
import zlib
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import optuna
from ray import tune
from ray.tune.logger import CSVLoggerCallback, JsonLoggerCallback
from ray.tune.schedulers import ASHAScheduler, FIFOScheduler
from ray.tune.search.optuna import OptunaSearch

from raytune_fl.config import ExperimentConfig, SearchSpace, TrialSpec, TuneSettings, flatten
from raytune_fl.engine.data import FederatedData, data_identity_of, prepare_data
from raytune_fl.export.model_helper import ModelExporter
from raytune_fl.export.trial_model import log_trial_model
from raytune_fl.methods import METHODS
from raytune_fl.runtime import optuna_storage as optuna_db
from raytune_fl.runtime.storage import Storage, resolve_storage
from raytune_fl.tracking import ParentRun, StudyTracker
from raytune_fl.tracking.describe import trial_description, variant_description
from raytune_fl.tracking.schema import (
    METRIC_VAL_SAMPLES,
    RUN_FAILED,
    RUN_FINISHED,
    TAG_BEST_BASIS,
    TAG_BEST_PREFIX,
    TAG_DATASET,
    TAG_METHOD,
    TAG_MODEL_RUN_ID,
    TAG_OPTUNA_STORAGE,
    TAG_OPTUNA_STUDY,
    TAG_PARTITION,
    TAG_RESUME_COMMAND,
    TAG_SEARCHED,
    TRIAL_DIVERGED,
    TRIAL_ERROR,
    TRIAL_FINISHED,
    TRIAL_STOPPED_EARLY,
)
from raytune_fl.tune.callbacks import (
    BestSoFar,
    ForwardInterrupt,
    MlflowTrialLogger,
    TrialEventsCallback,
    print_line,
)
from raytune_fl.tune.events import Watch, Watcher
from raytune_fl.tune.interrupt import StudyInterrupted, resume_command, tune_run
from raytune_fl.tune.resources import placement_group_factory
from raytune_fl.tune.selection import best_of, candidacy
from raytune_fl.tune.space import optuna_space
from raytune_fl.tune.trainable import federated_trial
from raytune_fl.tune.uncertainty import accuracy_se


@dataclass
class VariantOutcome:
    variant: str
    method: str
    best_params: dict[str, Any]  # searched + fixed hyperparameters of the selected trial
    best_metrics: dict[str, float]  # its last reported round: val_acc (selection), test_acc (reported beside)
    trials: dict[str, int]  # finished / stopped_early / error counts
    parent_run_id: str | None
    storage: str
    wall_time_s: float
    errors: list[str] = field(default_factory=list)
    optuna_study: str | None = None  # its Optuna study (searched variants with an Optuna storage)
    optuna_storage: str | None = None  # that study's storage URL, password masked
    model_id: str | None = None  # the selected trial's global model in MLflow (models:/<model_id>)
    val_samples: int | None = None  # the validation images every score is on (all clients' held-out parts)


def sampler_seed(seed: int, variant: str) -> int:
    """Each variant's own sampler seed from (tune.seed, variant name): variants searching the same ranges would
    otherwise propose the same first configurations, and their comparison would not be independent."""
    return int(np.random.SeedSequence([seed, zlib.crc32(variant.encode())]).generate_state(1)[0])


def make_sampler(settings: TuneSettings, variant: str, num_samples: int) -> optuna.samplers.BaseSampler:
    seed = sampler_seed(settings.seed, variant)
    if settings.sampler == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    return optuna.samplers.TPESampler(seed=seed, n_startup_trials=tpe_startup_trials(num_samples))


def tpe_startup_trials(num_samples: int) -> int:
    # Optuna's default of 10 random start-up trials would make a small study pure random search.
    return max(2, min(10, num_samples // 3))


@dataclass
class VariantRun:
    """Where a variant study lives, recorded before it starts so that `--resume` can find it."""

    experiment_path: str  # the Tune experiment directory
    parent_run_id: str | None  # the MLflow parent run
    optuna_study: str | None = None  # the Optuna study's name (None: nothing searched, or no Optuna storage)
    optuna_storage: str | None = None  # its storage URL, password masked (runtime/optuna_storage.py)


def trial_params(base: ExperimentConfig, method: str, fixed: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
    """A tune trial's MLflow params: what its Federation runs with, resolved as an ablation cell's are
    (config.TrialSpec), so both stages log the same params for the same configuration."""
    return TrialSpec.resolve(base, method, fixed, config).mlflow_params()


def partition_title(base: ExperimentConfig) -> str:
    """The title of the partition heat map a variant's parent run logs."""
    return f"{base.dataset}: {base.partition.kind}, {base.partition.clients} clients"


def run_variant(
    space: SearchSpace,
    variant_name: str,
    *,
    storage: str | Path | Storage,
    tracker: StudyTracker | None,
    out: Callable[[str], None] = print_line,
    watch: Watcher | None = None,
    data: FederatedData | None = None,
    resume: VariantRun | None = None,
    on_start: Callable[[VariantRun], None] | None = None,
    log_model: bool = True,
    optuna_storage: str | None = None,
    exporter: ModelExporter | None = None,
) -> VariantOutcome:
    """One variant's study. With `resume` (a study a killed driver left behind), Tune restores its trials
    from their last checkpoints and the searcher from its saved state, and MLflow continues in the same runs.

    With `optuna_storage` (a SQLAlchemy URL, runtime/optuna_storage.py) a searched variant's Optuna study persists
    there as `<space name>-<variant>` (`-<start time>` appended when a fresh run finds that name taken); a resume
    reopens the study its manifest entry names (the restored searcher's pickled storage points at it).

    `watch`: how the caller follows the trials (the CLI: cli/progress.py's console; None: silently).

    With `log_model` the selected trial's model is logged to MLflow, by `exporter`'s helper process if given."""
    started = time.time()
    stamp = time.strftime("%Y%m%d-%H%M%S")  # the Tune experiment's name, and an Optuna study name's suffix
    variant = space.variants[variant_name]
    settings, base = space.tune, space.experiment_for(variant_name)  # a variant may train with its own optimiser
    searched = bool(variant.search)
    # a variant with nothing to search is deterministic: repeating it would only repeat the same run
    num_samples = settings.num_samples if searched else 1
    search_alg = optuna_study = None
    if searched:
        sampler = make_sampler(settings, variant_name, num_samples)
        rdb = optuna_db.open_storage(optuna_storage) if optuna_storage else None
        if rdb is not None and resume is None:  # a fresh run never joins an earlier run's study
            optuna_study = optuna_db.unused_study_name(rdb, f"{space.name}-{variant_name}", stamp)
        elif rdb is not None:  # the study the interrupted run wrote to (none if it started in memory)
            optuna_study = resume.optuna_study
        search_alg = OptunaSearch(
            space=optuna_space(variant.search),
            metric=settings.metric,
            mode=settings.mode,
            sampler=sampler,
            study_name=optuna_study,
            storage=rdb if optuna_study else None,
        )
    shown_storage = optuna_db.masked(optuna_storage) if optuna_study else None
    optuna_tags = {TAG_OPTUNA_STUDY: optuna_study, TAG_OPTUNA_STORAGE: shown_storage} if optuna_study else {}
    asha = settings.scheduler.asha
    scheduler = (
        ASHAScheduler(
            time_attr="round",
            max_t=base.rounds,
            grace_period=asha.grace(base.rounds),
            reduction_factor=asha.reduction_factor,
        )
        if asha is not None and searched
        else FIFOScheduler()
    )
    base_params = {
        **{k: v for k, v in flatten(base.model_dump(mode="json")).items()},
        "method": variant.method,
        **variant.fixed,
    }
    run = Watch(
        variant_name,
        num_samples,
        base.rounds,
        settings.metric,
        settings.mode,
        may_stop_early=isinstance(scheduler, ASHAScheduler),
    )
    callbacks: list[tune.Callback] = [TrialEventsCallback(watch(run))] if watch is not None else []
    callbacks.append(ForwardInterrupt())  # a Ctrl-C that came before Tune listened reaches it on its next step
    storage = resolve_storage(storage)
    fs = storage.filesystem
    restorable = resume is not None and tune.Tuner.can_restore(resume.experiment_path, storage_filesystem=fs)
    if resume is not None and not restorable:
        where = storage.show(resume.experiment_path)
        out(f"[{variant_name}] nothing to restore at {where}: starting the variant afresh")

    partitioned = data or (prepare_data(base) if tracker is not None else None)  # what every trial builds, seeded
    identity = data_identity_of(base, partitioned) if partitioned is not None else None
    # what val_acc is a proportion of: its standard error's n (tune/uncertainty.py)
    val_samples = identity.sizes["val_samples"] if identity is not None else None

    def start_parent() -> str:
        run_id = tracker.start_parent(
            variant_name,
            tags={
                TAG_METHOD: variant.method,
                TAG_DATASET: base.dataset,
                TAG_PARTITION: f"{base.partition.kind}(alpha={base.partition.alpha})"
                if base.partition.kind == "dirichlet"
                else base.partition.kind,
                TAG_SEARCHED: ",".join(variant.search) or "(none)",
                **optuna_tags,
            },
            params={
                **base_params,
                **{f"search.{k}": v.model_dump(exclude_none=True) for k, v in variant.search.items()},
            },
            config={
                "name": space.name,
                "base": base.model_dump(mode="json"),
                "variant": variant.model_dump(mode="json"),
                "tune": settings.model_dump(mode="json"),
            },
        )
        tracker.log_partition_when_drawn(run_id, partitioned, partition_title(base))
        tracker.log_datasets(run_id, [identity])
        tracker.describe(run_id, variant_description(space, variant_name, num_samples))
        return run_id

    def close_parent(parent: ParentRun) -> None:
        parent.metrics["wall_time_s"] = time.time() - started
        if val_samples is not None:  # beside best_val_acc in the runs table: what its standard error is over
            parent.metrics[METRIC_VAL_SAMPLES] = val_samples

    parent_run_id = resume.parent_run_id if resume else None
    with tracker.parent_run(start_parent, parent_run_id) if tracker is not None else nullcontext() as parent:
        if parent is not None:
            parent_run_id, parent.on_close = parent.run_id, close_parent
            if resume_command():  # what `ablate` names when it refuses this study's variant, if it is stopped
                parent.interrupt_tags[TAG_RESUME_COMMAND] = resume_command()
            trials = tracker.trial_tracker(
                parent_run_id,
                variant_name,
                variant.method,
                partial(trial_params, base, variant.method, variant.fixed),
                base.rounds,
                resuming=resume is not None,
                datasets=(identity,),
                describe_trial=partial(trial_description, variant_name, variant.method),
            )
            parent.trials.append(trials)
            callbacks.append(MlflowTrialLogger(trials))
        if exporter is not None and log_model and parent_run_id is not None:

            def log_ahead(trial_id: str, checkpoint: tune.Checkpoint, config: dict[str, Any]) -> None:
                trial = TrialSpec.resolve(base, variant.method, variant.fixed, config)
                exporter.log_ahead(parent_run_id, trial_id, checkpoint, trial, partitioned)

            callbacks.append(BestSoFar(log_ahead, settings.metric, settings.mode, base.rounds))
        trainable = tune.with_resources(
            tune.with_parameters(federated_trial, experiment=base, method=variant.method, fixed=dict(variant.fixed)),
            placement_group_factory(base.resources),
        )
        name = f"{space.name}-{variant_name}-{stamp}"
        # within the storage's filesystem, as Tune's restore takes it
        experiment_path = resume.experiment_path if restorable else storage.join(name)
        if on_start is not None:  # recorded once the parent run exists: a stop from here on resumes in it
            on_start(VariantRun(experiment_path, parent_run_id, optuna_study, shown_storage))
        if restorable:
            quiet_tune()  # as run_config does for a new Tuner
            tuner = tune.Tuner.restore(
                resume.experiment_path, trainable, resume_unfinished=True, resume_errored=True, storage_filesystem=fs
            )
            # Ray restores the callbacks pickled at the first start; ours hold this process's MLflow bookkeeping
            tuner._local_tuner.get_run_config().callbacks = with_result_files(callbacks)
        else:
            tuner = _new_tuner(trainable, space, search_alg, scheduler, num_samples, name, storage, callbacks)
        try:
            with tune_run():  # a stop during fit() is Tune's graceful one, raised here once fit() returned
                results = tuner.fit()
        except StudyInterrupted:  # nothing below runs: no selection, summary or model of a cut study
            # the cut trials stay RUNNING in Optuna: the restored searcher tells them their values on --resume
            raise
        if optuna_study is not None:
            _close_optuna_trials(optuna_storage, optuna_study, variant_name, out)
        outcome, best = summarise(
            results,
            variant_name,
            variant.method,
            dict(variant.fixed),
            settings.metric,
            settings.mode,
            base.rounds,
            val_samples,
        )
        outcome.parent_run_id, outcome.storage = parent_run_id, storage.uri
        outcome.optuna_study, outcome.optuna_storage = optuna_study, shown_storage
        outcome.wall_time_s, outcome.val_samples = time.time() - started, val_samples
        if parent is not None:
            parent.status = RUN_FINISHED if outcome.best_metrics else RUN_FAILED
            if outcome.best_metrics:
                parent.metrics.update({f"best_{k}": v for k, v in outcome.best_metrics.items()})
                parent.metrics.update({f"trials_{k}": v for k, v in outcome.trials.items()})
                parent.tags = {f"{TAG_BEST_PREFIX}{k}": v for k, v in outcome.best_params.items()}
                # the best is one trial's score at one seed: a ranking of variants needs the ablation's seeds
                parent.tags[TAG_BEST_BASIS] = f"single trial, seed {base.seed}"
            if best is not None and log_model:
                outcome.model_id = _log_best_model(
                    tracker, parent, best, base, variant.method, variant.fixed, partitioned, out, exporter
                )
        return outcome


def _log_best_model(
    tracker: StudyTracker,
    parent: ParentRun,
    best: tune.Result,
    base: ExperimentConfig,
    method: str,
    fixed: dict[str, Any],
    data: FederatedData,
    out: Callable[[str], None],
    exporter: ModelExporter | None = None,
) -> str | None:
    """The selected trial's global model on its run, and listed on the variant's parent run."""
    trial = TrialSpec.resolve(base, method, fixed, best.config)
    if exporter is not None:
        logged = exporter.log(parent.run_id, best, trial, data, link_parent=True)
    else:
        logged = log_trial_model(tracker, parent.run_id, best, trial, data, link_parent=True)
    if logged is None:
        out(f"  no model logged for {parent.run_id}: the selected trial left no checkpoint (checkpoint_every: 0?)")
        return None
    model_id, run_id = logged[:2]
    parent.tags[TAG_MODEL_RUN_ID] = run_id
    return model_id


def _close_optuna_trials(url: str, study_name: str, variant: str, out: Callable[[str], None]) -> None:
    """Optuna trials a killed driver left RUNNING (Tune never recorded them) are marked FAIL once the study ends."""
    try:
        closed = optuna_db.fail_running_trials(url, study_name)
    except Exception as error:  # the results are in MLflow and Tune already; say so rather than fail the study
        out(f"[{variant}] could not close the Optuna study's running trials: {type(error).__name__}: {error}")
        return
    if closed:
        out(f"[{variant}] {closed} Optuna trial(s) left RUNNING by the interrupted run marked FAIL")


def _new_tuner(trainable, space, search_alg, scheduler, num_samples, name, storage, callbacks) -> tune.Tuner:
    settings = space.tune
    return tune.Tuner(
        trainable,
        tune_config=tune.TuneConfig(
            metric=settings.metric,
            mode=settings.mode,
            search_alg=search_alg,
            scheduler=scheduler,
            num_samples=num_samples,
            max_concurrent_trials=settings.max_concurrent,
            reuse_actors=True,  # the next trial runs in the finished trial's process, with its client actors
        ),
        run_config=run_config(name, storage, callbacks, space.base.faults.trial_retries),
    )


def run_config(
    name: str, storage: str | Path | Storage, callbacks: list[tune.Callback], trial_retries: int
) -> tune.RunConfig:
    """Where a Tune run writes, who hears of its trials, how many checkpoints it keeps, how often a dead trial is
    restarted from its last checkpoint (tune and ablation alike)."""
    storage = resolve_storage(storage)
    quiet_tune()
    return tune.RunConfig(
        name=name,
        # the filesystem itself, not a URI: Ray pickles it to the trials with the endpoint it was made with
        storage_path=storage.path,
        storage_filesystem=storage.filesystem,
        callbacks=with_result_files(callbacks),
        failure_config=tune.FailureConfig(max_failures=trial_retries),
        verbose=0,  # cli/progress.py shows a status line and a line per trial instead of Tune's tables
        # the latest checkpoint is what a resume needs; one more in case the newest was being written
        checkpoint_config=tune.CheckpointConfig(num_to_keep=2),
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


def summarise(
    results: tune.ResultGrid,
    variant: str,
    method: str,
    fixed: dict[str, Any],
    metric: str,
    mode: str,
    rounds: int,
    val_samples: int | None = None,
) -> tuple[VariantOutcome, tune.Result | None]:
    """The variant's outcome, and the selected trial's result (None when no trial succeeded).

    With `val_samples` (the validation set's size) the best metrics gain `val_acc_se`, the binomial standard error
    of the selected trial's val_acc (its parent run logs it as best_val_acc_se)."""
    counts = {TRIAL_FINISHED: 0, TRIAL_STOPPED_EARLY: 0, TRIAL_DIVERGED: 0, TRIAL_ERROR: 0}
    candidates, errors = [], []
    for result in results:
        if result.error is not None:
            counts[TRIAL_ERROR] += 1
            errors.append(str(result.error).splitlines()[0][:300])
            continue
        metrics = result.metrics or {}
        if metrics.get("diverged"):
            counts[TRIAL_DIVERGED] += 1  # never a candidate: its score is the worst by construction
            continue
        counts[TRIAL_FINISHED if int(metrics.get("round", 0)) >= rounds else TRIAL_STOPPED_EARLY] += 1
        chosen = candidacy(metrics, metric, rounds)
        if chosen is not None:
            candidates.append((*chosen, result))
    if not candidates:
        return VariantOutcome(variant, method, {}, {}, counts, None, "", 0.0, errors), None
    best = best_of(candidates, maximize=mode == "max")  # trials that ran every round first (tune/selection.py)
    keep = (
        "val_acc",
        "val_loss",
        "test_acc",
        "test_loss",
        "round",
        "client_acc_mean",
        "client_acc_worst",
        "sv_effective_rank",
        "personal_val_acc",
    )
    best_metrics = {k: float(best.metrics[k]) for k in keep if k in best.metrics}
    se = accuracy_se(best_metrics["val_acc"], val_samples) if "val_acc" in best_metrics else None
    if se is not None:
        best_metrics["val_acc_se"] = se
    params = METHODS.get(method).describe({**fixed, **best.config})  # the outcome: no experiment needed
    return VariantOutcome(variant, method, params, best_metrics, counts, None, "", 0.0, errors), best
