"""A variant's search: the Optuna sampler (seeded per variant) and its study's storage, and the trial scheduler."""

from __future__ import annotations

import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import optuna
from ray.tune.schedulers import ASHAScheduler, FIFOScheduler, TrialScheduler
from ray.tune.search.optuna import OptunaSearch

from raytune_fl.config import AshaConfig, SearchSpace, TuneSettings
from raytune_fl.metrics import ROUND
from raytune_fl.runtime import optuna_storage as optuna_db
from raytune_fl.tune.space import optuna_space


@dataclass(frozen=True)
class Search:
    """How a variant's trials are proposed and stopped."""

    algorithm: OptunaSearch | None  # None: nothing searched, one run of the fixed configuration
    scheduler: TrialScheduler
    num_samples: int
    optuna_study: str | None = None  # the Optuna study's name (None: nothing searched, or no Optuna storage)
    optuna_storage: str | None = None  # its storage URL, password masked

    @property
    def may_stop_early(self) -> bool:
        return isinstance(self.scheduler, ASHAScheduler)


def sampler_seed(seed: int, variant: str) -> int:
    """Each variant's own sampler seed from (tune.seed, variant name): variants searching the same ranges would
    otherwise propose the same first configurations, and their comparison would not be independent."""
    return int(np.random.SeedSequence([seed, zlib.crc32(variant.encode())]).generate_state(1)[0])


def make_sampler(settings: TuneSettings, variant: str, num_samples: int) -> optuna.samplers.BaseSampler:
    seed = sampler_seed(settings.seed, variant)
    if settings.sampler == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    return optuna.samplers.TPESampler(seed=seed, n_startup_trials=tpe_startup_trials(num_samples))


def objective_args(settings: TuneSettings) -> tuple[str | list[str], str | list[str]]:
    """Optuna's metric and mode: one name and direction, or (several objectives) a list of each: Optuna's TPE then
    searches for the Pareto front."""
    if not settings.multi_objective:
        return settings.primary, settings.mode
    return [o.metric for o in settings.objectives], [o.mode for o in settings.objectives]


def tpe_startup_trials(num_samples: int) -> int:
    # Optuna's default of 10 random start-up trials would make a small study pure random search.
    return max(2, min(10, num_samples // 3))


def make_scheduler(asha: AshaConfig | None, rounds: int) -> TrialScheduler:
    """ASHA on rounds when the space asks for it, else every trial runs every round."""
    if asha is None:
        return FIFOScheduler()
    return ASHAScheduler(
        time_attr=ROUND, max_t=rounds, grace_period=asha.grace(rounds), reduction_factor=asha.reduction_factor
    )


def make_search(
    space: SearchSpace,
    variant_name: str,
    stamp: str,
    optuna_storage: str | None = None,
    resumed_study: str | None = None,
    resuming: bool = False,
    key: str | None = None,
    warm_start: Sequence[dict[str, Any]] = (),
) -> Search:
    """The variant's search. With `optuna_storage` (a SQLAlchemy URL) a searched variant's Optuna study persists
    there as `<space name>-<variant>` (`-<stamp>` appended when a fresh run finds that name taken); a resume
    reopens `resumed_study`, the one the interrupted run wrote to (None: it started in memory). `key` names the study
    in place of the variant (a study per setting: `<variant>@<setting>`). `warm_start`: configurations (fitted to
    the variant's ranges: tune/warm_start.py) the study tries first, before its sampler proposes; a resume enqueues
    none (its study, restored by Tune, already holds those it has not yet tried)."""
    settings, variant = space.tune, space.variants[variant_name]
    if not variant.search:  # deterministic: repeating it would only repeat the same run
        return Search(None, FIFOScheduler(), 1)
    num_samples = settings.num_samples
    sampler = make_sampler(settings, variant_name, num_samples)
    rdb = optuna_db.open_storage(optuna_storage) if optuna_storage else None
    study = None
    if rdb is not None:  # a fresh run never joins an earlier run's study
        named = f"{space.name}-{key or variant_name}"
        study = resumed_study if resuming else optuna_db.unused_study_name(rdb, named, stamp)
    metric, mode = objective_args(settings)
    algorithm = OptunaSearch(
        space=optuna_space(variant.search),
        metric=metric,
        mode=mode,
        sampler=sampler,
        study_name=study,
        storage=rdb if study else None,
        # Optuna's enqueue_trial underneath; a second enqueue into a resumed study's storage would try them twice
        points_to_evaluate=[dict(point) for point in warm_start] if warm_start and not resuming else None,
    )
    scheduler = make_scheduler(settings.early_stopping, space.experiment_for(variant_name).rounds)
    return Search(
        algorithm, scheduler, num_samples, study, optuna_db.masked(optuna_storage) if study and optuna_storage else None
    )


def close_optuna_trials(url: str, study_name: str, variant: str, out: Callable[[str], None]) -> None:
    """Optuna trials a killed driver left RUNNING (Tune never recorded them) are marked FAIL once the study ends."""
    try:
        closed = optuna_db.fail_running_trials(url, study_name)
    except Exception as error:  # the results are in MLflow and Tune already; say so rather than fail the study
        out(f"[{variant}] could not close the Optuna study's running trials: {type(error).__name__}: {error}")
        return
    if closed:
        out(f"[{variant}] {closed} Optuna trial(s) left RUNNING by the interrupted run marked FAIL")
