"""The ablation: each variant's best configuration re-run over seeds x settings, as one grid of Tune trials.

A cell is one (variant, seed, setting) run. Every cell of an ablation shares the base experiment of the
search-space file, changed only by its setting (e.g. alpha=0.01, rho=0.5) and its training seed. With
`--partition-seeds N` (N > 1) each of those also runs on N splits, base.partition.seed + 0..N-1, so the table's
spread includes the partition's noise; a cell is then a (variant, seed, split, setting) run.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from dataclasses import dataclass, field, replace
from typing import Any

import yaml

from raytune_fl.ablation.seeds import AUTO_START, WITH_TUNING, SeedPlan
from raytune_fl.config import ConfigError, ExperimentConfig, OptimizerConfig, SearchSpace, TrialSpec, override
from raytune_fl.methods import METHODS
from raytune_fl.tracking.schema import (
    SETTING_DEFAULT,
)
from raytune_fl.tracking.store import StudyRecord, latest_study

# --grid short names -> field of `base`; any other dotted field of `base` (e.g. optimizer.momentum) works as well
GRID_KEYS: dict[str, str] = {
    "alpha": "partition.alpha",  # Dirichlet concentration: the label-shift setting of the papers
    "rho": "participation",  # fraction of clients sampled per round
    "clients": "partition.clients",  # not-a-metric: the grid key of base.partition.clients
    "local_epochs": "local_epochs",
    "rounds": "rounds",
    "lr": "optimizer.lr",
    "batch_size": "batch_size",
    "dropout": "system.dropout",
}
# one placement group serves every cell, and seeds come from --seeds
_NOT_GRIDDABLE = {"resources": "every cell shares one trial size", "seed": "use --seeds"}
NO_SETTING = SETTING_DEFAULT  # the setting label when there is no grid


@dataclass(frozen=True)
class GridAxis:
    name: str  # as the user wrote it: the column header and the run names use it
    field: str  # the field of `base` it sets
    values: tuple[Any, ...]


def parse_grid(items: list[str], option: str = "--grid") -> list[GridAxis]:
    """`["alpha=0.01,1.0", "rho=0.5"]` -> axes; values are YAML scalars. Fields are checked in `settings()`;
    `option` is what the errors name."""
    axes: list[GridAxis] = []
    for item in items:
        name, sep, text = item.partition("=")
        name = name.strip()
        if not sep or not name or not text.strip():
            raise ConfigError(f"{option} {item!r}: expected KEY=V1,V2,..., e.g. {option} alpha=0.01,1.0")
        field = GRID_KEYS.get(name, name.removeprefix("base."))
        top = field.split(".")[0]
        if top in _NOT_GRIDDABLE:
            raise ConfigError(f"{option} {name}: base.{top} cannot be a grid axis ({_NOT_GRIDDABLE[top]})")
        if top not in ExperimentConfig.model_fields:
            raise ConfigError(
                f"{option} {name}: not a setting; short names: {', '.join(GRID_KEYS)}, "
                f"or a field of base: {', '.join(f for f in ExperimentConfig.model_fields if f not in _NOT_GRIDDABLE)}"
            )
        if any(axis.field == field for axis in axes):
            raise ConfigError(f"{option} {name}: base.{field} is given twice")
        try:
            values = tuple(yaml.safe_load(v) for v in text.split(","))
        except yaml.YAMLError as error:
            raise ConfigError(f"{option} {name}: a value is not valid YAML: {error}") from None
        if len(set(map(repr, values))) != len(values):
            raise ConfigError(f"{option} {name}: a value is repeated ({text})")
        axes.append(GridAxis(name, field, values))
    return axes


def as_fields(axes: list[GridAxis]) -> list[GridAxis]:
    """The axes named by the fields they set (alpha -> partition.alpha): a setting's label then says the same
    whichever name the user wrote (what `tune --per-setting` tags a study with, and `ablate --per-setting` reads)."""
    return [GridAxis(axis.field, axis.field, axis.values) for axis in axes]


def settings(space: SearchSpace, axes: list[GridAxis], option: str = "--grid") -> dict[str, ExperimentConfig]:
    """Every combination of the axes' values -> its label (`alpha=0.01,rho=0.5`) and base experiment."""
    if not axes:
        return {NO_SETTING: space.base}
    out: dict[str, ExperimentConfig] = {}
    for combination in itertools.product(*(axis.values for axis in axes)):
        label = ",".join(f"{axis.name}={value}" for axis, value in zip(axes, combination, strict=True))
        changes = {f"base.{axis.field}": value for axis, value in zip(axes, combination, strict=True)}
        try:
            out[label] = override(space, changes, source=f"{option} {label}").base
        except ConfigError as error:
            raise ConfigError(str(error).replace("\n", "\n  ")) from None
    return out


