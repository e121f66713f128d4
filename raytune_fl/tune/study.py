"""One variant study: its search (search.py), its Tune run (tuner.py), its MLflow records (tracking/records.py) and
its outcome (outcome.py), composed."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ray import tune

from raytune_fl.config import ExperimentConfig, SearchSpace, TuneSettings, VariantTrials
from raytune_fl.data.identity import DataIdentity
from raytune_fl.engine.data import FederatedData, data_identity_of, prepare_data
from raytune_fl.export.model_helper import ModelExporter
from raytune_fl.export.trial_model import log_trial_model
from raytune_fl.runtime.storage import Storage, resolve_storage
from raytune_fl.tracking import ParentRun, StudyTracker, TrialTracker
from raytune_fl.tracking.records import (
    OptunaStudy,
    ParetoFront,
    RunRecord,
    TuneTrials,
    partition_title,
    tune_parent,
    tune_parent_end,
    tune_parent_metrics,
    with_schedule,
    with_warm_start,
)
from raytune_fl.tracking.schema import setting_folder, study_key
from raytune_fl.tune.callbacks import BestSoFar, ForwardInterrupt, MlflowTrialLogger, TrialEventsCallback, print_line
from raytune_fl.tune.edges import edge_flags
from raytune_fl.tune.events import Watch, Watcher
from raytune_fl.tune.interrupt import resume_command
from raytune_fl.tune.outcome import VariantOutcome, selected_schedule, summarise
from raytune_fl.tune.refusal import raise_refusal
from raytune_fl.tune.search import (
    Resumed,
    Search,
    close_optuna_trials,
    grid_notice,
    make_search,
    single_run_notice,
)
from raytune_fl.tune.tuner import fit, new_tuner, restorable, restore_tuner, run_config, study_trainable
from raytune_fl.tune.warm_start import WarmPoints


@dataclass
class VariantRun:
    """Where a variant study lives, recorded before it starts so that `--resume` can find it."""

    experiment_path: str  # the Tune experiment directory
    parent_run_id: str | None  # the MLflow parent run
    optuna_study: str | None = None  # the Optuna study's name (None: nothing searched, or no Optuna storage)
    optuna_storage: str | None = None  # its storage URL, password masked (runtime/optuna_storage.py)


@dataclass(frozen=True)
class StudyAt:
    """Where a study sits in its command's run: the grid setting it is tuned at (tune --per-setting, as fields:
    partition.alpha=0.1; None: the file's base) and the configurations it tries first (a warm start; None: cold)."""

    setting: str | None = None
    warm_start: WarmPoints | None = None


@dataclass(frozen=True)
class StudyOptions:
    """How a command runs its variants' studies: the same for each of them."""

    storage: str | Path | Storage  # where Tune keeps the studies: a directory or URI (runtime/storage.py)
    tracker: StudyTracker | None  # MLflow (None: nothing logged)
    out: Callable[[str], None] = print_line
    watch: Watcher | None = None  # how the caller follows the trials (the CLI's console; None: silently)
    log_model: bool = True  # the selected trial's model logged to MLflow
    optuna_storage: str | None = None  # the Optuna storage URL the searched variants persist to
    exporter: ModelExporter | None = None  # the helper process that logs models (None: this process)


def run_variant(
    space: SearchSpace,
    variant_name: str,
    options: StudyOptions,
    *,
    data: FederatedData | None = None,
    resume: VariantRun | None = None,
    on_start: Callable[[VariantRun], None] | None = None,
    at: StudyAt = StudyAt(),
) -> VariantOutcome:
    """One variant's study (with `at.setting`, its study at that grid setting: `space` holds the setting's base).
    With `resume` (a study a stopped or killed driver left behind), Tune restores its trials
    from their last checkpoints and the searcher from its saved state (its Optuna study too: search.py), and MLflow
    continues in the same runs. `on_start` is told where the study lives once its parent run exists. `at.warm_start`:
    configurations (fitted to the variant's ranges: tune/warm_start.py) its first trials try, before the sampler
    proposes; recorded on its parent run, their trial runs tagged."""
    started, stamp = time.time(), time.strftime("%Y%m%d-%H%M%S")
    setting, warm_start = at.setting, at.warm_start
    trials, settings, tracker = VariantTrials.of(space, variant_name), space.tune, options.tracker
    base, key = trials.experiment, study_key(variant_name, setting)
    resumed = Resumed(resume.optuna_study) if resume else None
    enqueued = warm_start.configs if warm_start is not None and space.variants[variant_name].search else ()
    search = make_search(space, variant_name, stamp, options.optuna_storage, resumed, key, enqueued)
    for notice in (grid_notice(settings, search, variant_name), single_run_notice(space, variant_name)):
        if notice is not None:
            options.out(notice)
    storage = resolve_storage(options.storage)
    restore_from = _restore_path(resume, storage, variant_name, options.out)
    data = data or (prepare_data(base) if tracker is not None else None)  # what every trial builds, seeded
    identity, val_samples = _identity(base, data)
    callbacks = _followers(
        options.watch, Watch(variant_name, search.num_samples, base.rounds, *_rule(settings)), search
    )
    warmed = warm_start if enqueued else None
    record = _record(space, variant_name, search, identity, setting, warmed)
    with _parent_run(tracker, record, resume, data, base, started, tune_parent_metrics(val_samples)) as logged:
        parent_run_id = logged.parent.run_id if logged is not None else None
        if logged is not None:
            records = TuneTrials(variant_name, trials, (identity,) if identity else (), enqueued)
            callbacks += _trial_loggers(logged, options, records, resume, settings)
        name = f"{space.name}-{setting_folder(key)}-{stamp}"
        experiment_path = restore_from or storage.join(name)  # within the storage's filesystem, as restore takes it
        if on_start is not None:  # recorded once the parent run exists: a stop from here on resumes in it
            on_start(VariantRun(experiment_path, parent_run_id, *_optuna(search)))
        # a stop raises StudyInterrupted in fit: no selection, summary or model of a cut study
        results = fit(_tuner(trials, restore_from, storage, callbacks, name, search, settings))
        if search.optuna_study is not None and options.optuna_storage is not None:  # the study is in that storage
            close_optuna_trials(options.optuna_storage, search.optuna_study, variant_name, options.out)
        raise_refusal(results, f"variant {key}")  # a configuration error: the parent FAILED, no selection
        selected = _select(results, variant_name, trials, space, val_samples, search.pbt)
        outcome, best = _placed(selected[0], parent_run_id, storage, search, started, setting), selected[1]
        outcome.warm_start = warmed.describe() if warmed is not None else ""
        if logged is not None:
            _end_parent(logged, outcome, best, trials, options, settings)
        return outcome


