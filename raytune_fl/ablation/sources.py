"""Where each ablated variant's configuration comes from: its newest tuned study in MLflow (at each grid setting,
with --per-setting), else the YAML's fixed values."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from raytune_fl.ablation.grid import GridAxis, as_fields, settings
from raytune_fl.config import ConfigError, ParamSchedule, SearchSpace
from raytune_fl.config.privacy import variant_spec
from raytune_fl.methods import METHODS
from raytune_fl.tracking.store import StudyRecord, latest_study


@dataclass(frozen=True)
class VariantSource:
    """Where a variant's configuration comes from: its tuned study, or the YAML when there is none."""

    variant: str
    method: str
    params: dict[str, Any]  # the method's hyperparameters the cells run with (method defaults fill the rest)
    study_run_id: str | None  # the tune-stage parent run it came from
    note: str  # one line for the terminal and the MLflow tag
    tuning_seeds: tuple[int, ...] = ()  # the training seeds its study's trials used (the ablation holds them out)
    schedule: ParamSchedule | None = None  # a PBT study's selected schedule: the cells replay it (`params`: the rest)


def variant_source(space: SearchSpace, name: str, study: StudyRecord | None) -> VariantSource:
    variant = space.variants[name]
    spec = variant_spec(METHODS.get(variant.method))  # a tuned privacy.clip_norm is kept too
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
    if study.schedule is not None:
        note += f", replaying its PBT schedule ({study.schedule.describe()})"
    return VariantSource(name, variant.method, params, study.run_id, note, study.tuning_seeds, study.schedule)


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
