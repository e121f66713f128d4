"""One variant study: OptunaSearch (TPE, seeded) + ASHA on rounds, logged to MLflow."""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna
from ray import tune
from ray.tune.schedulers import ASHAScheduler, FIFOScheduler
from ray.tune.search.optuna import OptunaSearch

from raytune_fl.config import SearchSpace, flatten
from raytune_fl.engine.federation import FederatedData, prepare_data
from raytune_fl.methods import METHODS
from raytune_fl.tracking import StudyTracker
from raytune_fl.tune.resources import placement_group_factory
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


class ProgressPrinter(tune.Callback):
    """One line per trial round: Tune's own table is too verbose for a terminal on long studies."""

    def __init__(self, variant: str, num_trials: int, rounds: int, metric: str, out: Callable[[str], None]) -> None:
        self.variant, self.num_trials, self.rounds, self.metric, self.out = (
            variant,
            num_trials,
            rounds,
            metric,
            out,
        )
        self.index: dict[str, int] = {}

    def on_trial_start(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        n = self.index.setdefault(trial.trial_id, len(self.index) + 1)
        params = ", ".join(f"{k}={_short(v)}" for k, v in trial.config.items()) or "defaults"
        self.out(f"[{self.variant}] trial {n}/{self.num_trials} started: {params}")

    def on_trial_result(self, iteration: int, trials: list, trial: Any, result: dict, **info: Any) -> None:
        n = self.index.get(trial.trial_id, 0)
        self.out(
            f"[{self.variant}] trial {n}/{self.num_trials} round {result.get('round')}/{self.rounds} "
            f"{self.metric}={_get(result, self.metric):.4f} test_acc={_get(result, 'test_acc'):.4f} "
            f"loss={_get(result, 'train_loss'):.4f} ({_get(result, 'round_time_s'):.1f}s)"
        )

    def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        last = (trial.last_result or {}).get("round", 0)
        how = "finished" if last >= self.rounds else f"stopped early by ASHA at round {last}"
        self.out(f"[{self.variant}] trial {self.index.get(trial.trial_id, 0)}/{self.num_trials} {how}")

    def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self.out(
            f"[{self.variant}] trial {self.index.get(trial.trial_id, 0)}/{self.num_trials} FAILED: {trial.error_file}"
        )


def _get(result: dict, key: str) -> float:
    value = result.get(key)
    return float(value) if isinstance(value, (int, float)) else float("nan")


def _short(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _print(line: str) -> None:
    print(line, file=sys.stdout, flush=True)


def tpe_startup_trials(num_samples: int) -> int:
    # Optuna's default of 10 random start-up trials would make a small study pure random search.
    return max(2, min(10, num_samples // 3))


@dataclass
class VariantRun:
    """Where a variant study lives, recorded before it starts so that `--resume` can find it."""

    experiment_path: str  # the Tune experiment directory
    parent_run_id: str | None  # the MLflow parent run


def run_variant(
    space: SearchSpace,
    variant_name: str,
    *,
    storage: str | Path | Storage,
    tracker: StudyTracker | None,
    out: Callable[[str], None] = _print,
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
    parent_run_id = resume.parent_run_id if resume else None
    storage = resolve_storage(storage)
    fs = storage.filesystem
    restorable = resume is not None and tune.Tuner.can_restore(resume.experiment_path, storage_filesystem=fs)
    if resume is not None and not restorable:
        where = storage.show(resume.experiment_path)
        out(f"[{variant_name}] nothing to restore at {where}: starting the variant afresh")
    logger = None
    if tracker is not None and parent_run_id is not None:
        tracker.reopen(parent_run_id)
    elif tracker is not None:
        parent_run_id = tracker.start_parent(
            variant_name,
            tags={
                "method": variant.method,
                "dataset": base.dataset,
                "partition": f"{base.partition.kind}(alpha={base.partition.alpha})"
                if base.partition.kind == "dirichlet"
                else base.partition.kind,
                "searched": ",".join(variant.search) or "(none)",
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
        data = data or prepare_data(base)  # the same seeded partition every trial of this study builds
        part = base.partition
        tracker.log_partition(parent_run_id, data, f"{base.dataset}: {part.kind}, {part.clients} clients")
    if tracker is not None and parent_run_id is not None:
        logger = tracker.trial_logger(
            parent_run_id, variant_name, variant.method, base_params, base.rounds, resuming=resume is not None
        )
        callbacks.append(logger)
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
    status = "FAILED"
    try:
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
        status = "FINISHED" if outcome.best_metrics else "FAILED"
        return outcome
    except KeyboardInterrupt:
        status = "KILLED"
        raise
    finally:
        if tracker is not None and parent_run_id is not None:
            if logger is not None:
                logger.close_open_runs()
            tracker.close_running_children(parent_run_id)
            metrics: dict[str, float] = {"wall_time_s": time.time() - started}
            tags: dict[str, Any] = {}
            if status == "FINISHED":
                metrics.update({f"best_{k}": v for k, v in outcome.best_metrics.items()})
                metrics.update({f"trials_{k}": v for k, v in outcome.trials.items()})
                tags = {f"best.{k}": v for k, v in outcome.best_params.items()}
            tracker.finish_parent(parent_run_id, metrics, tags, status)


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
    counts = {"finished": 0, "stopped_early": 0, "diverged": 0, "error": 0}
    candidates, errors = [], []
    for result in results:
        if result.error is not None:
            counts["error"] += 1
            errors.append(str(result.error).splitlines()[0][:300])
            continue
        metrics = result.metrics or {}
        if metrics.get("diverged"):
            counts["diverged"] += 1  # never a candidate: its score is the worst by construction
            continue
        reached = int(metrics.get("round", 0))
        counts["finished" if reached >= rounds else "stopped_early"] += 1
        value = metrics.get(metric)
        if value is not None and math.isfinite(value):
            candidates.append((reached >= rounds, value, result))
    if not candidates:
        return VariantOutcome(variant, method, {}, {}, counts, None, "", 0.0, errors)
    sign = 1 if mode == "max" else -1
    # Prefer trials that ran every round: an ASHA-stopped trial's score is from an earlier round.
    full, value, best = max(candidates, key=lambda c: (c[0], sign * c[1]))
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