def _identity(base: ExperimentConfig, data: FederatedData | None) -> tuple[DataIdentity | None, int | None]:
    """The data's identity, and its validation size (what val_acc's standard error is over)."""
    identity = data_identity_of(base, data) if data is not None else None
    return identity, identity.sizes["val_samples"] if identity is not None else None


def _record(
    space: SearchSpace,
    variant: str,
    search: Search,
    identity: DataIdentity | None,
    setting: str | None,
    warm_start: WarmPoints | None,
) -> RunRecord:
    """The study's parent run, as tracking/records.py describes it."""
    optuna = OptunaStudy(search.optuna_study, search.optuna_storage) if search.optuna_study else None
    datasets = [identity] if identity else []
    record = tune_parent(space, variant, search.num_samples, datasets, optuna, setting, resume_command())
    return with_warm_start(record, warm_start)


def _restore_path(resume: VariantRun | None, storage: Storage, variant: str, out: Callable[[str], None]) -> str | None:
    """The Tune experiment a resume restores; None for a fresh start (said so when a resume finds nothing)."""
    if resume is None:
        return None
    if restorable(resume.experiment_path, storage):
        return resume.experiment_path
    out(f"[{variant}] nothing to restore at {storage.show(resume.experiment_path)}: starting the variant afresh")
    return None


def _followers(watch: Watcher | None, watched: Watch, search: Search) -> list[tune.Callback]:
    """Who hears of the trials besides MLflow: the caller's watcher, and the interrupt forwarder."""
    watched = replace(watched, may_stop_early=search.may_stop_early)  # ASHA: the time left is an upper bound
    callbacks: list[tune.Callback] = [TrialEventsCallback(watch(watched))] if watch is not None else []
    callbacks.append(ForwardInterrupt())  # a Ctrl-C that came before Tune listened reaches it on its next step
    return callbacks


def _optuna(search: Search) -> tuple[str | None, str | None]:
    return search.optuna_study, search.optuna_storage


@dataclass(frozen=True)
class Logged:
    """A study's MLflow side while it runs: its parent run, the tracker that writes it, the data its runs name."""

    parent: ParentRun
    tracker: StudyTracker
    data: FederatedData


@contextmanager
def _parent_run(
    tracker: StudyTracker | None,
    record: RunRecord,
    resume: VariantRun | None,
    data: FederatedData | None,
    base: ExperimentConfig,
    started: float,
    metrics: dict[str, float],
) -> Iterator[Logged | None]:
    """The study's parent run (none without a tracker): new, with its partition record, or the resumed one; it
    ends with its wall time since `started` and `metrics` whatever stops it."""
    if tracker is None or data is None:  # data: prepared wherever there is a tracker
        yield None
        return
    with tracker.parent_run(record, resume.parent_run_id if resume else None, started) as parent:
        if parent.new:
            tracker.log_partition_when_drawn(parent.run_id, data, partition_title(base))
        parent.metrics.update(metrics)
        yield Logged(parent, tracker, data)


