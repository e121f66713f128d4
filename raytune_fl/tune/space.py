"""Search ranges <-> Optuna distributions: from a YAML file or a study's logged config.yaml, and logged param
values read back as their distribution holds them (the params codec of tracking/schema.py)."""

from __future__ import annotations

from typing import Any

from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution

from raytune_fl.config import Distribution
from raytune_fl.tracking.schema import decode_choice, decode_float, decode_int


def optuna_distribution(spec: Distribution) -> BaseDistribution:
    """The range's Optuna distribution (exactly one of its kinds is given: config.py checks it)."""
    if spec.loguniform is not None:
        low, high = spec.loguniform
        return FloatDistribution(low, high, log=True)
    if spec.uniform is not None:
        return FloatDistribution(*spec.uniform)
    if spec.int is not None:
        return IntDistribution(*spec.int)
    return CategoricalDistribution(spec.choice or [])


def optuna_space(search: dict[str, Distribution]) -> dict[str, BaseDistribution]:
    return {name: optuna_distribution(spec) for name, spec in search.items()}


def search_distributions(config: dict[str, Any]) -> dict[str, BaseDistribution]:
    """Optuna distributions of a study's `variant.search` (config.yaml keeps every kind, unused ones null)."""
    search = (config.get("variant") or {}).get("search") or {}
    specs = {
        name: Distribution.model_validate({k: v for k, v in spec.items() if v is not None})
        for name, spec in search.items()
    }
    return optuna_space(specs)


def parse_param(text: str, distribution: BaseDistribution) -> Any:
    """An MLflow param (text: strings raw, everything else JSON) back to the value its distribution holds."""
    if isinstance(distribution, FloatDistribution):
        return decode_float(text)
    if isinstance(distribution, IntDistribution):
        return decode_int(text)
    if isinstance(distribution, CategoricalDistribution):
        return decode_choice(text, distribution.choices)
    raise ValueError(f"unsupported distribution {distribution!r}")
