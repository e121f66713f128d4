"""Every MLflow record the project writes, built here from the resolved objects: pure functions, no MLflow, no torch.

A record is what a run starts with (name, tags, params, config file, description, datasets) or what it ends with
(metrics, tags, status). The stages (tune/, ablation/) build records here and hand them to the writers
(tracker.py, trials.py), which store them and never call back. The params of every run come from `trial_params`:
a tune parent logs its trials' params minus the searched names (plus the searched ranges, as `search.<name>`), so
parent, trial and ablation cell agree on every name they share.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from raytune_fl.config import (
    ExperimentConfig,
    Objective,
    ParamSchedule,
    SearchSpace,
    TrialSpec,
    VariantTrials,
    flatten,
)
from raytune_fl.data.identity import DataIdentity
from raytune_fl.metrics import BEST_PREFIX, COLLAPSED, DIVERGED
from raytune_fl.tracking.describe import ablation_description, cell_description, trial_description, variant_description
from raytune_fl.tracking.schema import (
    ABLATION_FOLDER,
    METRIC_VAL_SAMPLES,
    NO_STUDY,
    ROLE_PARENT,
    ROLE_TRIAL,
    RUN_FAILED,
    RUN_FINISHED,
    STAGE_ABLATION,
    STAGE_TUNE,
    SUMMARY_STATISTICS,
    TAG_BEST_BASIS,
    TAG_BEST_PREFIX,
    TAG_BEST_SCHEDULE,
    TAG_CELL,
    TAG_CONFIG_SOURCE_PREFIX,
    TAG_DATASET,
    TAG_EDGE_PREFIX,
    TAG_EDGES,
    TAG_GRID,
    TAG_METHOD,
    TAG_MODEL_RUN_ID,
    TAG_OBJECTIVES,
    TAG_OPTUNA_STORAGE,
    TAG_OPTUNA_STUDY,
    TAG_PARTITION,
    TAG_PARTITION_SEED,
    TAG_PARTITION_SEEDS,
    TAG_PLAN,
    TAG_ROLE,
    TAG_SAMPLER,
    TAG_SCHEDULER,
    TAG_SEARCHED,
    TAG_SEED,
    TAG_SEED_RULE,
    TAG_SEEDS,
    TAG_SEEDS_AUTO,
    TAG_SETTING,
    TAG_STAGE,
    TAG_STUDY_RUN_ID,
    TAG_STUDY_RUN_IDS,
    TAG_TUNING_SEEDS,
    TAG_VARIANT,
    TAG_VARIANTS,
    TAG_WARM_START,
    TAG_WARM_START_CONFIGS,
    TRIAL_COLLAPSED,
    TRIAL_DIVERGED,
    TRIAL_FINISHED,
    TRIAL_STOPPED_EARLY,
    WARM_START_ENQUEUED,
    encode_value,
    setting_folder,
    study_key,
)

WALL_TIME = "wall_time_s"  # every parent: the study's or ablation's wall-clock time
# how a trial that ended without an error ended, in the order every count of them is shown (an error comes last)
ENDED_STATUSES = (TRIAL_FINISHED, TRIAL_COLLAPSED, TRIAL_STOPPED_EARLY, TRIAL_DIVERGED)


def ended_status(last: Mapping[str, Any], rounds_run: int, rounds: int) -> str:
    """How a trial that ended without an error ended, from its last report (`last`, a round's flat metrics):
    diverged (it says so), stopped early (before its last round: ASHA), collapsed (its last round is at chance on
    an evaluated split: engine/chance.py's rule, the report's `collapsed` flag), else finished. The trial's run tag,
    the study's counts and the console all decide it here."""
    if last.get(DIVERGED):
        return TRIAL_DIVERGED
    if rounds_run < rounds:
        return TRIAL_STOPPED_EARLY
    return TRIAL_COLLAPSED if last.get(COLLAPSED) == 1 else TRIAL_FINISHED  # a flag: 0 or 1, never NaN


@dataclass(frozen=True)
class RunRecord:
    """How a run starts in MLflow: its name, the tags to filter by, the params to compare."""

    name: str
    tags: dict[str, str]
    params: dict[str, Any]
    rounds: int | None = None  # a trial's rounds where they differ from its study's (an ablation grid)
    datasets: tuple[DataIdentity, ...] = ()  # the data it trains on (MLflow dataset inputs)
    description: str = ""  # the run's description in the MLflow UI
    config: dict[str, Any] | None = None  # a parent's configuration, logged as config.yaml
    resume_command: str = ""  # a parent's: the command that continues it, tagged when Ctrl-C/SIGTERM stops it


@dataclass(frozen=True)
class RunEnd:
    """How a parent run ends: what it adds (metrics, tags) and its status."""

    status: str
    metrics: dict[str, float] = field(default_factory=dict)
    tags: dict[str, Any] = field(default_factory=dict)
    front: tuple[str, ...] = ()  # a study's Pareto front: the trial ids whose runs are tagged pareto_front


# ------------------------------------------------------------------------------------------------ params


def experiment_params(experiment: ExperimentConfig) -> dict[str, Any]:
    """The flattened experiment (`partition.alpha`, ...); the synthetic data's settings only where they are the
    data."""
    exclude = None if experiment.dataset == "synthetic" else {"synthetic"}
    return flatten(experiment.model_dump(mode="json", exclude=exclude))


def trial_params(trial: TrialSpec) -> dict[str, Any]:
    """A trial's params, the same in both stages: the flattened experiment, the method, every hyperparameter as
    shown (a data-derived default as its rule, e.g. "D/4")."""
    return {**experiment_params(trial.experiment), "method": trial.method, **trial.described()}


# ------------------------------------------------------------------------------------------------ the tune stage


def partition_tag(experiment: ExperimentConfig) -> str:
    part = experiment.partition
    return f"{part.kind}(alpha={part.alpha})" if part.kind == "dirichlet" else part.label


def partition_title(experiment: ExperimentConfig) -> str:
    """The title of the partition heat map a study's parent run logs."""
    return f"{experiment.dataset}: {experiment.partition.label}, {experiment.partition.clients_text} clients"


class WarmStartFacts(Protocol):
    """What a warm-started study tried first (tune/warm_start.py's WarmPoints)."""

    @property
    def configs(self) -> tuple[dict[str, Any], ...]: ...
    @property
    def run_id(self) -> str | None: ...
    def describe(self) -> str: ...


def with_warm_start(record: RunRecord, warm_start: WarmStartFacts | None) -> RunRecord:
    """A tune parent's record with its warm start's tags (where its first configurations came from); a study
    started cold as it was."""
    return replace(record, tags={**record.tags, **warm_start_tags(warm_start)})


def warm_start_tags(warm_start: WarmStartFacts | None) -> dict[str, str]:
    """A tune parent's warm start: where its first configurations came from, and those configurations (JSON)."""
    if warm_start is None or not warm_start.configs:
        return {}
    run = f" (MLflow run {warm_start.run_id})" if warm_start.run_id else ""
    return {
        TAG_WARM_START: warm_start.describe() + run,
        TAG_WARM_START_CONFIGS: encode_value(list(warm_start.configs)),
    }


@dataclass(frozen=True)
class OptunaStudy:
    """The Optuna study a variant's search persists to."""

    name: str
    storage: str | None  # its storage URL, password masked


def tune_parent(
    space: SearchSpace,
    variant_name: str,
    num_samples: int,
    datasets: Sequence[DataIdentity] = (),
    optuna: OptunaStudy | None = None,
    setting: str | None = None,
    resume_command: str = "",
) -> RunRecord:
    """A variant study's parent run (stage=tune); `setting`: the grid setting it was tuned at (tune --per-setting,
    as fields: partition.alpha=0.1), which `ablate --per-setting` finds it by; `resume_command`: what continues
    the study if it is stopped. A warm start's tags: with_warm_start."""
    variant, base = space.variants[variant_name], space.experiment_for(variant_name)
    unsearched = VariantTrials.of(space, variant_name).trial()
    params = {k: v for k, v in trial_params(unsearched).items() if k not in variant.search}
    extra: dict[str, Any] = {TAG_OPTUNA_STUDY: optuna.name, TAG_OPTUNA_STORAGE: optuna.storage} if optuna else {}
    extra |= {TAG_SETTING: setting} if setting else {}
    if variant.search:  # how its trials were proposed and stopped (a variant that searches nothing runs once)
        extra |= {TAG_SAMPLER: space.tune.sampler, TAG_SCHEDULER: space.tune.scheduler_name}
    return RunRecord(
        study_key(variant_name, setting),
        tags={
            TAG_VARIANT: variant_name,
            TAG_STAGE: STAGE_TUNE,
            TAG_METHOD: variant.method,
            TAG_DATASET: base.dataset,
            TAG_PARTITION: partition_tag(base),
            TAG_SEARCHED: ",".join(variant.search) or "(none)",
            TAG_TUNING_SEEDS: str(base.seed),  # every trial trains at it: the ablation holds it out
            **extra,
        },
        params={**params, **{f"search.{k}": v.model_dump(exclude_none=True) for k, v in variant.search.items()}},
        datasets=tuple(datasets),
        description=variant_description(space, variant_name, num_samples),
        config={
            "name": space.name,
            "base": base.model_dump(mode="json"),
            "variant": variant.model_dump(mode="json"),
            "tune": space.tune.model_dump(mode="json"),
        },
        resume_command=resume_command,
    )


def tune_trial(
    variant_name: str, trial: TrialSpec, sampled: dict[str, Any], index: int, datasets=(), enqueued: bool = False
) -> RunRecord:
    """A tune-stage trial's run, `<variant>-<index>`: `sampled` is what its searcher drew; `enqueued`: a warm
    start's configuration, tried before the sampler proposed."""
    tags = {TAG_VARIANT: variant_name, TAG_METHOD: trial.method, TAG_STAGE: STAGE_TUNE}
    if enqueued:
        tags[TAG_WARM_START] = WARM_START_ENQUEUED
    text = trial_description(variant_name, trial.method, sampled, index)
    return RunRecord(
        f"{variant_name}-{index:03d}", tags, trial_params(trial), datasets=tuple(datasets), description=text
    )


@dataclass(frozen=True)
class TuneTrials:
    """A variant's trial runs, each resolved from what its searcher drew (TrialTracker asks for them)."""

    variant: str
    trials: VariantTrials
    datasets: tuple[DataIdentity, ...] = ()
    enqueued: tuple[dict[str, Any], ...] = ()  # a warm start's configurations: the study's first trials try them

    def record(self, config: dict[str, Any], index: int) -> RunRecord:
        # the first trials take the enqueued configurations in order: a later draw of the same values is the sampler's
        enqueued = index < len(self.enqueued) and config in self.enqueued
        return tune_trial(self.variant, self.trials.trial(config), config, index, self.datasets, enqueued)


class RangeEdge(Protocol):
    """A selected value near a bound of its search range (tune/edges.py's Edge)."""

    @property
    def name(self) -> str: ...
    @property
    def side(self) -> str: ...
    def describe(self) -> str: ...


@dataclass(frozen=True)
class ParetoFront:
    """A study of several objectives: the objectives (tagged on the parent) and the trials on its front."""

    objectives: tuple[Objective, ...]
    trial_ids: tuple[str, ...] = ()


def tune_parent_end(
    best_params: Mapping[str, Any],
    best_metrics: Mapping[str, float],
    trials: Mapping[str, int],
    seed: int,
    edges: Sequence[RangeEdge] = (),
    front: ParetoFront | None = None,
    model_run_id: str | None = None,
) -> RunEnd:
    """A finished study's parent: the selected trial's metrics as best_*, the trial counts, the selected values as
    best.<name> tags, and the `edges` (values near a bound of their range) as edge.<name> tags with a one-line
    `edges` summary; FAILED when no trial gave a score. With several objectives (`front`) the objectives as a tag
    and the front's trial runs to tag; `model_run_id`: the trial run that logged the selected model."""
    objectives = {TAG_OBJECTIVES: ",".join(f"{o.metric}:{o.mode}" for o in front.objectives)} if front else {}
    if not best_metrics:
        return RunEnd(RUN_FAILED, tags=objectives)
    metrics = {
        **{f"{BEST_PREFIX}{k}": v for k, v in best_metrics.items()},
        **{f"trials_{k}": v for k, v in trials.items()},
    }
    tags: dict[str, Any] = {f"{TAG_BEST_PREFIX}{k}": v for k, v in best_params.items()}
    # the best is one trial's score at one seed: a ranking of variants needs the ablation's seeds
    tags[TAG_BEST_BASIS] = f"single trial, seed {seed}"
    tags.update({f"{TAG_EDGE_PREFIX}{edge.name}": edge.side for edge in edges})
    if edges:
        tags[TAG_EDGES] = "; ".join(edge.describe() for edge in edges)
    tags.update(objectives)
    if model_run_id is not None:
        tags[TAG_MODEL_RUN_ID] = model_run_id
    return RunEnd(RUN_FINISHED, metrics, tags, front.trial_ids if front else ())


def with_schedule(end: RunEnd, schedule: ParamSchedule | None) -> RunEnd:
    """A PBT study's end: with the selected trial's schedule as the best_schedule tag (what `ablate` replays); a
    study that selected nothing, or a constant configuration, as it was."""
    if schedule is None or end.status != RUN_FINISHED:
        return end
    return RunEnd(end.status, end.metrics, {**end.tags, TAG_BEST_SCHEDULE: schedule.to_json()}, end.front)


def tune_parent_metrics(val_samples: int | None) -> dict[str, float]:
    """What a tune parent logs however it ends, beside its wall time: the validation images best_val_acc is a
    proportion of (beside it in the runs table: its standard error's n)."""
    return {} if val_samples is None else {METRIC_VAL_SAMPLES: val_samples}


# ------------------------------------------------------------------------------------------------ the ablation


class Cell(Protocol):
    """What a cell's run is built from (ablation/plan.py's AblationCell)."""

    @property
    def variant(self) -> str: ...
    @property
    def method(self) -> str: ...
    @property
    def seed(self) -> int: ...
    @property
    def setting(self) -> str: ...
    @property
    def params(self) -> dict[str, Any]: ...
    @property
    def study_run_id(self) -> str | None: ...
    @property
    def key(self) -> str: ...
    @property
    def data_label(self) -> str: ...
    @property
    def partition_seed(self) -> int: ...
    @property
    def trial(self) -> TrialSpec: ...
    @property
    def experiment(self) -> ExperimentConfig: ...


def ablation_cell(cell: Cell, note: str, datasets: Sequence[DataIdentity] = ()) -> RunRecord:
    """An ablation cell's run, named by its key; `note` says where its configuration came from."""
    tags = {
        TAG_STAGE: STAGE_ABLATION,
        TAG_ROLE: ROLE_TRIAL,
        TAG_VARIANT: cell.variant,
        TAG_METHOD: cell.method,
        TAG_SEED: str(cell.seed),
        TAG_PARTITION_SEED: str(cell.partition_seed),  # every cell: the split it trained on, varied or not
        TAG_SETTING: cell.setting,
        TAG_CELL: cell.key,
        TAG_STUDY_RUN_ID: cell.study_run_id or NO_STUDY,
    }
    text = cell_description(cell.variant, cell.method, cell.seed, cell.data_label, cell.params, note)
    return RunRecord(
        cell.key,
        tags,
        trial_params(cell.trial),
        rounds=cell.experiment.rounds,
        datasets=tuple(datasets),
        description=text,
    )


@dataclass(frozen=True)
class CellTrials:
    """An ablation's cell runs, built ahead by cell key (a Tune trial's config names its cell)."""

    by_cell: dict[str, RunRecord]

    def record(self, config: dict[str, Any], index: int) -> RunRecord:
        return self.by_cell[config["cell"]]


class Source(Protocol):
    """Where a variant's ablated configuration came from (ablation/sources.py's VariantSource)."""

    @property
    def variant(self) -> str: ...
    @property
    def method(self) -> str: ...
    @property
    def params(self) -> dict[str, Any]: ...
    @property
    def study_run_id(self) -> str | None: ...
    @property
    def note(self) -> str: ...


@dataclass(frozen=True)
class AblationFacts:
    """What an ablation parent's record says of its plan."""

    space: SearchSpace
    fingerprint: str
    seeds: list[int]
    split_seeds: list[int]  # the partition seeds the cells train on
    partition_seeds: int  # splits per cell; 1: each setting's own
    grid: dict[str, dict[str, Any]]  # axis name -> {"field": base.<field>, "values": [...]}
    settings: list[str]
    sources: Sequence[Source]
    seed_rule: str = ""  # ablation/seeds.py's rule name; "" for a plan that does not say
    seeds_note: str = ""  # which seeds were searched and which score (SeedPlan.describe)
    tuning_seeds: Sequence[int] = ()  # the training seeds the ablated variants' studies used
    auto: str = ""  # --seeds auto: "half-width <= P points, at most M seeds, against <reference>"
    resume_command: str = ""  # what continues the ablation if it is stopped


def ablation_parent(plan: AblationFacts, datasets: Sequence[DataIdentity] = ()) -> RunRecord:
    """An ablation's parent run: the plan, where each variant's configuration came from (partition seeds only
    when the plan varies them: a parent of one split is logged as it always was)."""
    varied = plan.partition_seeds > 1
    text = ablation_description(plan.space, [s.variant for s in plan.sources], plan.seeds, plan.settings)
    if plan.seeds_note:
        text += f"\n\nSeeds: {plan.seeds_note}."
    if plan.auto:
        text += f"\n\nSeeds added in rounds (--seeds auto) until every comparison's {plan.auto}."
    if varied:
        text += (
            f"\n\nEvery (variant, seed, setting) also runs on partition seeds {', '.join(map(str, plan.split_seeds))}: "
            "the table's spread includes the split's noise."
        )
    return RunRecord(
        "ablation",
        tags={
            TAG_STAGE: STAGE_ABLATION,
            TAG_ROLE: ROLE_PARENT,
            TAG_PLAN: plan.fingerprint,
            TAG_SEEDS: ",".join(map(str, plan.seeds)),
            **(
                {TAG_SEED_RULE: plan.seed_rule, TAG_TUNING_SEEDS: ",".join(map(str, plan.tuning_seeds))}
                if plan.seed_rule
                else {}
            ),
            **({TAG_SEEDS_AUTO: plan.auto} if plan.auto else {}),
            **({TAG_PARTITION_SEEDS: ",".join(map(str, plan.split_seeds))} if varied else {}),
            TAG_GRID: json.dumps({name: axis["values"] for name, axis in plan.grid.items()}, default=str),
            TAG_VARIANTS: ",".join(s.variant for s in plan.sources),
            TAG_STUDY_RUN_IDS: json.dumps({s.variant: s.study_run_id for s in plan.sources}),
            **{f"{TAG_CONFIG_SOURCE_PREFIX}{s.variant}": s.note[:500] for s in plan.sources},
        },
        params={
            **experiment_params(plan.space.base),
            "seeds": "auto" if plan.auto else len(plan.seeds),
            **({"partition_seeds": plan.partition_seeds} if varied else {}),
        },
        datasets=tuple(datasets),
        description=text,
        config={
            "name": plan.space.name,
            "base": plan.space.base.model_dump(mode="json"),
            "grid": plan.grid,
            "seeds": plan.seeds,
            **({"partition_seeds": plan.split_seeds} if varied else {}),
            "variants": {s.variant: {"method": s.method, "params": s.params, "source": s.note} for s in plan.sources},
        },
        resume_command=plan.resume_command,
    )


def summary_metrics(summary: Any, metric: str) -> dict[str, float]:
    """An ablation parent's per-(variant, setting) metrics (`summary`: ablation/table.py's summarise):
    ablation/<variant>/<setting folder>/<metric>_<statistic> for mean, sd, n, ci_low and ci_high (the 95 %
    t-interval of the mean); MLflow drops the NaN ones (n < 2)."""
    out: dict[str, float] = {}
    for row in summary.itertuples(index=False):
        # MLflow names allow letters, digits and _-. /: a setting's '=' and ',' become setting_folder's '-' and '_'
        where = "/".join(re.sub(r"[^\w.\- ]", "_", part) for part in (str(row.variant), setting_folder(row.setting)))
        values = dict(zip(SUMMARY_STATISTICS, (row.mean, row.std, row.n, row.ci_low, row.ci_high), strict=True))
        out.update({f"{ABLATION_FOLDER}/{where}/{metric}_{name}": float(value) for name, value in values.items()})
    return out


def ablation_parent_metrics(wall_time_s: float, status_counts: Mapping[str, int]) -> dict[str, float]:
    """What an ablation parent logs however it ends: its wall time and its cells' runs by status."""
    return {WALL_TIME: wall_time_s, **{f"runs_{k}": float(v) for k, v in status_counts.items()}}


def ablation_parent_end(
    seeds: Sequence[int],
    auto: str,
    wall_time_s: float,
    status_counts: Mapping[str, int],
    summary: Any = None,
    metric: str = "",
) -> RunEnd:
    """What an ablation parent adds once its run has closed: the seeds that ran by then (--seeds auto adds some),
    --seeds auto's target (a resume may change it), its wall time and runs by status, and with the table's
    `summary` of `metric` (none when it was stopped) the per-(variant, setting) metrics. Its status is the run's own."""
    metrics = ablation_parent_metrics(wall_time_s, status_counts)
    if summary is not None:
        metrics.update(summary_metrics(summary, metric))
    tags = {TAG_SEEDS: ",".join(map(str, seeds)), **({TAG_SEEDS_AUTO: auto} if auto else {})}
    return RunEnd(RUN_FINISHED, metrics, tags)