@dataclass(frozen=True)
class VariantSource:
    """Where a variant's configuration comes from: its tuned study, or the YAML when there is none."""

    variant: str
    method: str
    params: dict[str, Any]  # the method's hyperparameters the cells run with (method defaults fill the rest)
    study_run_id: str | None  # the tune-stage parent run it came from
    note: str  # one line for the terminal and the MLflow tag
    tuning_seeds: tuple[int, ...] = ()  # the training seeds its study's trials used (the ablation holds them out)


def variant_source(space: SearchSpace, name: str, study: StudyRecord | None) -> VariantSource:
    variant = space.variants[name]
    spec = METHODS.get(variant.method)
    if study is None:
        searched = f"; the method's defaults for the searched {', '.join(variant.search)}" if variant.search else ""
        note = f"no tuned study in MLflow: the YAML's fixed values{searched}"
        return VariantSource(name, variant.method, dict(variant.fixed), None, note)
    if study.stopped:
        how = "was interrupted" if study.stopped == "interrupted" else "is still running (or its driver was killed)"
        finish = study.resume_command or "the tune command that started it, with --resume"
        raise ConfigError(
            f"variants.{name}: its newest tune study (MLflow run {study.run_id}) {how} before it selected a "
            f"configuration; finish it with: {finish}  (or pass --ignore-studies to use the YAML's values)"
        )
    if study.method != variant.method:
        raise ConfigError(
            f"variants.{name}.method: the latest tuned study of {name!r} (MLflow run {study.run_id}) tuned "
            f"{study.method!r}, the file says {variant.method!r}; re-tune it, or pass --ignore-studies"
        )
    # `describe` shows a data-derived default as its rule (e.g. "D/4"): such a value is the default, not a number
    params = {k: v for k, v in study.params.items() if k in spec.defaults and v != spec.derived.get(k)}
    changed = [k for k, v in variant.fixed.items() if k in params and params[k] != v]
    note = f"best configuration of study run {study.run_id}"
    if changed:
        note += f" (the YAML's fixed {', '.join(changed)} changed since; the study's values are used)"
    if study.dataset and study.dataset != space.base.dataset:
        note += f" (tuned on {study.dataset}, ablated on {space.base.dataset})"
    return VariantSource(name, variant.method, params, study.run_id, note, study.tuning_seeds)


def setting_sources(
    space: SearchSpace,
    variants: list[str],
    axes: list[GridAxis],
    found: tuple[Any, str] | None,  # (MlflowClient, experiment id) when the experiment exists
    space_file: str,
) -> dict[str, dict[str, VariantSource]]:
    """Setting label -> variant -> the configuration its study tuned at that setting (tune --per-setting tags each
    study with the setting as fields, so `alpha=0.1` here finds `partition.alpha=0.1` there)."""
    out: dict[str, dict[str, VariantSource]] = {}
    labels = zip(settings(space, axes), settings(space, as_fields(axes)), strict=True)
    for label, fields in labels:
        out[label] = {}
        for name in variants:
            study = latest_study(found[0], found[1], name, setting=fields) if found is not None else None
            if study is None:
                grid = " ".join(f"--per-setting {axis.name}={','.join(map(str, axis.values))}" for axis in axes)
                raise ConfigError(
                    f"--per-setting: variant {name!r} has no finished study tuned at {fields}; tune it first: "
                    f"tune --space {space_file} {grid}"
                )
            source = variant_source(space, name, study)
            out[label][name] = replace(source, note=f"at {label}: {source.note}")
    return out


def merged_source(variant: str, per_setting: dict[str, dict[str, VariantSource]]) -> VariantSource:
    """A variant's sources over every setting as one (the ablation parent's record of where its values came from);
    the cells take each setting's own."""
    sources = [by_variant[variant] for by_variant in per_setting.values()]
    ids = ",".join(s.study_run_id for s in sources if s.study_run_id)
    seeds = tuple(sorted({seed for s in sources for seed in s.tuning_seeds}))
    return VariantSource(variant, sources[0].method, {}, ids or None, "; ".join(s.note for s in sources), seeds)


def searched_seeds(sources: dict[str, VariantSource]) -> set[int]:
    """Every training seed a tuning trial of an ablated variant's study used."""
    return {seed for source in sources.values() for seed in source.tuning_seeds}


