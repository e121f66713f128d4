"""A variant's search: the Optuna sampler (seeded per variant) and its study's storage, and the trial scheduler;
with PBT (tune.scheduler.pbt), Ray's random population and its population-based training over rounds (pbt.py)."""

from __future__ import annotations

import warnings
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import optuna
from optuna.trial import FrozenTrial, TrialState
from ray.tune.experiment import Trial
from ray.tune.schedulers import (
    ASHAScheduler,
    FIFOScheduler,
    HyperBandScheduler,
    MedianStoppingRule,
    PopulationBasedTraining,
    TrialScheduler,
)
from ray.tune.search import BasicVariantGenerator
from ray.tune.search.optuna import OptunaSearch

from raytune_fl.config import AshaConfig, Distribution, HyperbandConfig, MedianConfig, SearchSpace, TuneSettings
from raytune_fl.config.space import Stopping, grid_size, single_point
from raytune_fl.metrics import ROUND
from raytune_fl.runtime import optuna_storage as optuna_db
from raytune_fl.tune.pbt import make_pbt, tune_domain
from raytune_fl.tune.refusal import refusal
from raytune_fl.tune.space import optuna_space

# Optuna 4: "... this `step` 3 is already reported."; 5: "... this `step=3` is already reported."
_STEP_REPORTED = r"The reported value is ignored because this `step"


class OptunaSearchOnce(OptunaSearch):
    """Tune's OptunaSearch, each step reported to Optuna once. A trial resumed (or restarted) from a checkpoint
    taken before its last reported round runs that round again and Tune reports it under the same
    training_iteration: Optuna keeps the first value, as wanted (the same round of the same seeded trial), but
    warns "step already reported" on the console; that warning alone is silenced here."""

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        with warnings.catch_warnings():  # Tune's loop is one thread: the filter touches no other report
            warnings.filterwarnings("ignore", message=_STEP_REPORTED)
            super().on_trial_result(trial_id, result)

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        if refusal(result) is not None:  # a trial's configuration error (tune/refusal.py): failed, never scored
            result, error = None, True
        super().on_trial_complete(trial_id, result=result, error=error)


@dataclass(frozen=True)
class Search:
    """How a variant's trials are proposed and stopped."""

    # None: nothing searched, one run of the fixed configuration; PBT: Ray's random draw of the population
    algorithm: OptunaSearch | BasicVariantGenerator | None
    scheduler: TrialScheduler
    num_samples: int
    optuna_study: str | None = None  # the Optuna study's name (None: nothing searched, or no Optuna storage)
    optuna_storage: str | None = None  # its storage URL, password masked
    param_space: dict[str, Any] | None = None  # PBT: the ranges Ray draws the population from
    # the newest two (a resume needs the latest); under PBT as many as a copied trial may write before its copy
    # starts (synchronous PBT lets it run one interval ahead)
    checkpoints_kept: int = 2

    @property
    def may_stop_early(self) -> bool:
        return isinstance(self.scheduler, STOPPING_SCHEDULERS)

    @property
    def pbt(self) -> bool:
        """Whether the trials' hyperparameters change between rounds (a trial runs a schedule)."""
        return isinstance(self.scheduler, PopulationBasedTraining)


# the schedulers that may stop a trial before its last round (each subclasses FIFOScheduler, which never does)
STOPPING_SCHEDULERS = (ASHAScheduler, HyperBandScheduler, MedianStoppingRule)


def sampler_seed(seed: int, variant: str) -> int:
    """Each variant's own sampler seed from (tune.seed, variant name): variants searching the same ranges would
    otherwise propose the same first configurations, and their comparison would not be independent."""
    return int(np.random.SeedSequence([seed, zlib.crc32(variant.encode())]).generate_state(1)[0])


class TellOnlyGridSampler(optuna.samplers.GridSampler):
    """Optuna's grid sampler for ask-and-tell: its after_trial calls study.stop() once the grid is done, which raises
    outside study.optimize (Tune's OptunaSearch tells, and logs that as a warning). Tune asks exactly the grid's
    size (make_search), so there is nothing to stop."""

    def after_trial(self, study: optuna.Study, trial: FrozenTrial, state: TrialState, values: Sequence[float] | None):
        return None


