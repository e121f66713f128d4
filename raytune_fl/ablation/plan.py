"""The ablation: each variant's best configuration re-run over seeds x settings, as one grid of Tune trials.

A cell is one (variant, seed, setting) run. Every cell of an ablation shares the base experiment of the
search-space file, changed only by its setting (e.g. alpha=0.01, rho=0.5) and its training seed. With
`--partition-seeds N` (N > 1) each of those also runs on N splits, base.partition.seed + 0..N-1, so the table's
spread includes the partition's noise; a cell is then a (variant, seed, split, setting) run. The settings come from
grid.py, the variants' configurations from sources.py, and the cells run as trainable.py's trials.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, replace
from typing import Any

from raytune_fl.ablation.grid import (
    GridAxis,
    check_not_overridden,
    check_partition_seeds,
    settings,
    split_label,
    splits,
)
from raytune_fl.ablation.seeds import AUTO_START, WITH_TUNING, SeedPlan
from raytune_fl.ablation.sources import VariantSource
from raytune_fl.config import ExperimentConfig, OptimizerConfig, ParamSchedule, SearchSpace, TrialSpec, VariantTrials
from raytune_fl.metrics import TEST_ACC


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
    schedule: ParamSchedule | None = None  # a PBT study's schedule, replayed over `params` (ablation/trainable.py)

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
        return VariantTrials(self.experiment, self.method, self.params).trial()


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
    metric: str = TEST_ACC  # the table's (ablate.py --metric): final-round, never one tuning selected on

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
            # a replayed schedule is part of the cell (a constant cell described as cells always were)
            [cell.key, cell.method, cell.experiment.model_dump(mode="json"), cell.params]
            + ([cell.schedule.to_json()] if cell.schedule is not None else [])
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


def set_by(source: VariantSource) -> set[str]:
    """What a variant's cells set themselves: its hyperparameters and settings, and its schedule's."""
    scheduled = {name for segment in source.schedule.segments for name in segment.params} if source.schedule else set()
    return {*source.params, *scheduled}


def make_plan(
    space: SearchSpace,
    axes: list[GridAxis],
    seeds: list[int] | SeedPlan,
    sources: dict[str, VariantSource],
    partition_seeds: int = 1,
    per_setting: dict[str, dict[str, VariantSource]] | None = None,
    auto: AutoSeeds | None = None,
) -> AblationPlan:
    """The plan over every setting of `axes`; with `per_setting` (setting -> variant -> source) each setting's
    cells run their own selection. `seeds`: the training seeds, or the SeedPlan they came from (recorded on the
    parent, the seeds it scores); `auto`: `--seeds auto`'s target."""
    check_partition_seeds(partition_seeds, axes)
    optimizers = {name: v.optimizer for name, v in space.variants.items() if v.optimizer is not None}
    for chosen in [sources, *(per_setting or {}).values()]:
        check_not_overridden(axes, {name: set_by(source) for name, source in chosen.items()}, optimizers)
    seed_plan = seeds if isinstance(seeds, SeedPlan) else None
    scored = list(seeds.scored) if isinstance(seeds, SeedPlan) else list(seeds)
    experiments = settings(space, axes)
    cells = build_cells(sources, experiments, scored, optimizers, partition_seeds, per_setting)
    return AblationPlan(
        space,
        axes,
        scored,
        experiments,
        sources,
        cells,
        partition_seeds,
        seed_plan,
        auto,
        optimizers,
        per_setting,
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


def _cell(
    source: VariantSource, seed: int, setting: str, experiment: ExperimentConfig, split: int | None
) -> AblationCell:
    """The cell of `source` at `seed`, trained on `experiment` (on its partition seed `split`, if given)."""
    if split is not None:
        experiment = experiment.model_copy(
            update={"partition": experiment.partition.model_copy(update={"seed": split})}
        )
    params, run_id = source.params, source.study_run_id
    return AblationCell(
        source.variant, source.method, seed, setting, experiment, params, run_id, split, source.schedule
    )


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
    cells: list[AblationCell] = []
    for setting, experiment in experiments.items():
        for source in (per_setting[setting] if per_setting else sources).values():
            for seed in seeds:
                update = {"seed": seed, "optimizer": optimizers.get(source.variant, experiment.optimizer)}
                # one split: the setting's own (the cells' keys and fingerprints as they always were)
                splits = (
                    [None] if partition_seeds == 1 else [experiment.partition.seed + k for k in range(partition_seeds)]
                )
                cells.extend(
                    _cell(source, seed, setting, experiment.model_copy(update=update), split) for split in splits
                )
    return cells
