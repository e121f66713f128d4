"""An ablation's settings: the --grid axes parsed, and every combination of their values as a base experiment
(with `--partition-seeds`, each setting's splits too)."""

from __future__ import annotations

import itertools
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from raytune_fl.config import ConfigError, ExperimentConfig, SearchSpace, override
from raytune_fl.tracking.schema import SETTING_DEFAULT

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


def check_not_overridden(
    axes: list[GridAxis], named: Mapping[str, Collection[str]], own_optimizer: Collection[str], option: str = "--grid"
) -> None:
    """Refuse an axis a variant sets itself, which would override the axis's value in every one of its cells: a
    setting it fixes, searches or was tuned to (`named`: variant -> those names, e.g. optimizer.lr), or an
    optimizer field where the variant has its own `optimizer` section (`own_optimizer`)."""
    for axis in axes:
        for variant, names in named.items():
            own = axis.field.startswith("optimizer.") and variant in own_optimizer
            if axis.field in names or own:
                how = "its own optimizer section" if own else f"{axis.field} itself (fixed, searched or tuned)"
                raise ConfigError(
                    f"{option} {axis.name}: variant {variant!r} sets {how}, which would override the axis in every "
                    f"one of its cells; leave it out (--variants) or take {axis.field} out of that variant"
                )


def as_fields(axes: list[GridAxis]) -> list[GridAxis]:
    """The axes named by the fields they set (alpha -> partition.alpha): a setting's label then says the same
    whichever name the user wrote (what `tune --per-setting` tags a study with, and `ablate --per-setting` reads)."""
    return [GridAxis(axis.field, axis.field, axis.values) for axis in axes]


def settings(space: SearchSpace, axes: list[GridAxis], option: str = "--grid") -> dict[str, ExperimentConfig]:
    """Every combination of the axes' values -> its label (`alpha=0.01,rho=0.5`) and base experiment. A number is
    labelled as its field holds it (alpha=1e-1 as alpha=0.1, alpha=1 as alpha=1.0): one setting has one label
    however it was typed, so that a study tuned at it is found by `ablate --per-setting` and `tune --resume`."""
    if not axes:
        return {NO_SETTING: space.base}
    out: dict[str, ExperimentConfig] = {}
    typed: dict[str, str] = {}  # label -> the values as written (what a collision names)
    for combination in itertools.product(*(axis.values for axis in axes)):
        written = ",".join(f"{axis.name}={value}" for axis, value in zip(axes, combination, strict=True))
        changes = {f"base.{axis.field}": value for axis, value in zip(axes, combination, strict=True)}
        try:
            experiment = override(space, changes, source=f"{option} {written}").base
        except ConfigError as error:
            raise ConfigError(str(error).replace("\n", "\n  ")) from None
        held = (_held(experiment, axis.field, value) for axis, value in zip(axes, combination, strict=True))
        label = ",".join(f"{axis.name}={value}" for axis, value in zip(axes, held, strict=True))
        if label in out:
            raise ConfigError(
                f"{option} {written}: the same setting as {typed[label]} ({label}: numbers are compared as numbers); "
                "give each value once"
            )
        out[label], typed[label] = experiment, written
    return out


def _held(experiment: ExperimentConfig, field: str, written: Any) -> Any:
    """The number `field` holds in `experiment` where `written` set a number (YAML reads 1e-1 as text), else
    `written` as it was given."""
    value: Any = experiment
    for part in field.split("."):
        value = value.get(part) if isinstance(value, dict) else getattr(value, part, None)
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    return value if number and not isinstance(written, bool) else written


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
