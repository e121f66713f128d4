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

from raytune_fl.config import ExperimentConfig, Objective, SearchSpace, TrialSpec, TuneSettings, VariantConfig
from raytune_fl.data.identity import DataIdentity
from raytune_fl.engine.data import FederatedData, data_identity_of, prepare_data
from raytune_fl.export.model_helper import ModelExporter
from raytune_fl.export.trial_model import log_trial_model
from raytune_fl.runtime.storage import Storage, resolve_storage
from raytune_fl.tracking import ParentRun, StudyTracker, TrialTracker
from raytune_fl.tracking.records import (
    RunRecord,
    TuneTrials,
    partition_title,
    tune_parent,
    tune_parent_end,
    tune_parent_metrics,
)
from raytune_fl.tracking.schema import (
    TAG_MODEL_RUN_ID,
    TAG_OBJECTIVES,
    TAG_PARETO_FRONT,
    TAG_RESUME_COMMAND,
    TRUE,
    setting_folder,
    study_key,
)
from raytune_fl.tracking.store import trial_run
from raytune_fl.tune.callbacks import BestSoFar, ForwardInterrupt, MlflowTrialLogger, TrialEventsCallback, print_line
from raytune_fl.tune.edges import edge_flags
from raytune_fl.tune.events import Watch, Watcher
from raytune_fl.tune.interrupt import resume_command
from raytune_fl.tune.outcome import VariantOutcome, summarise
from raytune_fl.tune.search import Search, close_optuna_trials, make_search
from raytune_fl.tune.tuner import fit, new_tuner, restorable, restore_tuner, run_config, study_trainable


@dataclass
class VariantRun:
    """Where a variant study lives, recorded before it starts so that `--resume` can find it."""

    experiment_path: str  # the Tune experiment directory
    parent_run_id: str | None  # the MLflow parent run
    optuna_study: str | None = None  # the Optuna study's name (None: nothing searched, or no Optuna storage)
    optuna_storage: str | None = None  # its storage URL, password masked (runtime/optuna_storage.py)


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
    setting: str | None = None,
) -> VariantOutcome:
    """One variant's study (with `setting`, its study at that grid setting: `space` holds the setting's base).
    With `resume` (a study a stopped or killed driver left behind), Tune restores its trials
    from their last checkpoints and the searcher from its saved state (its Optuna study too: search.py), and MLflow
    continues in the same runs. `watch`: how the caller follows the trials (the CLI's console; None: silently).
    With `log_model` the selected trial's model is logged to MLflow, by `exporter`'s helper process if given."""
    started, stamp = time.time(), time.strftime("%Y%m%d-%H%M%S")
    variant, base, settings = space.variants[variant_name], space.experiment_for(variant_name), space.tune
    key = study_key(variant_name, setting)
    search = make_search(space, variant_name, stamp, optuna_storage, resume and resume.optuna_study, bool(resume), key)
    storage = resolve_storage(storage)
    restore_from = _restore_path(resume, storage, variant_name, out)
    data = data or (prepare_data(base) if tracker is not None else None)  # what every trial builds, seeded
    identity, val_samples = _identity(base, data)
    callbacks = _followers(watch, Watch(variant_name, search.num_samples, base.rounds, *_rule(settings)), search)
    record = _record(space, variant_name, search, identity, setting)
    logged = tune_parent_metrics(val_samples)
    with _parent_run(tracker, record, resume, data, base, started, logged) as parent:
        parent_run_id = parent.run_id if parent is not None else None
        if parent is not None:
            trials = TuneTrials(variant_name, base, variant.method, dict(variant.fixed), (identity,))
            parent.trials.append(TrialTracker(tracker, parent.run_id, base.rounds, trials, resuming=bool(resume)))
            callbacks.append(MlflowTrialLogger(parent.trials[-1]))
            if exporter is not None and log_model:
                callbacks.append(_best_so_far(exporter, parent.run_id, base, variant, data, settings))
        name = f"{space.name}-{setting_folder(key)}-{stamp}"
        experiment_path = restore_from or storage.join(name)  # within the storage's filesystem, as restore takes it
        if on_start is not None:  # recorded once the parent run exists: a stop from here on resumes in it
            on_start(VariantRun(experiment_path, parent_run_id, *_optuna(search)))
        trainable = study_trainable(base, variant.method, variant.fixed)
        if restore_from is not None:
            tuner = restore_tuner(restore_from, trainable, storage, callbacks)
        else:
            config = run_config(name, storage, callbacks, base.faults.trial_retries)
            tuner = new_tuner(trainable, settings, search, config)
        results = fit(tuner)  # a stop raises StudyInterrupted here: no selection, summary or model of a cut study
        if search.optuna_study is not None:
            close_optuna_trials(optuna_storage, search.optuna_study, variant_name, out)
        selected = _select(results, variant_name, variant, settings, base.rounds, val_samples)
        outcome, best = _placed(selected[0], parent_run_id, storage, search, started, setting), selected[1]
        if parent is not None:
            _end_parent(parent, outcome, base.seed, settings.objectives)
            if best is not None and log_model:
                outcome.model_id = _log_best_model(tracker, parent, best, base, variant, data, out, exporter)
        return outcome


