"""One variant study: OptunaSearch (TPE, seeded) + ASHA on rounds, logged to MLflow."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import optuna
from ray import tune
from ray.tune.schedulers import ASHAScheduler, FIFOScheduler
from ray.tune.search.optuna import OptunaSearch

from raytune_fl.config import ExperimentConfig, SearchSpace, flatten, run_params
from raytune_fl.engine.data import FederatedData, prepare_data
from raytune_fl.methods import METHODS
from raytune_fl.tracking import ParentRun, StudyTracker
from raytune_fl.tracking.schema import (
    RUN_FAILED,
    RUN_FINISHED,
    TAG_BEST_PREFIX,
    TAG_DATASET,
    TAG_METHOD,
    TAG_PARTITION,
    TAG_SEARCHED,
    TRIAL_DIVERGED,
    TRIAL_ERROR,
    TRIAL_FINISHED,
    TRIAL_STOPPED_EARLY,
)
from raytune_fl.tune.callbacks import MlflowTrialLogger, ProgressPrinter, print_line
from raytune_fl.tune.resources import placement_group_factory
from raytune_fl.tune.selection import best_of
from raytune_fl.tune.space import optuna_space
from raytune_fl.tune.storage import Storage, resolve_storage
from raytune_fl.tune.trainable import federated_trial


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


def tpe_startup_trials(num_samples: int) -> int:
    # Optuna's default of 10 random start-up trials would make a small study pure random search.
    return max(2, min(10, num_samples // 3))


@dataclass
class VariantRun:
    """Where a variant study lives, recorded before it starts so that `--resume` can find it."""

    experiment_path: str  # the Tune experiment directory
    parent_run_id: str | None  # the MLflow parent run


def trial_params(base: ExperimentConfig, method: str, fixed: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
    """A tune trial's MLflow params: what its Federation runs with ({**fixed, **config}), resolved as an ablation
    cell's are (config.run_params), so both stages log the same params for the same configuration."""
    return run_params(base, method, {**fixed, **config})


