"""The search space: the variants (a method, its fixed values, its searched distributions), the tune settings
(objectives, scheduler, trials) and the file's whole model, SearchSpace, checked across its sections."""

from __future__ import annotations

import builtins
import math
from dataclasses import dataclass
from importlib.metadata import version
from typing import Any, Literal, get_args

from pydantic import (
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from raytune_fl.config.base import Seed, _check_file_name, _Strict, did_you_mean
from raytune_fl.config.experiment import ExperimentConfig, OptimizerConfig
from raytune_fl.metrics import (
    CLIENT_ACC_BOTTOM10,
    CLIENT_ACC_MEAN,
    CLIENT_ACC_STD,
    CLIENT_ACC_VAR,
    CLIENT_ACC_WORST,
    EPSILON,
    PERSONAL_VAL_ACC,
    ROUND_TIME_S,
    VAL_ACC,
    VAL_LOSS,
)


def personal_problem(variant: VariantConfig, experiment: ExperimentConfig) -> str:
    """Why `variant`'s clients use the global model ("" where they have models of their own): neither its method
    (under its fixed values) nor fine-tuning at evaluation personalises."""
    from raytune_fl.config.privacy import FINETUNE_STEPS
    from raytune_fl.methods import METHODS

    spec = METHODS.get(variant.method)
    if not isinstance(spec.personalises, bool) and spec.personalises.name in variant.search:
        return ""  # some of its trials personalise
    finetunes = FINETUNE_STEPS.name in variant.search or FINETUNE_STEPS.get(
        variant.fixed, experiment.personalise.finetune_steps
    )
    return "" if spec.personalises_under(variant.fixed) or finetunes else f"{variant.method} uses the global model"


def _typed(param: Any, value: Any) -> Any:
    """A text `value` as `param`'s declared number type where it reads as one ("1e-3" -> 0.001 for a float; "1e3"
    -> 1000 for an int, "1.5" not); anything else as it is, for the method's check to accept or refuse."""
    if param is None or not isinstance(value, str) or value in param.special:
        return value
    if param.choices is not None and value in param.choices:
        return value
    try:
        if param.type is float:
            return float(value)
        if param.type is int:
            try:
                return int(value)
            except ValueError:
                number = float(value)
                return int(number) if number.is_integer() else value
    except ValueError:
        pass
    return value


# an int range without grid values is a grid of every integer in it up to this many; more needs `grid:` values
GRID_MAX_INTEGERS = 32


class Distribution(_Strict):
    """One search range: exactly one of loguniform / uniform / int / choice, and for a range optional grid points."""

    loguniform: tuple[float, float] | None = Field(
        default=None, description="[low, high]: a float drawn log-uniformly (low > 0)"
    )
    uniform: tuple[float, float] | None = Field(default=None, description="[low, high]: a float drawn uniformly")
    # builtins: the field name shadows the type here
    int: tuple[builtins.int, builtins.int] | None = Field(
        default=None, description="[low, high]: an integer drawn uniformly, both ends included"
    )
    choice: list[Any] | None = Field(
        default=None, description="[a, b, ...]: one of these values (types may mix, e.g. [median, 0.5, 2.0])"
    )
    grid: list[Any] | None = Field(
        default=None,
        description="[a, b, ...] beside a range: the points tune.sampler: grid runs, each inside the range (e.g. "
        "{loguniform: [0.001, 1.0], grid: [0.001, 0.01, 0.1, 1.0]}); every other sampler ignores them and draws "
        "from the range",
    )

    @model_validator(mode="after")
    def _exactly_one(self) -> Distribution:
        given = [k for k in ("loguniform", "uniform", "int", "choice") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(f"give exactly one of loguniform, uniform, int, choice (got {given or 'none'})")
        kind = given[0]
        if kind == "choice":
            if not self.choice:
                raise ValueError("choice needs at least one value")
            if self.grid is not None:
                raise ValueError("grid: a choice list is already the grid sampler's points; give grid beside a range")
            return self
        low, high = getattr(self, kind)
        if not (math.isfinite(low) and math.isfinite(high)) or low >= high:
            raise ValueError(f"{kind} range needs low < high (got [{low}, {high}])")
        if kind == "loguniform" and low <= 0:
            raise ValueError(f"loguniform range needs low > 0 (got {low})")
        self._check_grid(kind, low, high)
        return self

    def _check_grid(self, kind: str, low: float, high: float) -> None:
        if self.grid is None:
            return
        if not self.grid:
            raise ValueError("grid: give at least one value, or leave it out")
        for value in self.grid:
            number = isinstance(value, (builtins.int, float)) and not isinstance(value, bool)
            if not number or (kind == "int" and not isinstance(value, builtins.int)):
                raise ValueError(f"grid: {value!r} is not {'an integer' if kind == 'int' else 'a number'}")
            if not low <= value <= high:
                raise ValueError(f"grid: {value!r} lies outside the {kind} range [{low}, {high}]")
        if len(set(self.grid)) != len(self.grid):
            raise ValueError(f"grid: a value is listed twice in {self.grid}")

    @property
    def kind(self) -> str:
        return next(k for k in ("loguniform", "uniform", "int", "choice") if getattr(self, k) is not None)

    @property
    def grid_points(self) -> list[Any] | None:
        """What the grid sampler runs: the choices, the grid values, or every integer of a small int range; None
        where a range has no points (a continuous range without grid values, an int range over GRID_MAX_INTEGERS)."""
        if self.choice is not None:
            return list(self.choice)
        if self.grid is not None:
            return list(self.grid) if self.int is not None else [float(value) for value in self.grid]
        if self.int is not None and self.int[1] - self.int[0] + 1 <= GRID_MAX_INTEGERS:
            return list(range(self.int[0], self.int[1] + 1))
        return None


def grid_size(search: dict[str, Distribution]) -> builtins.int:
    """How many points the grid sampler runs over a variant's search: the product of its points per hyperparameter
    (SearchSpace checks that each has points)."""
    return math.prod(len(dist.grid_points or ()) for dist in search.values())


def single_point(search: dict[str, Distribution]) -> dict[str, Any] | None:
    """The one configuration a search holds where each hyperparameter is a choice of one value ({choice: [0.1]}),
    else None: every trial would run it again."""
    if not search or any(dist.choice is None or len({repr(v) for v in dist.choice}) != 1 for dist in search.values()):
        return None
    return {name: dist.choice[0] for name, dist in search.items() if dist.choice}


# a warm start's sources besides another variant's name: the same variant's study at the previous setting of
# `tune --per-setting` (the default), or a finished study in MLflow named by its parent run
PREVIOUS_SETTING = "previous_setting"
MLFLOW_SOURCE = "mlflow:"


class WarmStart(_Strict):
    """The configurations a study tries first, before its sampler proposes: the best of an earlier study's."""

    # `from` is a Python keyword: the field is `source`, written `from` in a file (either is read)
    model_config = ConfigDict(**_Strict.model_config, populate_by_name=True)

    source: str = Field(
        default=PREVIOUS_SETTING,
        alias="from",
        min_length=1,
        description="previous_setting (the same variant's study at the previous setting of tune --per-setting; "
        "nothing without it), another variant's name (its study in this run, which must run first), or "
        "mlflow:<parent run id> (a finished study in MLflow)",
    )
    top: int = Field(
        default=2, ge=0, description="how many of the source's best finished configurations are tried first; 0: none"
    )

    @property
    def mlflow_run(self) -> str | None:
        """The MLflow parent run a `mlflow:<run id>` source names, else None."""
        return self.source.removeprefix(MLFLOW_SOURCE) if self.source.startswith(MLFLOW_SOURCE) else None

    @property
    def variant(self) -> str | None:
        """The variant a source names, else None (the previous setting, or MLflow)."""
        return None if self.source == PREVIOUS_SETTING or self.mlflow_run is not None else self.source

    @field_validator("source")
    @classmethod
    def _run_id_given(cls, value: str) -> str:
        if value.startswith(MLFLOW_SOURCE) and not value.removeprefix(MLFLOW_SOURCE).strip():
            raise ValueError("mlflow: needs the study's parent run id, e.g. mlflow:3f2a... (the MLflow UI shows it)")
        return value


class VariantConfig(_Strict):
    """An ablation variant: a method, the hyperparameters it fixes, the ones it searches."""

    method: str = Field(description="the method's registered name, e.g. fedavg, fedprox, univarfl")
    fixed: dict[str, Any] = Field(
        default={},
        description="hyperparameters held at a value (a zero weight switches a term off); the rest: defaults",
    )
    search: dict[str, Distribution] = Field(
        default={}, description="hyperparameters the study searches, each with its range; none: one trial"
    )
    # where an official code fixes its own (FedLD's: momentum 0.5, weight decay 5e-4)
    optimizer: OptimizerConfig | None = Field(
        default=None,
        description="the local optimiser this variant trains with instead of base.optimizer, in both stages; "
        "unset = base.optimizer",
    )
    warm_start: WarmStart | None = Field(
        default=None,
        description="this variant's own warm start in place of tune.warm_start (e.g. {from: fedavg, top: 3}); "
        "unset = tune.warm_start",
    )

    @model_validator(mode="before")
    @classmethod
    def _typed_values(cls, data: Any) -> Any:
        """Values in `fixed` and in a search's choices (and int ranges) as the hyperparameter's declared type: YAML
        1.1 reads 1e-3 as text, which base's float fields and --grid take as 0.001, so these do too."""
        if not isinstance(data, dict) or not isinstance(data.get("method"), str):
            return data
        from raytune_fl.methods import METHODS

        if data["method"] not in METHODS:
            return data  # said by _known_hyperparameters
        from raytune_fl.config.privacy import variant_spec

        params = variant_spec(METHODS.get(data["method"])).params
        data = dict(data)
        if isinstance(data.get("fixed"), dict):
            data["fixed"] = {name: _typed(params.get(name), value) for name, value in data["fixed"].items()}
        if isinstance(data.get("search"), dict):
            search = {}
            for name, dist in data["search"].items():
                if isinstance(dist, dict):
                    dist = {
                        kind: [_typed(params.get(name), v) for v in values]
                        if kind in ("choice", "int", "grid") and isinstance(values, (list, tuple))
                        else values
                        for kind, values in dist.items()
                    }
                search[name] = dist
            data["search"] = search
        return data

    @model_validator(mode="after")
    def _known_hyperparameters(self) -> VariantConfig:
        from raytune_fl.methods import METHODS

        if self.method not in METHODS:
            raise ValueError(
                f"method: unknown method {self.method!r}; {did_you_mean(self.method, METHODS)}"
                f"known: {', '.join(METHODS)}"
            )
        from raytune_fl.config.privacy import variant_spec

        spec = variant_spec(METHODS.get(self.method))  # privacy.clip_norm and .noise_multiplier too
        for section in ("fixed", "search"):
            for name in getattr(self, section):
                try:
                    spec.check_names([name])
                except ValueError as error:
                    hint = did_you_mean(name, spec.params).removesuffix(" ")
                    raise ValueError(f"{section}.{name}: {error}" + (f"; {hint}" if hint else "")) from None
        if both := sorted(set(self.fixed) & set(self.search)):
            raise ValueError(f"search.{both[0]}: both fixed and searched; keep one")
        try:  # bad fixed values (a typo in `fidelity`, a negative weight) fail here, not in a trial
            spec.resolve(self.fixed)
        except ValueError as error:
            raise ValueError(f"fixed: {error}") from None
        for name, dist in self.search.items():
            param = spec.params[name]
            if dist.kind in ("loguniform", "uniform") and param.type is not float:
                raise ValueError(
                    f"search.{name}: a {dist.kind} range draws floats; {name} must be {param.allowed()}"
                    + (" (search it with int)" if param.type is int else " (search it with choice)")
                )
            # a range's ends (and every choice) must be allowed: the declared bounds are an interval, so the
            # ends stand for the whole range a trial may draw from
            for kind in (dist.kind, "grid"):
                for value in getattr(dist, kind) or ():  # (low, high), the choices, or the grid points
                    try:
                        spec.check(name, value)
                    except ValueError as error:
                        raise ValueError(f"search.{name}: {kind} value {value!r} is not allowed: {error}") from None
        return self


def _one_noise_setting(name: str, variant: VariantConfig, privacy: Any) -> None:
    """A variant's noise multiplier and a target epsilon (its own or base's) are one setting too many: the target
    derives the noise."""
    sections = ("fixed", "search")
    noise = next((f"variants.{name}.{s}.privacy.noise_multiplier" for s in sections
                  if "privacy.noise_multiplier" in getattr(variant, s)), None)  # fmt: skip
    target = next((f"variants.{name}.{s}.privacy.target_epsilon" for s in sections
                   if "privacy.target_epsilon" in getattr(variant, s)), None)  # fmt: skip
    if noise and (target or privacy.target_epsilon is not None):
        whose = "the variant's" if target else "base.privacy's"
        raise ValueError(f"{noise}: {whose} target_epsilon derives the noise from the budget; set one of them")
    if target and privacy.noise_multiplier is not None:
        raise ValueError(f"{target}: base.privacy.noise_multiplier is set, and a target derives the noise; unset one")


def _target_reachable(name: str, experiment: ExperimentConfig, variant: VariantConfig) -> None:
    """Central DP's target epsilon (base's, or the variant's fixed one) is reachable over the planned rounds."""
    from raytune_fl.config.privacy import split_settings, with_settings
    from raytune_fl.privacy.accountant import UnreachableEpsilon, noise_for_epsilon

    privacy = with_settings(experiment, split_settings(variant.fixed)[0]).privacy
    if privacy is None or privacy.mechanism != "central" or privacy.target_epsilon is None:
        return
    try:
        noise_for_epsilon(privacy.target_epsilon, experiment.participation, experiment.rounds, privacy.delta,
                          privacy.accountant)  # fmt: skip
    except UnreachableEpsilon as error:
        field = "privacy.target_epsilon" if "privacy.target_epsilon" in variant.fixed else "base.privacy.target_epsilon"
        where = f"variants.{name}.fixed.{field}" if field.startswith("privacy.") else field
        raise ValueError(f"{where}: out of reach, {error}; raise the target or plan fewer rounds") from None


def late_grace(given: int | None, rounds: int) -> int:
    """The grace period a run of `rounds` rounds gets: the given one (at most `rounds`), else 80 % of them."""
    return min(given or (4 * rounds + 4) // 5, rounds)  # ceil(0.8 rounds) in integers


class AshaConfig(_Strict):
    # Early FL curves cross: on the benchmark workload (docs/explanation/workload.md; UniVarFL, 10 rounds) val_acc
    # at rounds 2-5 ranks 50 grid runs against their final order (Spearman -0.46 to -0.04), at round 8 with it
    # (0.60): benchmarks/search.py's "ASHA's bet"
    grace_period: int | None = Field(
        default=None,
        ge=1,
        description="rounds before a trial may be stopped early; unset = 80 % of the rounds, rounded up",
    )
    reduction_factor: float = Field(
        default=2.0, gt=1, description="ASHA's reduction factor: about 1/reduction_factor of the trials pass each rung"
    )

    def grace(self, rounds: int) -> int:
        return late_grace(self.grace_period, rounds)


class PbtConfig(_Strict):
    """Population-based training over rounds: every `interval` rounds the worse trials take a better trial's state
    (weights, server and client state) and perturb its hyperparameters (tune/pbt.py)."""

    # 2: a perturbation needs a round or more of the new values to be judged, and a 10-round study still gets 4
    interval: int = Field(default=2, ge=1, description="rounds between perturbations (below base.rounds)")
    # Ray's default and the PBT paper's: the bottom quarter copies the top quarter
    quantile: float = Field(
        default=0.25, gt=0, le=0.5, description="the share of trials that copy a better one, and that are copied"
    )
    # Ray's default: most steps stay near the copied values (x 0.8 or x 1.2), one in four draws afresh
    resample_probability: float = Field(
        default=0.25, ge=0, le=1, description="the chance a perturbed value is drawn afresh from its range"
    )
    # Ray's default factors: a step of 20 % either way
    perturbation_factors: tuple[float, float] = Field(
        default=(1.2, 0.8), description="what a numeric value is multiplied by (one at random), kept in its range"
    )
    # perturb: the PBT paper's random steps, which need no model and work on choices too
    explore: Literal["perturb", "bandit"] = Field(
        default="perturb",
        description="how a copying trial picks its new values: perturb (PBT: a factor step or a fresh draw) or "
        "bandit (PB2: a time-varying GP bandit fitted to the population's reward changes picks them within the "
        "ranges; numeric ranges only, and resample_probability and perturbation_factors do not apply)",
    )

    @field_validator("perturbation_factors")
    @classmethod
    def _positive_factors(cls, value: tuple[float, float]) -> tuple[float, float]:
        if min(value) <= 0:
            raise ValueError(f"factors must be > 0, or a value could leave its range's sign (got {list(value)})")
        return value

    @model_validator(mode="after")
    def _bandit_takes_no_steps(self) -> PbtConfig:
        """PB2 picks values by its model: a step factor or a resampling chance set beside it would be ignored."""
        ignored = sorted({"perturbation_factors", "resample_probability"} & self.model_fields_set)
        if self.explore == "bandit" and ignored:
            raise ValueError(
                f"{ignored[0]}: not used by PB2 (explore bandit), which picks the new values by its GP bandit, "
                f"not random steps; remove {' and '.join(ignored)}, or set explore to perturb"
            )
        return self

    @property
    def shown(self) -> str:
        """PBT or PB2, as the summary and the run's description name it."""
        return "PB2" if self.explore == "bandit" else "PBT"


class HyperbandConfig(_Strict):
    reduction_factor: float = Field(
        default=3.0,
        gt=1,
        description="Hyperband's reduction factor (eta): each bracket keeps about 1/reduction_factor of its trials at "
        "each halving; max_t is base.rounds",
    )


class MedianConfig(_Strict):
    # the same late default as ASHA's: early FL curves cross (AshaConfig)
    grace_period: int | None = Field(
        default=None,
        ge=1,
        description="rounds before a trial may be stopped; unset = 80 % of the rounds, rounded up",
    )
    min_samples_required: int = Field(
        default=3, ge=1, description="trials that must have reached a round before the median there stops any"
    )

    def grace(self, rounds: int) -> int:
        return late_grace(self.grace_period, rounds)


# the schedulers a file may name, in SchedulerConfig's field order; asha is the one in force when none is named
SCHEDULERS = ("asha", "hyperband", "median", "pbt")
Stopping = AshaConfig | HyperbandConfig | MedianConfig


class SchedulerConfig(_Strict):
    """At most one trial scheduler; ASHA when the file names none."""

    asha: AshaConfig | None = Field(
        default=AshaConfig(),
        description="ASHA early stopping ({} = its defaults); null turns early stopping off; the default when no "
        "other scheduler is named",
    )
    hyperband: HyperbandConfig | None = Field(
        default=None,
        description="Ray Tune's synchronous Hyperband on rounds ({} = its defaults), in place of ASHA: it pauses "
        "trials at each rung and resumes the promoted ones from their checkpoints",
    )
    median: MedianConfig | None = Field(
        default=None,
        description="the median stopping rule on rounds ({} = its defaults), in place of ASHA: a trial below the "
        "median of the others' running averages at the same round stops",
    )
    pbt: PbtConfig | None = Field(
        default=None,
        description="population-based training over rounds ({} = its defaults) in place of ASHA: the searched "
        "hyperparameters change between rounds, and the selection is a schedule (unset: none)",
    )

    @model_validator(mode="before")
    @classmethod
    def _named_replaces_asha(cls, data: Any) -> Any:
        """`{hyperband: {}}` means Hyperband alone: the default ASHA gives way to a scheduler the file names."""
        if isinstance(data, dict) and "asha" not in data and any(data.get(k) is not None for k in SCHEDULERS[1:]):
            return {**data, "asha": None}
        return data

    @model_validator(mode="after")
    def _at_most_one(self) -> SchedulerConfig:
        named = [name for name in SCHEDULERS if getattr(self, name) is not None]
        if len(named) > 1:
            raise ValueError(
                f"{named[1]}: give at most one scheduler (got {', '.join(named)}): one scheduler at a time; drop "
                "the others"
            )
        return self

    @property
    def name(self) -> str | None:
        """The scheduler in force (None: every trial runs every round)."""
        return next((name for name in SCHEDULERS if getattr(self, name) is not None), None)

    @property
    def chosen(self) -> Stopping | None:
        """The early-stopping scheduler in force (PBT stops nothing: None)."""
        chosen = getattr(self, self.name) if self.name else None
        return None if isinstance(chosen, PbtConfig) else chosen


# what a study may select on: validation scores and the spread over clients (the test set never steers tuning),
# each with the direction it improves in; a list of several makes the search multi-objective
OBJECTIVES: dict[str, str] = {
    VAL_ACC: "max",
    VAL_LOSS: "min",
    CLIENT_ACC_MEAN: "max",
    CLIENT_ACC_WORST: "max",
    CLIENT_ACC_BOTTOM10: "max",
    CLIENT_ACC_STD: "min",
    CLIENT_ACC_VAR: "min",
    ROUND_TIME_S: "min",
    EPSILON: "min",  # base.privacy: the budget spent (accuracy against it: the privacy-utility front)
    # methods that personalise: each client's own model on its validation part (what a personalised method optimises)
    PERSONAL_VAL_ACC: "max",
}
Mode = Literal["max", "min"]
Sampler = Literal["tpe", "random", "grid", "gp", "cmaes", "qmc"]


def single_objective_samplers() -> tuple[str, ...]:
    """The samplers the installed Optuna cannot use with several objectives: CMA-ES in every release, the GP sampler
    before Optuna 4.4 (pyproject.toml admits 4.0)."""
    major, minor = (int(part) for part in version("optuna").split(".")[:2])
    return ("cmaes",) if (major, minor) >= (4, 4) else ("cmaes", "gp")


@dataclass(frozen=True)
class Objective:
    """One metric a study optimises and its direction."""

    metric: str
    mode: str

    def __str__(self) -> str:
        return f"{self.metric} ({self.mode})"


def _objective_name(name: Any) -> str:
    if not isinstance(name, str) or name not in OBJECTIVES:
        test = " (the test set never steers tuning: select on validation)" if str(name).startswith("test_") else ""
        hint = did_you_mean(str(name), OBJECTIVES)
        raise ValueError(f"unknown metric {name!r}{test}; {hint}choose from {', '.join(OBJECTIVES)}")
    return name


class TuneSettings(_Strict):
    num_samples: int = Field(
        default=8, ge=1, description="trials per searched variant (a variant that searches nothing: one)"
    )
    max_concurrent: int = Field(
        default=1, ge=1, description="trials at once; on 2 cores one trial already fills the machine"
    )
    metric: str | list[str | dict[str, Mode]] = Field(
        default=VAL_ACC,
        description="what selects: a metric (val_acc maximised, val_loss minimised, client_acc_worst, ...: "
        "validation only, the test set never steers tuning), or a list of several with their directions, e.g. "
        "[val_acc: max, client_acc_worst: max], searched by Optuna's multi-objective TPE: the summary shows each "
        "variant's Pareto front and the first metric selects the configuration the ablation runs",
    )
    against_sense: list[str] = Field(
        default=[],
        description="metrics of tune.metric given the direction opposite to their own on purpose, e.g. [val_loss] "
        "beside [val_loss: max]; any other metric given against its sense (val_loss: max, client_acc_var: max) is "
        "refused as a slip",
    )
    scheduler: SchedulerConfig = Field(
        default=SchedulerConfig(),
        description="the trial scheduler: ASHA, Hyperband, median stopping, PBT, or none (several objectives: none, "
        "as each ranks trials on one number)",
    )
    sampler: Sampler = Field(
        default="tpe",
        description="Optuna's sampler: tpe; random (the baseline a search strategy must beat); grid (every point of "
        "the choices and grid: values once, as many trials as the grid has, whatever num_samples says); gp "
        "(Gaussian-process Bayesian optimisation: few trials, continuous ranges); cmaes (CMA-ES: continuous ranges, "
        "many trials, one objective); qmc (scrambled Sobol points: a space-filling baseline)",
    )
    seed: Seed = Field(
        default=0, description="the sampler's seed; each variant's sampler draws from (seed, variant name)"
    )
    warm_start: WarmStart | None = Field(
        default=WarmStart(),
        description="configurations each searched variant's study tries first: the top k of a source study "
        "({from: <variant> | previous_setting | mlflow:<run id>, top: k}); the default, the previous setting's 2 best "
        "under tune --per-setting; null turns it off",
    )

    @field_validator("metric")
    @classmethod
    def _known_metrics(cls, value: str | list[str | dict[str, str]]) -> str | list[str | dict[str, str]]:
        if isinstance(value, str):
            _objective_name(value)
            return value
        if not value:
            raise ValueError("an empty list: name at least one metric, e.g. [val_acc: max, client_acc_worst: max]")
        seen = set()
        for item in value:
            if isinstance(item, dict) and len(item) != 1:
                raise ValueError(f"{item!r}: one metric per entry, as `name: max` or `name: min`")
            name = next(iter(item)) if isinstance(item, dict) else item
            if _objective_name(name) in seen:
                raise ValueError(f"{name!r} is listed twice")
            seen.add(name)
        return value

    @model_validator(mode="after")
    def _directions_follow_the_metrics(self) -> TuneSettings:
        """Each metric improves one way (OBJECTIVES): `val_loss: max` would select the worst configuration, so a
        contrary direction is a slip unless against_sense names the metric."""
        contrary = [o for o in self.objectives if o.mode != OBJECTIVES[o.metric]]
        for name in self.against_sense:
            if _objective_name(name) not in {o.metric for o in contrary}:
                raise ValueError(
                    f"against_sense: {name!r} is not given against its sense in tune.metric (its sense: "
                    f"{OBJECTIVES[name]}); drop it from against_sense"
                )
        slip = next((o for o in contrary if o.metric not in self.against_sense), None)
        if slip is None:
            return self
        sense = OBJECTIVES[slip.metric]
        verb, way = ("maximises", "falls") if slip.mode == "max" else ("minimises", "rises")
        raise ValueError(
            f"metric: [{slip.metric}: {slip.mode}] {verb} a metric that improves as it {way} (its sense: {sense}); "
            f"write {slip.metric}: {sense}, or add tune.against_sense: [{slip.metric}] to {slip.mode}imise it on "
            "purpose"
        )

    @model_validator(mode="after")
    def _one_number_for_asha(self) -> TuneSettings:
        """A scheduler the file names ranks trials on one number; the default ASHA gives way to several objectives."""
        name = self.scheduler.name
        # PBT's own check says why it needs one number (_pbt_needs_a_population)
        if not self.multi_objective or name in (None, "pbt") or name not in self.scheduler.model_fields_set:
            return self
        shown = {"asha": "ASHA", "hyperband": "Hyperband", "median": "the median stopping rule"}[name]
        raise ValueError(
            f"scheduler.{name}: {shown} stops trials by one number, and tune.metric lists {len(self.objectives)} "
            f"(a trial it cut may be on the Pareto front); set scheduler: {{{name}: null}} or select on one metric"
        )

    @model_validator(mode="after")
    def _sampler_takes_the_objectives(self) -> TuneSettings:
        # Optuna's CmaEsSampler raises on a multi-objective study (its GPSampler too before 4.4)
        single = single_objective_samplers()
        if self.multi_objective and self.sampler in single:
            others = ", ".join(s for s in get_args(Sampler) if s not in single)
            raise ValueError(
                f"sampler: {self.sampler} optimises one objective, and tune.metric lists {len(self.objectives)}; "
                f"choose another sampler ({others}) or select on one metric"
            )
        return self

    @model_validator(mode="after")
    def _pbt_needs_a_population(self) -> TuneSettings:
        pbt = self.scheduler.pbt
        if pbt is None:
            return self
        if self.multi_objective:
            raise ValueError(
                f"scheduler.pbt: PBT ranks trials by one number, and tune.metric lists {len(self.objectives)}; "
                "select on one metric, or drop pbt"
            )
        if self.num_samples < 2:
            raise ValueError(
                f"scheduler.pbt: a population of num_samples {self.num_samples} has no better trial to copy; "
                "set num_samples >= 2 (4 or more: the top and bottom quarters are then trials apart)"
            )
        if "sampler" in self.model_fields_set and self.sampler != "random":
            raise ValueError(
                f"scheduler.pbt: Ray's PBT draws its first population at random and admits no searcher, so "
                f"sampler {self.sampler!r} would not be used; drop tune.sampler (or set it to random)"
            )
        return self

    @property
    def objectives(self) -> tuple[Objective, ...]:
        """What the study optimises, in the file's order; the first selects the configuration the ablation runs."""
        items = [self.metric] if isinstance(self.metric, str) else self.metric
        pairs = [next(iter(item.items())) if isinstance(item, dict) else (item, OBJECTIVES[item]) for item in items]
        return tuple(Objective(name, mode) for name, mode in pairs)

    @property
    def multi_objective(self) -> bool:
        return len(self.objectives) > 1

    @property
    def primary(self) -> str:
        """The metric that selects each variant's configuration (the first objective)."""
        return self.objectives[0].metric

    @property
    def mode(self) -> str:
        return self.objectives[0].mode

    @property
    def early_stopping(self) -> Stopping | None:
        """The scheduler in force's settings, or None: off in the file, or several objectives (the default scheduler
        gives way)."""
        return None if self.multi_objective else self.scheduler.chosen

    @property
    def scheduler_name(self) -> str:
        """The scheduler in force by its field name (asha, hyperband, median, pbt), or none."""
        if self.scheduler.pbt is not None:
            return "pbt"
        return "none" if self.early_stopping is None or self.scheduler.name is None else self.scheduler.name


class SearchSpace(_Strict):
    """A search-space file: a base experiment, ablation variants, tune settings."""

    name: str = Field(min_length=1, description="the study's name: the MLflow experiment, reports/<name>/")
    # imported by raytune_fl.plugins before the rest of the file is checked, and in every Ray worker
    plugins: list[str] = Field(
        default=[],
        description="modules that register your datasets, models and methods (importable names); --plugin adds to them",
    )
    # a factory: an instance here would be validated (its names looked up, torch imported) when this module loads
    base: ExperimentConfig = Field(
        default_factory=ExperimentConfig, description="the federated experiment every variant shares"
    )
    variants: dict[str, VariantConfig] = Field(
        min_length=1,
        description="the ablation variants by name (letters, digits, '_' and '-'): one study each",
    )
    tune: TuneSettings = Field(default=TuneSettings(), description="the search: trials, concurrency, metric, scheduler")

    def experiment_for(self, variant: str) -> ExperimentConfig:
        """The experiment a variant's runs use: base, with the variant's own optimiser where it names one."""
        optimizer = self.variants[variant].optimizer
        return self.base if optimizer is None else self.base.model_copy(update={"optimizer": optimizer})

    @model_validator(mode="before")
    @classmethod
    def _import_plugins(cls, data: Any, info: ValidationInfo) -> Any:
        """The plugins first: the names they register are then known to the checks of every other field. A plugin
        beside the search-space file is found there (load_space's context)."""
        plugins = data.get("plugins") if isinstance(data, dict) else None
        if plugins is None:
            plugins = []
        if not isinstance(plugins, list):
            raise ValueError(f"plugins: a list of module names, e.g. [my_lab.fl_ext] (got {plugins!r:.80})")
        from raytune_fl.plugins import PluginError, load_plugins

        try:
            load_plugins(plugins, beside=(info.context or {}).get("folder"))
        except PluginError as error:
            raise ValueError(f"plugins: {error}") from None
        return data

    @field_validator("name")
    @classmethod
    def _space_name(cls, value: str) -> str:
        # it names <storage>/<name>.study.json and reports/<name>/: "../a/b" would write outside them
        try:
            _check_file_name("the space's name", value)
        except ValueError as error:
            raise ValueError(f"{error} (it names the MLflow experiment and files under --storage)") from None
        return value

    @field_validator("variants")
    @classmethod
    def _variant_names(cls, value: dict[str, VariantConfig]) -> dict[str, VariantConfig]:
        for name in value:
            _check_file_name("variant name", name)
        return value

    @model_validator(mode="after")
    def _objectives_are_measured(self) -> SearchSpace:
        if EPSILON in (o.metric for o in self.tune.objectives) and self.base.privacy is None:
            raise ValueError(f"tune.metric: {EPSILON} is measured under base.privacy, which is unset; set it")
        spread = [o.metric for o in self.tune.objectives if o.metric.startswith("client_acc_")]
        if spread and not self.base.diagnostics.client_accuracy:
            raise ValueError(
                f"tune.metric: {spread[0]} is measured by base.diagnostics.client_accuracy, which is off; turn it on"
            )
        return self

    @model_validator(mode="after")
    def _personal_scores_are_measured(self) -> SearchSpace:
        """tune.metric: personal_val_acc where some variant's clients use models of their own. A variant whose clients
        use the global model reports it too (its val_acc: the model each client uses), so that one study tunes a
        table's personalised and global rows on one metric; a space of global variants alone is a mistake."""
        if PERSONAL_VAL_ACC not in (o.metric for o in self.tune.objectives):
            return self
        problems = {name: personal_problem(v, self.experiment_for(name)) for name, v in self.variants.items()}
        if all(problems.values()):
            said = "; ".join(f"{name}: {why}" for name, why in problems.items())
            raise ValueError(
                f"tune.metric: {PERSONAL_VAL_ACC} scores the model each client uses, and no variant personalises "
                f"({said}), so it is their {VAL_ACC}: tune on {VAL_ACC}, or fine-tune at evaluation "
                "(base.personalise.finetune_steps, or personalise.finetune_steps in a variant's fixed)"
            )
        return self

    def warm_start_for(self, variant: str) -> tuple[WarmStart | None, str]:
        """The warm start a variant's study takes (its own, else tune's; None or top 0: none), and the field that
        says so (what a refusal names)."""
        own = self.variants[variant].warm_start
        if own is not None:
            return (own if own.top else None), f"variants.{variant}.warm_start"
        shared = self.tune.warm_start
        return (shared if shared is not None and shared.top else None), "tune.warm_start"

    @model_validator(mode="after")
    def _warm_start_sources_fit(self) -> SearchSpace:
        """A variant named as a warm start's source exists, is not the variant itself, and searches the same
        hyperparameters (its values are checked against this variant's ranges when its study has run)."""
        for name, variant in self.variants.items():
            warm, field = self.warm_start_for(name)
            source = warm.variant if warm is not None else None
            if source is None or not variant.search:
                continue
            if source not in self.variants:
                hint = did_you_mean(source, self.variants)
                raise ValueError(
                    f"{field}.from: {source!r} is no variant of the file, nor {PREVIOUS_SETTING} or "
                    f"{MLFLOW_SOURCE}<run id>; {hint}variants: {', '.join(self.variants)}"
                )
            if source == name:
                if field == "tune.warm_start":
                    continue  # the shared source's own study starts cold
                raise ValueError(f"{field}.from: {name!r} cannot warm-start from itself; name an earlier variant")
            theirs, ours = sorted(self.variants[source].search), sorted(variant.search)
            if theirs != ours:
                raise ValueError(
                    f"{field}.from: variant {source!r} searches {', '.join(theirs) or 'nothing'}, {name!r} searches "
                    f"{', '.join(ours)}: its configurations do not fit; warm-start from a variant searching the same "
                    "hyperparameters"
                )
        return self

    @model_validator(mode="after")
    def _pbt_fits_the_rounds(self) -> SearchSpace:
        pbt = self.tune.scheduler.pbt
        if pbt is None:
            return self
        for name, variant in self.variants.items():
            experiment = self.experiment_for(name)
            if variant.search and pbt.interval >= experiment.rounds:
                raise ValueError(
                    f"tune.scheduler.pbt.interval: {pbt.interval} rounds between perturbations, and variant {name!r} "
                    f"runs {experiment.rounds}: nothing would be perturbed; set an interval below the rounds"
                )
        if pbt.explore == "bandit":  # PB2's GP reads numbers: a choice has no bounds to fit
            for name, variant in self.variants.items():
                if choices := [k for k, spec in variant.search.items() if spec.choice is not None]:
                    raise ValueError(
                        f"tune.scheduler.pbt.explore: bandit (PB2) fits a GP over numeric ranges, and variant {name!r} "
                        f"searches {', '.join(choices)} as a choice; use explore: perturb, or a numeric range"
                    )
        every = self.base.checkpoint_every
        if every == 0 or pbt.interval % every:
            raise ValueError(
                f"tune.scheduler.pbt.interval: a trial is copied from its checkpoint at every perturbation, and "
                f"base.checkpoint_every {every} does not checkpoint every {pbt.interval} rounds; set checkpoint_every "
                "to a divisor of the interval (1 does)"
            )
        return self

    @model_validator(mode="after")
    def _sampler_serves_every_variant(self) -> SearchSpace:
        """Before Ray: the grid sampler needs points for every searched hyperparameter, and CMA-ES a number to
        move (on choices alone it would only fall back to random sampling)."""
        sampler = self.tune.sampler
        for name, variant in self.variants.items():
            if sampler == "grid":
                for param, dist in variant.search.items():
                    if dist.grid_points is None:
                        low, high = getattr(dist, dist.kind)
                        why = (
                            f"more than {GRID_MAX_INTEGERS} integers"
                            if dist.kind == "int"
                            else "a continuous range without grid: values"
                        )
                        raise ValueError(
                            f"tune.sampler: grid needs points for every searched hyperparameter; variant {name!r} "
                            f"searches {param} over {why}; give them, e.g. {param}: {{{dist.kind}: [{low}, {high}], "
                            f"grid: [...]}}, or search it with choice"
                        )
            if sampler == "cmaes" and variant.search and all(d.kind == "choice" for d in variant.search.values()):
                raise ValueError(
                    f"tune.sampler: cmaes moves numbers, and variant {name!r} searches only choice lists "
                    f"({', '.join(variant.search)}); use tpe, random or grid for it"
                )
        return self

    @model_validator(mode="after")
    def _privacy_fits(self) -> SearchSpace:
        """base.privacy against each variant, before Ray: its privacy settings need the section, a searched noise
        excludes a target epsilon (which derives it), the method's server must read only the private mean (central),
        and a central target epsilon must be reachable over the planned rounds."""
        from raytune_fl.config.local_dp import local_dp_problem
        from raytune_fl.config.privacy import PRIVACY_PARAMS
        from raytune_fl.methods import METHODS

        privacy = self.base.privacy
        for name, variant in self.variants.items():
            for section in ("fixed", "search"):
                named = [k for k in getattr(variant, section) if k in PRIVACY_PARAMS]
                if named and privacy is None:
                    raise ValueError(
                        f"variants.{name}.{section}.{named[0]}: base.privacy is unset; set it (e.g. privacy: "
                        "{mechanism: central}) to fix or search its settings per variant"
                    )
            if privacy is not None:
                _one_noise_setting(name, variant, privacy)
            spec = METHODS.get(variant.method)
            problem = local_dp_problem(self.experiment_for(name), spec)
            if problem:
                raise ValueError(f"{problem} (variant {name!r})")
            why = spec.central_privacy
            if privacy is not None and privacy.mechanism == "central" and why:
                raise ValueError(
                    f"base.privacy.mechanism: central DP-FedAvg's server sees only the noisy mean of the clipped "
                    f"updates, and variant {name!r} ({variant.method}) cannot run on it: {why}; drop the variant or "
                    "use mechanism: local"
                )
        for name, variant in self.variants.items():
            _target_reachable(name, self.experiment_for(name), variant)
        return self

    @model_validator(mode="after")
    def _asynchronous_has_no_deadline(self) -> SearchSpace:
        from raytune_fl.methods import METHODS

        if self.base.system.deadline is None:
            return self
        for name, variant in self.variants.items():
            if METHODS.get(variant.method).asynchronous:  # the spec says so: nothing built, no torch imported
                raise ValueError(
                    f"base.system.deadline: variant {name!r} uses FedBuff, which has no round deadline "
                    "(late updates are applied stale, their staleness recorded); unset the deadline"
                )
        return self