class ResumableHyperBand(HyperBandScheduler):
    """Ray Tune's Hyperband, resumable: a restore adds back the trials that had already ended, and one placed in a
    bracket never reports again, so the bracket waits for it with its other trials paused, for ever (Ray 2.60). An
    ended trial joins no bracket."""

    def on_trial_add(self, tune_controller: Any, trial: Trial) -> None:
        if trial.status != Trial.TERMINATED:
            super().on_trial_add(tune_controller, trial)

    def on_trial_remove(self, tune_controller: Any, trial: Trial) -> None:
        if trial in self._trial_info:  # an ended trial restored: in no bracket
            super().on_trial_remove(tune_controller, trial)


def make_sampler(
    settings: TuneSettings, variant: str, num_samples: int, search: dict[str, Distribution] | None = None
) -> optuna.samplers.BaseSampler:
    """The variant's sampler, seeded from (tune.seed, variant name); `search`: the variant's ranges (the grid's
    points; config validation made sure each has some)."""
    seed = sampler_seed(settings.seed, variant)
    if settings.sampler == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if settings.sampler == "grid":
        return TellOnlyGridSampler(grid_points(search or {}), seed=seed)
    if settings.sampler == "gp":
        # as TPE: Optuna's 10 random start-up trials would leave a small study little to fit
        return optuna.samplers.GPSampler(seed=seed, n_startup_trials=tpe_startup_trials(num_samples))
    if settings.sampler == "cmaes":
        # a choice list beside the numbers is drawn by CMA-ES's independent (random) sampler: said once, not per trial
        return optuna.samplers.CmaEsSampler(seed=seed, warn_independent_sampling=False)
    if settings.sampler == "qmc":
        with warnings.catch_warnings():  # chosen in the file: Optuna's "experimental" note is no news to its user
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return optuna.samplers.QMCSampler(
                qmc_type="sobol", scramble=True, seed=seed, warn_independent_sampling=False
            )
    return optuna.samplers.TPESampler(seed=seed, n_startup_trials=tpe_startup_trials(num_samples))


def grid_points(search: dict[str, Distribution]) -> dict[str, list[Any]]:
    """Each searched hyperparameter's grid points (SearchSpace refuses a grid sampler where one has none)."""
    points = {name: dist.grid_points for name, dist in search.items()}
    missing = [name for name, values in points.items() if values is None]
    if missing:
        raise ValueError(f"the grid sampler has no points for {', '.join(missing)}")
    return {name: values for name, values in points.items() if values is not None}


def trial_count(settings: TuneSettings, search: dict[str, Distribution]) -> int:
    """How many trials a searched variant runs: tune.num_samples, or with the grid sampler the grid's size; one
    where the search holds one configuration (each a one-value choice)."""
    if single_point(search) is not None:
        return 1
    return grid_size(search) if settings.sampler == "grid" else settings.num_samples


def objective_args(settings: TuneSettings) -> tuple[str | list[str], str | list[str]]:
    """Optuna's metric and mode: one name and direction, or (several objectives) a list of each: Optuna's TPE then
    searches for the Pareto front."""
    if not settings.multi_objective:
        return settings.primary, settings.mode
    return [o.metric for o in settings.objectives], [o.mode for o in settings.objectives]