@dataclass(frozen=True)
class AblationCell:
    """One run of the ablation."""

    variant: str
    method: str
    seed: int
    setting: str
    experiment: ExperimentConfig
    params: dict[str, Any]
    study_run_id: str | None
    split: int | None = None  # its partition seed when the plan varies the split; None: the setting's own

    @property
    def key(self) -> str:  # the run name: what a person filters and reads in the MLflow UI
        return f"{self.variant}/seed{self.seed}/{split_label(self.setting, self.split)}"

    @property
    def partition_seed(self) -> int:
        return self.experiment.partition.seed

    @property
    def data_label(self) -> str:
        """Which of the driver's partitions this cell trains on (`splits`): its setting's, or its split's."""
        return split_label(self.setting, self.split)

    @property
    def trial(self) -> TrialSpec:
        """The cell's trial, resolved as a study's trials are (the same params in both stages)."""
        return TrialSpec.resolve(self.experiment, self.method, self.params)


def split_label(setting: str, split: int | None) -> str:
    """`alpha=0.1`, or `split3/alpha=0.1` for partition seed 3 when the plan varies the split."""
    return setting if split is None else f"split{split}/{setting}"


def splits(experiments: dict[str, ExperimentConfig], partition_seeds: int = 1) -> dict[str, ExperimentConfig]:
    """Each partition the cells train on: the settings themselves when `partition_seeds` is 1, else every setting at
    partition seeds base.partition.seed + 0..N-1, labelled as `split_label` (the driver checks and logs each)."""
    if partition_seeds == 1:
        return dict(experiments)
    out = {}
    for setting, experiment in experiments.items():
        for offset in range(partition_seeds):
            split = experiment.partition.seed + offset
            partition = experiment.partition.model_copy(update={"seed": split})
            out[split_label(setting, split)] = experiment.model_copy(update={"partition": partition})
    return out


@dataclass(frozen=True)
class AblationPlan:
    """What an ablation runs: settings (the table's columns) x variants (its rows) x seeds (x partition seeds)."""

    space: SearchSpace
    axes: list[GridAxis]
    seeds: list[int]
    experiments: dict[str, ExperimentConfig]  # setting label -> base experiment
    sources: dict[str, VariantSource]
    cells: list[AblationCell]
    partition_seeds: int = 1  # splits per (variant, seed, setting); 1: each setting's own partition.seed
    seed_plan: SeedPlan | None = None  # the rule the seeds came from and the seeds the search used
    auto: AutoSeeds | None = None  # --seeds auto: the plan grows by seeds until its intervals are narrow enough
    optimizers: dict[str, OptimizerConfig] = field(default_factory=dict)  # variants' own optimisers (build_cells)
    per_setting: dict[str, dict[str, VariantSource]] | None = None  # each setting's own sources (build_cells)

    @property
    def partitions(self) -> dict[str, ExperimentConfig]:
        """Data label -> the experiment whose partition the cells of that label train on (`splits`)."""
        return splits(self.experiments, self.partition_seeds)

    @property
    def split_seeds(self) -> list[int]:
        """The distinct partition seeds the cells train on, sorted."""
        return sorted({cell.partition_seed for cell in self.cells})

    @property
    def fingerprint(self) -> str:
        """Same cells, experiments and hyperparameters -> same fingerprint (what --resume matches on)."""
        cells = self.cells
        if self.auto is not None:  # seeds are added as it runs: the plan is its first seed's cells and the target
            cells = [cell for cell in cells if cell.seed == self.seeds[0]]
        described: list[Any] = [
            [cell.key, cell.method, cell.experiment.model_dump(mode="json"), cell.params]
            for cell in sorted(cells, key=lambda c: c.key)
        ]
        if self.seed_plan is not None and self.seed_plan.rule != WITH_TUNING:  # with_tuning: as plans always were
            described.append(["seed_rule", self.seed_plan.rule])
        if self.auto is not None:  # the target and the cap are a stopping rule: --resume may change them
            described.append(["auto", self.auto.reference])
        return hashlib.sha256(json.dumps(described, sort_keys=True, default=str).encode()).hexdigest()[:16]

    @property
    def rounds(self) -> int:
        return max(cell.experiment.rounds for cell in self.cells)

    def with_seeds(self, seed_plan: SeedPlan) -> AblationPlan:
        """The same plan over other seeds (`--seeds auto` adding some): the cells rebuilt, the rest kept."""
        seeds = list(seed_plan.scored)
        cells = build_cells(
            self.sources, self.experiments, seeds, self.optimizers, self.partition_seeds, self.per_setting
        )
        return replace(self, seeds=seeds, cells=cells, seed_plan=seed_plan)

    def summary_line(self) -> str:
        splits = f" x {self.partition_seeds} partition seeds" if self.partition_seeds > 1 else ""
        return (
            f"ablation: {len(self.sources)} variants x {len(self.seeds)} seeds{splits} x {len(self.experiments)} "
            f"settings = {len(self.cells)} runs (settings: {', '.join(self.experiments)})"
        )