def _trial_loggers(
    logged: Logged,
    options: StudyOptions,
    records: TuneTrials,
    resume: VariantRun | None,
    settings: TuneSettings,
) -> list[tune.Callback]:
    """What logs the trials to MLflow as they run (their runs closed with the parent's); with an exporter, the
    best trial so far's model too."""
    rounds, parent = records.trials.experiment.rounds, logged.parent
    parent.trials.append(TrialTracker(logged.tracker, parent.run_id, rounds, records, resuming=bool(resume)))
    callbacks: list[tune.Callback] = [MlflowTrialLogger(parent.trials[-1])]
    if options.exporter is not None and options.log_model:
        callbacks.append(_best_so_far(options.exporter, parent.run_id, records.trials, logged.data, settings))
    return callbacks


def _tuner(
    trials: VariantTrials,
    restore_from: str | None,
    storage: Storage,
    callbacks: list[tune.Callback],
    name: str,
    search: Search,
    settings: TuneSettings,
) -> tune.Tuner:
    """The study's Tuner: restored from `restore_from`, else new under `name`."""
    trainable = study_trainable(trials, scheduled=search.pbt)
    if restore_from is not None:
        return restore_tuner(restore_from, trainable, storage, callbacks)
    config = run_config(name, storage, callbacks, trials.experiment.faults.trial_retries, search.checkpoints_kept)
    return new_tuner(trainable, settings, search, config)


def _best_so_far(
    exporter: ModelExporter,
    parent_run_id: str,
    trials: VariantTrials,
    data: FederatedData,
    settings: TuneSettings,
) -> BestSoFar:
    """The best trial so far has its model logged by the helper process while the study runs."""

    def log_ahead(trial_id: str, checkpoint: tune.Checkpoint, config: dict[str, Any]) -> None:
        exporter.log_ahead(parent_run_id, trial_id, checkpoint, trials.trial(config), data)

    return BestSoFar(log_ahead, *_rule(settings), trials.experiment.rounds)


def _select(
    results: tune.ResultGrid,
    name: str,
    trials: VariantTrials,
    space: SearchSpace,
    val_samples: int | None,
    scheduled: bool = False,
) -> tuple[VariantOutcome, tune.Result | None]:
    """The study's outcome by its selection rule, with its Pareto front when it has several objectives, and the
    selected values that lie at an edge of their range; `scheduled` (PBT): with the selected trial's schedule."""
    outcome, best = summarise(results, name, trials, space.tune, val_samples)
    schedule = selected_schedule(best) if scheduled and best is not None else None
    edges = edge_flags(space.variants[name].search, outcome.best_params)
    return replace(outcome, edges=edges, schedule=schedule), best


def _rule(settings: TuneSettings) -> tuple[str, str]:
    """What trials are selected on, and in which direction."""
    return settings.primary, settings.mode


def _placed(
    outcome: VariantOutcome,
    parent_run_id: str | None,
    storage: Storage,
    search: Search,
    started: float,
    setting: str | None = None,
) -> VariantOutcome:
    """The outcome with where the study lives, and its wall time since `started`."""
    study, shown = _optuna(search)
    return replace(
        outcome,
        setting=setting,
        parent_run_id=parent_run_id,
        storage=storage.uri,
        optuna_study=study,
        optuna_storage=shown,
        wall_time_s=time.time() - started,
    )


def _end_parent(
    logged: Logged,
    outcome: VariantOutcome,
    best: tune.Result | None,
    trials: VariantTrials,
    options: StudyOptions,
    settings: TuneSettings,
) -> None:
    """The selected model logged (`options.log_model`), then the parent's end: its selection's tags and metrics,
    the run of its model; with several objectives, the objectives and its Pareto front."""
    model = _log_best_model(logged, best, trials, options) if best is not None and options.log_model else None
    outcome.model_id = model[0] if model is not None else None
    objectives = settings.objectives
    front = ParetoFront(objectives, tuple(t.trial_id for t in outcome.front)) if len(objectives) > 1 else None
    seed = trials.experiment.seed
    end = tune_parent_end(
        outcome.best_params,
        outcome.best_metrics,
        outcome.trials,
        seed,
        outcome.edges,
        front,
        model[1] if model else None,
    )
    logged.parent.end_with(with_schedule(end, outcome.schedule))


def _log_best_model(
    logged: Logged, best: tune.Result, trials: VariantTrials, options: StudyOptions
) -> tuple[str, str] | None:
    """The selected trial's global model on its run, and listed on the variant's parent run: its model id and the
    trial run that logged it."""
    trial, out, parent, data = trials.trial(best.config), options.out, logged.parent, logged.data
    logged_model: tuple[Any, ...] | None
    out("  saving the selected model to MLflow...")  # seconds (minutes on a loaded machine): cli/progress.py's phase
    if options.exporter is not None:
        logged_model = options.exporter.log(parent.run_id, best, trial, data, link_parent=True)
    else:
        logged_model = log_trial_model(logged.tracker, parent.run_id, best, trial, data, link_parent=True)
    if logged_model is None:
        out(f"  no model logged for {parent.run_id}: the selected trial left no checkpoint (checkpoint_every: 0?)")
        return None
    model_id, run_id = logged_model[:2]
    return model_id, run_id
