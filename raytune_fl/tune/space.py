"""Search ranges from a YAML file -> Optuna distributions."""

from __future__ import annotations

from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution

from raytune_fl.config import Distribution


def optuna_distribution(spec: Distribution) -> BaseDistribution:
    kind = spec.kind
    if kind == "loguniform":
        return FloatDistribution(*spec.loguniform, log=True)
    if kind == "uniform":
        return FloatDistribution(*spec.uniform)
    if kind == "int":
        return IntDistribution(*spec.int)
    return CategoricalDistribution(spec.choice)


def optuna_space(search: dict[str, Distribution]) -> dict[str, BaseDistribution]:
    return {name: optuna_distribution(spec) for name, spec in search.items()}