def check_partition_seeds(partition_seeds: int, axes: list[GridAxis]) -> None:
    """`--partition-seeds` at least 1, and not beside a grid over the partition seed (both would set it)."""
    if partition_seeds < 1:
        raise ConfigError(f"--partition-seeds: at least 1 (got {partition_seeds})")
    gridded = next((axis.name for axis in axes if axis.field == "partition.seed"), None)
    if partition_seeds > 1 and gridded is not None:
        raise ConfigError(
            f"--partition-seeds: {partition_seeds} splits per cell, but --grid {gridded} already sets "
            "base.partition.seed; use one of the two"
        )


def make_plan(
    space: SearchSpace,
    axes: list[GridAxis],
    seeds: list[int],
    experiments: dict[str, ExperimentConfig],
    sources: dict[str, VariantSource],
    partition_seeds: int = 1,
    per_setting: dict[str, dict[str, VariantSource]] | None = None,
    seed_plan: SeedPlan | None = None,
    auto: AutoSeeds | None = None,
) -> AblationPlan:
    """The plan; with `per_setting` (setting -> variant -> source) each setting's cells run their own selection.
    `seed_plan`: where `seeds` came from (recorded on the parent); `auto`: `--seeds auto`'s target."""
    check_partition_seeds(partition_seeds, axes)
    optimizers = {name: v.optimizer for name, v in space.variants.items() if v.optimizer is not None}
    cells = build_cells(sources, experiments, seeds, optimizers, partition_seeds, per_setting)
    return AblationPlan(
        space, axes, seeds, experiments, sources, cells, partition_seeds, seed_plan, auto, optimizers, per_setting
    )


@dataclass(frozen=True)
class AutoSeeds:
    """`--seeds auto`: add seeds in rounds until every comparison's interval half-width is at most
    `target_halfwidth` points or `max_seeds` seeds ran. It stops on the widths alone, never on a p-value, so the
    tests at the end keep their error rates (stopping when a test turns significant would inflate them)."""

    target_halfwidth: float  # points (accuracy x 100)
    max_seeds: int
    reference: str  # the variant every other is compared with
    start: int = AUTO_START  # seeds in the first round


def build_cells(
    sources: dict[str, VariantSource],
    experiments: dict[str, ExperimentConfig],
    seeds: list[int],
    optimizers: dict[str, OptimizerConfig] | None = None,
    partition_seeds: int = 1,
    per_setting: dict[str, dict[str, VariantSource]] | None = None,
) -> list[AblationCell]:
    """Every (setting, variant, seed), and with `partition_seeds` N > 1 every split of it (the setting's
    partition.seed + 0..N-1: crossed with the training seeds, so runs pair by (seed, split) across variants); a
    variant in `optimizers` trains with its own optimiser in every setting."""
    optimizers = optimizers or {}
    cells = []
    for setting, experiment in experiments.items():
        for source in (per_setting[setting] if per_setting else sources).values():
            for seed in seeds:
                update = {"seed": seed, "optimizer": optimizers.get(source.variant, experiment.optimizer)}
                if partition_seeds == 1:  # the setting's own split: the cells (keys, fingerprint) as they always were
                    trained = experiment.model_copy(update=update)
                    cells.append(
                        AblationCell(
                            source.variant, source.method, seed, setting, trained, source.params, source.study_run_id
                        )
                    )
                    continue
                for offset in range(partition_seeds):
                    split = experiment.partition.seed + offset
                    partition = experiment.partition.model_copy(update={"seed": split})
                    trained = experiment.model_copy(update={**update, "partition": partition})
                    cells.append(
                        AblationCell(
                            source.variant,
                            source.method,
                            seed,
                            setting,
                            trained,
                            source.params,
                            source.study_run_id,
                            split,
                        )
                    )
    return cells


def ablation_trial(config: dict[str, Any], *, cells: dict[str, AblationCell], system_metrics: bool = False) -> None:
    from raytune_fl.tune.trainable import federated_trial

    cell = cells[config["cell"]]
    fixed = cell.trial.params
    federated_trial({}, experiment=cell.experiment, method=cell.method, fixed=fixed, system_metrics=system_metrics)
