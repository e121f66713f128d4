"""A variant's search: the Optuna sampler (seeded per variant) and its study's storage, and the trial scheduler;
with PBT (tune.scheduler.pbt), Ray's random population and its population-based training over rounds."""

from __future__ import annotations

import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import optuna
from ray import tune
from ray.tune.schedulers import ASHAScheduler, FIFOScheduler, PopulationBasedTraining, TrialScheduler
from ray.tune.search import BasicVariantGenerator
from ray.tune.search.optuna import OptunaSearch

from raytune_fl.config import AshaConfig, Distribution, PbtConfig, SearchSpace, TuneSettings
from raytune_fl.metrics import ROUND
from raytune_fl.runtime import optuna_storage as optuna_db
from raytune_fl.tune.space import optuna_space


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
        return isinstance(self.scheduler, ASHAScheduler)

    @property
    def pbt(self) -> bool:
        """Whether the trials' hyperparameters change between rounds (a trial runs a schedule)."""
        return isinstance(self.scheduler, PopulationBasedTraining)


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


def tune_domain(spec: Distribution) -> Any:
    """The range as Ray Tune's domain (what PBT draws and resamples from); an int range includes its high end."""
    if spec.loguniform is not None:
        return tune.loguniform(*spec.loguniform)
    if spec.uniform is not None:
        return tune.uniform(*spec.uniform)
    if spec.int is not None:
        low, high = spec.int
        return tune.randint(low, high + 1)
    return tune.choice(list(spec.choice or []))


def mutations(search: Mapping[str, Distribution]) -> dict[str, Any]:
    """PBT's hyperparam_mutations: a numeric range as its domain (perturbed by a factor, or drawn afresh), a choice
    as its list (a step to a neighbouring value, or drawn afresh)."""
    return {name: list(spec.choice) if spec.choice is not None else tune_domain(spec) for name, spec in search.items()}


def within_ranges(search: Mapping[str, Distribution]) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """PBT's custom_explore_fn: a perturbed value (x 1.2 of a range's high end) clipped back into its range, so the
    method's checks (config/space.py holds the ranges' ends to them) never refuse what PBT proposes; an int range's
    value rounded (Ray rounds only a Python int, and its draws are numpy's)."""

    def clip(config: dict[str, Any]) -> dict[str, Any]:
        clipped = dict(config)
        for name, spec in search.items():
            if name not in clipped or spec.choice is not None:
                continue
            low, high = spec.loguniform or spec.uniform or spec.int or (0, 0)
            value = min(max(float(clipped[name]), low), high)
            clipped[name] = int(round(value)) if spec.int is not None else value
        return clipped

    return clip


class RoundsPBT(PopulationBasedTraining):
    """Ray's PBT, which leaves a trial's last round alone: a perturbation there would restart the trial from a
    copied state with no round left to run, and its result would be one trial's while its checkpoint is another's."""

    def __init__(self, rounds: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.rounds = rounds

    def on_trial_result(self, tune_controller: Any, trial: Any, result: dict[str, Any]) -> str:
        if result.get(ROUND, 0) >= self.rounds:
            return TrialScheduler.CONTINUE
        return str(super().on_trial_result(tune_controller, trial, result))


def make_pbt(pbt: PbtConfig, search: Mapping[str, Distribution], rounds: int) -> PopulationBasedTraining:
    """Synchronous PBT on rounds: a trial that reaches a perturbation waits (paused, its resources freed) until the
    whole population has, so the population advances together whatever the concurrency."""
    return RoundsPBT(
        rounds,
        time_attr=ROUND,
        perturbation_interval=pbt.interval,
        hyperparam_mutations=mutations(search),
        quantile_fraction=pbt.quantile,
        resample_probability=pbt.resample_probability,
        perturbation_factors=pbt.perturbation_factors,
        custom_explore_fn=within_ranges(search),
        log_config=False,  # the schedule is in each trial's checkpoint and metrics (tune/trainable.py)
        synch=True,
    )


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
    num_samples = settings.num_samples
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
    sampler = make_sampler(settings, variant_name, num_samples)
    rdb = optuna_db.open_storage(optuna_storage) if optuna_storage else None
    study = None
    if rdb is not None:  # a fresh run never joins an earlier run's study
        named = f"{space.name}-{key or variant_name}"
        study = resumed.study if resumed is not None else optuna_db.unused_study_name(rdb, named, stamp)
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
