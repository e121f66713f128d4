"""`scripts/tune.py`: one Optuna-driven Tune study per ablation variant of a search-space file."""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from raytune_fl.config import ConfigError, SearchSpace, load_space, override
from raytune_fl.registry import UnknownNameError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tune.py",
        description="Tune each ablation variant of a search-space file with Ray Tune + Optuna (TPE) + ASHA; "
        "log every trial and round to MLflow.",
    )
    parser.add_argument("--space", required=True, help="search-space YAML file, e.g. search_spaces/univarfl.yaml")
    parser.add_argument("--rounds", type=int, help="override base.rounds")
    parser.add_argument("--num-samples", type=int, help="override tune.num_samples (trials per searched variant)")
    parser.add_argument("--variants", help="comma-separated subset of the file's variants, e.g. full,fedavg")
    parser.add_argument("--seed", type=int, help="override base.seed (training) and tune.seed (TPE sampler)")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override any field by its dotted path, value in YAML, e.g. --set base.partition.alpha=0.5 "
        "--set variants.full.fixed.fidelity=official (repeatable; applied after the options above)",
    )
    parser.add_argument(
        "--address",
        help="Ray cluster to join ('auto' or host:port); default: RAY_ADDRESS, else a private local cluster",
    )
    parser.add_argument("--mlflow-uri", help="MLflow tracking URI; default: sqlite:///<cwd>/mlflow.db")
    parser.add_argument(
        "--storage", default="ray_results", help="directory for Ray Tune results (default: %(default)s)"
    )
    return parser


def resolve_space(args: argparse.Namespace) -> tuple[SearchSpace, list[str]]:
    """The search space with command-line overrides applied and checked, before Ray starts."""
    space = load_space(args.space)
    changes: dict[str, Any] = {}
    if args.rounds is not None:
        changes["base.rounds"] = args.rounds
    if args.num_samples is not None:
        changes["tune.num_samples"] = args.num_samples
    if args.seed is not None:
        changes["base.seed"] = args.seed
        changes["tune.seed"] = args.seed
    for item in args.set:
        key, sep, text = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set {item!r}: expected KEY=VALUE, e.g. base.rounds=5")
        try:
            changes[key.strip()] = yaml.safe_load(text)
        except yaml.YAMLError as error:
            raise ConfigError(f"--set {key.strip()}: the value is not valid YAML: {error}") from None
    if changes:
        space = override(space, changes, source=f"{args.space} with command-line overrides")
    variants = list(space.variants)
    if args.variants:
        chosen = [v.strip() for v in args.variants.split(",") if v.strip()]
        unknown = [v for v in chosen if v not in space.variants]
        if unknown or not chosen:
            raise ConfigError(
                f"--variants: unknown variant(s) {', '.join(unknown) or '(none given)'}; "
                f"the file has: {', '.join(space.variants)}"
            )
        variants = chosen
    storage = Path(args.storage)
    try:
        storage.mkdir(parents=True, exist_ok=True)
        probe = storage / ".write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as error:
        raise ConfigError(f"--storage: cannot write to {storage}: {error.strerror}") from None
    return space, variants


def start_ray(address: str | None) -> None:
    import ray

    if ray.is_initialized():  # e.g. inside a test session that already started a private cluster
        return
    address = address or os.environ.get("RAY_ADDRESS") or "local"
    kwargs: dict[str, Any] = {"address": address, "log_to_driver": True}
    if address == "local":
        kwargs["include_dashboard"] = False
    ray.init(**kwargs)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        space, variants = resolve_space(args)
    except (ConfigError, UnknownNameError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2

    from raytune_fl.engine.federation import prepare_data

    try:  # the dataset and its partition, checked before any Ray process starts
        data = prepare_data(space.base)
    except (OSError, ValueError) as error:
        print(f"error: base.dataset/base.partition: {error}", file=sys.stderr)
        return 2
    summary = data.num_clients, len(data.dataset.y_train), len(data.val_indices), len(data.dataset.y_test)
    print("data: {} clients, {} train samples ({} held out for validation), {} test samples".format(*summary))

    from raytune_fl.tracking import StudyTracker, default_tracking_uri

    uri = args.mlflow_uri or default_tracking_uri()
    print(f"MLflow tracking URI: {uri}  (experiment {space.name!r})", flush=True)
    print(f"Ray Tune results:    {Path(args.storage).resolve()}", flush=True)
    tracker = StudyTracker(uri, space.name)

    import ray

    from raytune_fl.tune import run_variant
    from raytune_fl.tune.resources import check_fits

    start_ray(args.address)
    try:
        check_fits(space.base.resources, ray.cluster_resources())
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    started = time.time()
    outcomes = []
    for name in variants:
        print(f"=== variant {name} (method {space.variants[name].method}) ===", flush=True)
        outcomes.append(run_variant(space, name, storage=args.storage, tracker=tracker, data=data))
    print_summary(outcomes, uri, space.name, time.time() - started)
    return 0 if all(o.best_metrics for o in outcomes) else 1


def print_summary(outcomes: list, uri: str, experiment: str, wall_s: float) -> None:
    metric, nan = "val_acc", float("nan")
    print("\n=== best configuration per variant (selected on validation; test reported beside) ===")
    for o in outcomes:
        if not o.best_metrics:
            print(f"{o.variant:>16}: no successful trial ({o.trials}); first error: {o.errors[:1]}")
            continue
        m = o.best_metrics
        params = ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in o.best_params.items())
        print(
            f"{o.variant:>16}: {metric}={m.get(metric, nan):.4f} test_acc={m.get('test_acc', nan):.4f} "
            f"(round {int(m.get('round', 0))}) [{params or 'no hyperparameters'}] "
            f"trials {o.trials} {o.wall_time_s:.0f}s"
        )
    print(f"\ntotal wall time: {wall_s:.0f}s")
    print(f"MLflow: experiment {experiment!r} at {uri}")
    if uri.startswith("sqlite:"):
        print(f"  view with: mlflow ui --backend-store-uri {uri}")
    for o in outcomes:
        if o.parent_run_id:
            print(f"  {o.variant}: parent run {o.parent_run_id}")