def tpe_startup_trials(num_samples: int) -> int:
    # Optuna's default of 10 random start-up trials would make a small study pure random search.
    return max(2, min(10, num_samples // 3))


def grid_notice(settings: TuneSettings, search: Search, variant: str) -> str | None:
    """The line that says a grid study runs its grid's size, where that is not tune.num_samples."""
    if settings.sampler != "grid" or search.algorithm is None or search.num_samples == settings.num_samples:
        return None
    return (
        f"[{variant}] grid sampler: {search.num_samples} grid points, each run once "
        f"(tune.num_samples {settings.num_samples} does not apply)"
    )


def single_run_notice(space: SearchSpace, variant: str) -> str | None:
    """The line that says a variant with nothing to search runs one trial where tune.num_samples asks for more: a
    search of one configuration, or no search in a space where no variant searches (a baseline beside searched
    variants runs once, as tune.num_samples says)."""
    search, num_samples = space.variants[variant].search, space.tune.num_samples
    point, searching = single_point(search), any(v.search for v in space.variants.values())
    if num_samples == 1 or (search and point is None) or (not search and searching):
        return None
    what = "its search holds one configuration (" + ", ".join(f"{k}: {v!r}" for k, v in (point or {}).items()) + ")"
    return (
        f"[{variant}] nothing to search: {what if search else 'no variant of the space has a search section'}; "
        f"one trial, as every other would repeat it (tune.num_samples {num_samples} does not apply)"
    )


def make_scheduler(stopping: Stopping | None, rounds: int) -> TrialScheduler:
    """The scheduler the space names, on rounds (ASHA by default); None: every trial runs every round."""
    if isinstance(stopping, AshaConfig):
        return ASHAScheduler(
            time_attr=ROUND,
            max_t=rounds,
            grace_period=stopping.grace(rounds),
            reduction_factor=stopping.reduction_factor,
        )
    if isinstance(stopping, HyperbandConfig):
        return ResumableHyperBand(time_attr=ROUND, max_t=rounds, reduction_factor=stopping.reduction_factor)
    if isinstance(stopping, MedianConfig):
        return MedianStoppingRule(
            time_attr=ROUND, grace_period=stopping.grace(rounds), min_samples_required=stopping.min_samples_required
        )
    return FIFOScheduler()


@dataclass(frozen=True)
class Resumed:
    """A study `--resume` continues: the Optuna study its interrupted run wrote to (None: it ran in memory)."""

    study: str | None


def make_search(
    space: SearchSpace,
    variant_name: str,
    stamp: str,
    optuna_storage: str | None = None,
    resumed: Resumed | None = None,
    key: str | None = None,
    warm_start: Sequence[dict[str, Any]] = (),
) -> Search:
    """The variant's search. With `optuna_storage` (a SQLAlchemy URL) a searched variant's Optuna study persists
    there as `<space name>-<variant>` (`-<stamp>` appended when a fresh run finds that name taken); a resume
    reopens `resumed.study`, the one the interrupted run wrote to (None: it started in memory). `key` names the study
    in place of the variant (a study per setting: `<variant>@<setting>`). `warm_start`: configurations (fitted to
    the variant's ranges: tune/warm_start.py) the study tries first, before its sampler proposes; a resume enqueues
    none (its study, restored by Tune, already holds those it has not yet tried)."""
    settings, variant = space.tune, space.variants[variant_name]
    resuming = resumed is not None
    if not variant.search:  # deterministic: repeating it would only repeat the same run
        return Search(None, FIFOScheduler(), 1)
    num_samples = trial_count(settings, variant.search)
    if settings.scheduler.pbt is not None:  # Ray's PBT admits no searcher: its population is drawn at random
        pbt = settings.scheduler.pbt
        population = {name: tune_domain(spec) for name, spec in variant.search.items()}
        # no max_concurrent: the generator counts a paused trial as running, and the population would never fill
        generator = BasicVariantGenerator(
            points_to_evaluate=[dict(point) for point in warm_start] if warm_start and not resuming else None,
            random_state=sampler_seed(settings.seed, variant_name),
        )
        pbt_scheduler = make_pbt(pbt, variant.search, space.experiment_for(variant_name).rounds)
        return Search(generator, pbt_scheduler, num_samples, param_space=population, checkpoints_kept=pbt.interval + 2)
    sampler = make_sampler(settings, variant_name, num_samples, variant.search)
    rdb = optuna_db.open_storage(optuna_storage) if optuna_storage else None
    study = None
    if rdb is not None:  # a fresh run never joins an earlier run's study
        named = f"{space.name}-{key or variant_name}"
        study = resumed.study if resumed is not None else optuna_db.unused_study_name(rdb, named, stamp)
    metric, mode = objective_args(settings)
    algorithm = OptunaSearchOnce(
        space=optuna_space(variant.search),
        metric=metric,
        mode=mode,
        sampler=sampler,
        study_name=study,
        storage=rdb if study else None,
        # Optuna's enqueue_trial underneath; a second enqueue into a resumed study's storage would try them twice
        points_to_evaluate=[dict(point) for point in warm_start] if warm_start and not resuming else None,
    )
    if rdb is not None and study is not None:
        optuna_db.record_search(rdb, study, {"sampler": settings.sampler, "scheduler": settings.scheduler_name})
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