def _identity(base: ExperimentConfig, data: FederatedData | None) -> tuple[DataIdentity | None, int | None]:
    """The data's identity, and its validation size (what val_acc's standard error is over)."""
    identity = data_identity_of(base, data) if data is not None else None
    return identity, identity.sizes["val_samples"] if identity is not None else None


def _record(
    space: SearchSpace, variant: str, search: Search, identity: DataIdentity | None, setting: str | None
) -> RunRecord:
    """The study's parent run, as tracking/records.py describes it."""
    return tune_parent(space, variant, search.num_samples, [identity] if identity else [], *_optuna(search), setting)


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


@contextmanager
def _parent_run(
    tracker: StudyTracker | None,
    record: RunRecord,
    resume: VariantRun | None,
    data: FederatedData | None,
    base: ExperimentConfig,
    started: float,
    metrics: dict[str, float],
) -> Iterator[ParentRun | None]:
    """The study's parent run (none without a tracker): new, with its partition record, or the resumed one; it
    ends with its wall time since `started` and `metrics` whatever stops it."""
    if tracker is None:
        yield None
        return
    with tracker.parent_run(record, resume.parent_run_id if resume else None, started) as parent:
        if parent.new:
            tracker.log_partition_when_drawn(parent.run_id, data, partition_title(base))
        parent.metrics.update(metrics)
        if resume_command():  # what `ablate` names when it refuses this study's variant, if it is stopped
            parent.interrupt_tags[TAG_RESUME_COMMAND] = resume_command()
        yield parent


def _best_so_far(
    exporter: ModelExporter,
    parent_run_id: str,
    base: ExperimentConfig,
    variant: VariantConfig,
    data: FederatedData,
    settings: TuneSettings,
) -> BestSoFar:
    """The best trial so far has its model logged by the helper process while the study runs."""

    def log_ahead(trial_id: str, checkpoint: tune.Checkpoint, config: dict[str, Any]) -> None:
        trial = TrialSpec.resolve(base, variant.method, variant.fixed, config)
        exporter.log_ahead(parent_run_id, trial_id, checkpoint, trial, data)

    return BestSoFar(log_ahead, *_rule(settings), base.rounds)


def _select(
    results: tune.ResultGrid,
    name: str,
    variant: VariantConfig,
    settings: TuneSettings,
    rounds: int,
    val_samples: int | None,
) -> tuple[VariantOutcome, tune.Result | None]:
    """The study's outcome by its selection rule, with its Pareto front when it has several objectives, and the
    selected values that lie at an edge of their range."""
    fixed = dict(variant.fixed)
    outcome, best = summarise(
        results, name, variant.method, fixed, *_rule(settings), rounds, val_samples, settings.objectives
    )
    return replace(outcome, edges=edge_flags(variant.search, outcome.best_params)), best


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


def _end_parent(parent: ParentRun, outcome: VariantOutcome, seed: int, objectives: tuple[Objective, ...]) -> None:
    """The parent's end (its selection's tags and metrics); with several objectives, the objectives tagged on it
    and `pareto_front` on the front's trial runs."""
    end = tune_parent_end(outcome.best_params, outcome.best_metrics, outcome.trials, seed, outcome.edges)
    parent.status = end.status
    parent.metrics.update(end.metrics)
    parent.tags = dict(end.tags)
    if len(objectives) > 1:
        parent.tags[TAG_OBJECTIVES] = ",".join(f"{o.metric}:{o.mode}" for o in objectives)
    for trial in outcome.front if parent.trials else ():
        trials = parent.trials[-1]
        run = trial_run(trials.client, trials.tracker.experiment_id, parent.run_id, trial.trial_id)
        if run is not None:
            trials.client.set_tag(run.info.run_id, TAG_PARETO_FRONT, TRUE)


def _log_best_model(
    tracker: StudyTracker,
    parent: ParentRun,
    best: tune.Result,
    base: ExperimentConfig,
    variant: VariantConfig,
    data: FederatedData,
    out: Callable[[str], None],
    exporter: ModelExporter | None = None,
) -> str | None:
    """The selected trial's global model on its run, and listed on the variant's parent run."""
    trial = TrialSpec.resolve(base, variant.method, variant.fixed, best.config)
    out("  saving the selected model to MLflow...")  # seconds (minutes on a loaded machine): cli/progress.py's phase
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
