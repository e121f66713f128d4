"""The descriptions runs carry in the MLflow UI (markdown at the top of a run's page): what was studied, what was
fixed and what was searched, on which data. Plain text from the configuration; tracking/ stores it."""

from __future__ import annotations

from typing import Any

from raytune_fl.config import AshaConfig, ExperimentConfig, HyperbandConfig, MedianConfig, SearchSpace, TuneSettings
from raytune_fl.methods import METHODS


def _value(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _pairs(values: dict[str, Any]) -> str:
    return ", ".join(f"`{k}={_value(v)}`" for k, v in values.items())


def _distribution(dumped: dict[str, Any]) -> str:
    """{'loguniform': (0.01, 5.0)} -> loguniform(0.01, 5)."""
    return ", ".join(
        f"{kind}({', '.join(_value(a) for a in args)})"
        if isinstance(args, (list, tuple))
        else f"{kind}({_value(args)})"
        for kind, args in dumped.items()
    )


def setup_line(base: ExperimentConfig) -> str:
    """The data and the training protocol every run of the study shares, in one line."""
    part, opt = base.partition, base.optimizer
    split = f"{part.label}" + (f" (alpha {part.alpha:g})" if part.kind in ("dirichlet", "quantity_skew") else "")
    test = f", {part.test_fraction:.0%} as its own test part" if part.test_fraction > 0 else ""
    return (
        f"Data: `{base.dataset}`, {split} over {part.clients_text} clients ({part.val_fraction:.0%} of each held out "
        f"for validation{test}). Training: {base.rounds} rounds, {base.participation:.0%} of clients per round, "
        f"{base.local_epochs} local epoch(s), batch {base.batch_size}, SGD lr {opt.lr:g} momentum {opt.momentum:g} "
        f"weight decay {opt.weight_decay:g}, model `{base.model}`, seed {base.seed}."
    )


def _selection(settings: TuneSettings) -> str:
    if not settings.multi_objective:
        return f"selected on `{settings.primary}`"
    listed = ", ".join(f"`{o.metric}` ({o.mode})" for o in settings.objectives)
    return f"a Pareto front over {listed}, the configuration selected on `{settings.primary}`"


# how a parent run's description names tune.sampler
SAMPLER_NAMES = {
    "tpe": "TPE",
    "random": "random sampling",
    "grid": "grid search (every point once)",
    "gp": "Gaussian-process sampling",
    "cmaes": "CMA-ES",
    "qmc": "quasi-Monte Carlo (scrambled Sobol) sampling",
}


def stopping_text(settings: TuneSettings, rounds: int) -> str:
    """The scheduler in force, in words."""
    if (pbt := settings.scheduler.pbt) is not None:
        return f"{pbt.shown} over rounds (every {pbt.interval} rounds, quantile {pbt.quantile:g})"
    stopping = settings.early_stopping
    if isinstance(stopping, AshaConfig):
        return f"ASHA on rounds (grace {stopping.grace(rounds)}, reduction {stopping.reduction_factor:g})"
    if isinstance(stopping, HyperbandConfig):
        return f"Hyperband on rounds (max {rounds}, reduction {stopping.reduction_factor:g})"
    if isinstance(stopping, MedianConfig):
        return (
            f"median stopping on rounds (grace {stopping.grace(rounds)}, "
            f"at least {stopping.min_samples_required} trials)"
        )
    return "no early stopping"


def variant_description(space: SearchSpace, variant_name: str, num_trials: int) -> str:
    """A tune-stage parent run: the variant, its method, what is fixed and what is searched, and how."""
    variant, settings = space.variants[variant_name], space.tune
    spec = METHODS.get(variant.method)
    defaults = {name: param.default for name, param in spec.params.items() if name not in variant.search}
    fixed = {**defaults, **variant.fixed}
    lines = [
        f"**Variant `{variant_name}`** of study `{space.name}`: method `{variant.method}`.",
        "",
        f"- Fixed: {_pairs(fixed) or 'nothing (the method has no hyperparameters)'}",
    ]
    if variant.search:
        ranges = ", ".join(
            f"`{name}` ~ {_distribution(dist.model_dump(exclude_none=True))}" for name, dist in variant.search.items()
        )
        lines += [
            f"- Searched: {ranges}",
            f"- Search: {num_trials} trials, Optuna {SAMPLER_NAMES[settings.sampler]} "
            f"(seed {settings.seed}, drawn per variant), {stopping_text(settings, space.base.rounds)}; "
            f"{_selection(settings)} (validation), test reported beside.",
        ]
    else:
        lines.append("- Searched: nothing (one run of the fixed configuration)")
    lines += ["", setup_line(space.base)]
    return "\n".join(lines)


def trial_description(variant_name: str, method: str, config: dict[str, Any], index: int) -> str:
    """A tune-stage trial run."""
    sampled = _pairs(config) if config else "the variant's fixed configuration"
    return f"Trial {index} of variant `{variant_name}` (method `{method}`): {sampled}."


def cell_description(variant: str, method: str, seed: int, setting: str, params: dict[str, Any], note: str) -> str:
    """An ablation cell's run."""
    return (
        f"Ablation cell: variant `{variant}` (method `{method}`), seed {seed}, setting `{setting}`. "
        f"Hyperparameters: {_pairs(params) or 'none'} ({note})."
    )


def ablation_description(space: SearchSpace, variants: list[str], seeds: list[int], settings: list[str]) -> str:
    """An ablation parent run."""
    return "\n".join(
        [
            f"**Ablation** of study `{space.name}`: variants {', '.join(f'`{v}`' for v in variants)} x seeds "
            f"{', '.join(map(str, seeds))} x settings {', '.join(f'`{s}`' for s in settings)}; each variant at its "
            "selected configuration (see the config_source.* tags). The table (ablation/table.md) reports test "
            "accuracy, mean and std over seeds.",
            "",
            setup_line(space.base),
        ]
    )