def run_variant(
    space: SearchSpace,
    variant_name: str,
    *,
    storage: str | Path | Storage,
    tracker: StudyTracker | None,
    out: Callable[[str], None] = print_line,
    data: FederatedData | None = None,
    resume: VariantRun | None = None,
    on_start: Callable[[VariantRun], None] | None = None,
) -> VariantOutcome:
    """One variant's study. With `resume` (a study a killed driver left behind), Tune restores its trials
    from their last checkpoints and the searcher from its saved state, and MLflow continues in the same runs."""
    started = time.time()
    variant = space.variants[variant_name]
    settings, base = space.tune, space.base
    searched = bool(variant.search)
    # a variant with nothing to search is deterministic: repeating it would only repeat the same run
    num_samples = settings.num_samples if searched else 1
    search_alg = None
    if searched:
        sampler = optuna.samplers.TPESampler(seed=settings.seed, n_startup_trials=tpe_startup_trials(num_samples))
        search_alg = OptunaSearch(
            space=optuna_space(variant.search), metric=settings.metric, mode=settings.mode, sampler=sampler
        )
    asha = settings.scheduler.asha
    scheduler = (
        ASHAScheduler(
            time_attr="round",
            max_t=base.rounds,
            grace_period=min(asha.grace_period, base.rounds),
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
    callbacks: list[tune.Callback] = [ProgressPrinter(variant_name, num_samples, base.rounds, settings.metric, out)]
    storage = resolve_storage(storage)
    fs = storage.filesystem
    restorable = resume is not None and tune.Tuner.can_restore(resume.experiment_path, storage_filesystem=fs)
    if resume is not None and not restorable:
        where = storage.show(resume.experiment_path)
        out(f"[{variant_name}] nothing to restore at {where}: starting the variant afresh")

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
        part = base.partition
        partitioned = data or prepare_data(base)  # the same seeded partition every trial of this study builds
        tracker.log_partition(run_id, partitioned, f"{base.dataset}: {part.kind}, {part.clients} clients")
        return run_id

    def close_parent(parent: ParentRun) -> None:
        parent.metrics["wall_time_s"] = time.time() - started

    parent_run_id = resume.parent_run_id if resume else None
    with tracker.parent_run(start_parent, parent_run_id) if tracker is not None else nullcontext() as parent:
        if parent is not None:
            parent_run_id, parent.on_close = parent.run_id, close_parent
            trials = tracker.trial_tracker(
                parent_run_id,
                variant_name,
                variant.method,
                partial(trial_params, base, variant.method, variant.fixed),
                base.rounds,
                resuming=resume is not None,
            )
            parent.trials.append(trials)
            callbacks.append(MlflowTrialLogger(trials))
        trainable = tune.with_resources(
            tune.with_parameters(federated_trial, experiment=base, method=variant.method, fixed=dict(variant.fixed)),
            placement_group_factory(base.resources),
        )
        name = f"{space.name}-{variant_name}-{time.strftime('%Y%m%d-%H%M%S')}"
        if restorable:
            tuner = tune.Tuner.restore(
                resume.experiment_path, trainable, resume_unfinished=True, resume_errored=True, storage_filesystem=fs
            )
            # Ray restores the callbacks pickled at the first start; ours hold this process's MLflow bookkeeping
            tuner._local_tuner.get_run_config().callbacks = callbacks
            experiment_path = resume.experiment_path
        else:
            tuner = _new_tuner(trainable, space, search_alg, scheduler, num_samples, name, storage, callbacks)
            experiment_path = storage.join(name)  # within the storage's filesystem, as Tune's restore takes it
        if on_start is not None:
            on_start(VariantRun(experiment_path, parent_run_id))
        results = tuner.fit()
        outcome = summarise(
            results,
            variant_name,
            variant.method,
            dict(variant.fixed),
            settings.metric,
            settings.mode,
            base.rounds,
        )
        outcome.parent_run_id, outcome.storage = parent_run_id, storage.uri
        outcome.wall_time_s = time.time() - started
        if parent is not None:
            parent.status = RUN_FINISHED if outcome.best_metrics else RUN_FAILED
            if outcome.best_metrics:
                parent.metrics.update({f"best_{k}": v for k, v in outcome.best_metrics.items()})
                parent.metrics.update({f"trials_{k}": v for k, v in outcome.trials.items()})
                parent.tags = {f"{TAG_BEST_PREFIX}{k}": v for k, v in outcome.best_params.items()}
        return outcome


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
    return tune.RunConfig(
        name=name,
        # the filesystem itself, not a URI: Ray pickles it to the trials with the endpoint it was made with
        storage_path=storage.path,
        storage_filesystem=storage.filesystem,
        callbacks=callbacks,
        failure_config=tune.FailureConfig(max_failures=trial_retries),
        verbose=0,  # the progress printer says a line per trial round instead of Tune's tables
        # the latest checkpoint is what a resume needs; one more in case the newest was being written
        checkpoint_config=tune.CheckpointConfig(num_to_keep=2),
    )


def summarise(
    results: tune.ResultGrid,
    variant: str,
    method: str,
    fixed: dict[str, Any],
    metric: str,
    mode: str,
    rounds: int,
) -> VariantOutcome:
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
        reached = int(metrics.get("round", 0))
        counts[TRIAL_FINISHED if reached >= rounds else TRIAL_STOPPED_EARLY] += 1
        value = metrics.get(metric)
        if value is not None and math.isfinite(value):
            candidates.append((reached >= rounds, value, result))
    if not candidates:
        return VariantOutcome(variant, method, {}, {}, counts, None, "", 0.0, errors)
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
    params = METHODS.get(method).describe({**fixed, **best.config})
    return VariantOutcome(variant, method, params, best_metrics, counts, None, "", 0.0, errors)
