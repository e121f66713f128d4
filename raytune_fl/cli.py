"""`scripts/tune.py`: one Optuna-driven Tune study per ablation variant of a search-space file."""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import yaml

from raytune_fl.config import ConfigError, ExperimentConfig, ResourcesConfig, SearchSpace, load_space, override
from raytune_fl.registry import UnknownNameError
from raytune_fl.tune.cluster import start_ray  # module-level: main reaches Ray only through cli.start_ray

if TYPE_CHECKING:
    from raytune_fl.engine.data import FederatedData


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
        "--storage",
        default="ray_results",
        help="where Ray Tune results, checkpoints and the study record go, reachable from every Ray node: a "
        "directory (on a cluster: shared, e.g. NFS), file:///dir, s3://bucket/prefix, gs://bucket/prefix or "
        "hdfs://host/path; another S3-compatible endpoint via AWS_ENDPOINT_URL (README) (default: %(default)s)",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="continue the study a killed run left in --storage (same --space and overrides): finished variants "
        "are kept, the interrupted one resumes its trials from their last checkpoints, the rest start",
    )
    return parser


_ADDRESS = re.compile(r"(?:ray://)?(?:\[[0-9A-Fa-f:.]+\]|[\w.-]+):(\d{1,5})")


def resolve_space(args: argparse.Namespace) -> tuple[SearchSpace, list[str]]:
    """The search space with command-line overrides applied and checked, before Ray starts."""
    try:
        space = load_space(args.space)
    except (OSError, UnicodeDecodeError) as error:  # unreadable, or not a text file
        raise ConfigError(f"--space: cannot read {args.space}: {error}") from None
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
        chosen = list(dict.fromkeys(v.strip() for v in args.variants.split(",") if v.strip()))  # each runs once
        unknown = [v for v in chosen if v not in space.variants]
        if unknown or not chosen:
            raise ConfigError(
                f"--variants: unknown variant(s) {', '.join(unknown) or '(none given)'}; "
                f"the file has: {', '.join(space.variants)}"
            )
        variants = chosen
    if args.address is not None:  # a malformed address would only fail inside ray.init, with a traceback
        match = _ADDRESS.fullmatch(args.address)
        if args.address not in ("auto", "local") and not (match and 1 <= int(match[1]) <= 65535):
            raise ConfigError(
                f"--address {args.address!r}: expected 'auto', 'local', host:port or ray://host:port "
                "with a port in 1..65535"
            )
    from raytune_fl.tune.storage import resolve_storage

    # made and write-probed (a wrong bucket or endpoint fails here, not in Ray); from here on a Storage
    args.storage = resolve_storage(args.storage)
    return space, variants


def check_data(base: ExperimentConfig) -> FederatedData:
    """The dataset and its partition, checked before any Ray process starts; errors name the field."""
    from raytune_fl.data import load_dataset
    from raytune_fl.engine.data import prepare_data

    spec = base.partition
    try:  # loaded first (and cached) so that missing or malformed files are reported against `root`
        samples = len(load_dataset(base.dataset, root=base.root).y_train)
    except (OSError, ValueError) as error:
        raise ConfigError(f"base.root: {error}") from None
    # the partitioner's own message would name its arguments, not the fields
    if spec.clients > samples:
        raise ConfigError(
            f"base.partition.clients: {spec.clients} clients but dataset {base.dataset!r} has {samples} "
            f"training samples; at most {samples}"
        )
    if spec.clients * spec.min_size > samples:
        raise ConfigError(
            f"base.partition.min_size: {spec.clients} clients x min_size {spec.min_size} exceed the {samples} "
            f"training samples of dataset {base.dataset!r}; at most {samples // spec.clients}"
        )
    try:
        return prepare_data(base)
    except (OSError, ValueError) as error:  # e.g. no Dirichlet draw gives every client min_size samples
        raise ConfigError(f"base.partition: {error}") from None


def join_ray(address: str | None, resources: ResourcesConfig) -> None:
    """Start or join Ray, say which cluster it is, and check that one trial fits on it."""
    from raytune_fl.tune.cluster import cluster_view
    from raytune_fl.tune.resources import check_fits, check_nodes_fit

    try:
        start_ray(address)
    except (ConnectionError, RuntimeError, TimeoutError) as error:  # unreachable head, auth token missing, ...
        source = "--address" if address else "RAY_ADDRESS"
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ConfigError(
            f"{source}: cannot join the Ray cluster: {first}\n"
            "  is the head running (`ray status --address <head>:6379`)? with token authentication, set "
            "RAY_AUTH_MODE=token and RAY_AUTH_TOKEN (README, 'Running on a cluster')"
        ) from None
    where, cluster, nodes = cluster_view()
    print(f"Ray cluster: {where} ({cluster.get('CPU', 0):g} CPU, {cluster.get('GPU', 0):g} GPU)", flush=True)
    try:
        check_fits(resources, cluster)
        check_nodes_fit(resources, nodes)
    except ValueError as error:
        raise ConfigError(str(error)) from None


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        space, variants = resolve_space(args)
    except (ConfigError, UnknownNameError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2

    try:
        data = check_data(space.base)
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    summary = data.num_clients, len(data.dataset.y_train), len(data.val_indices), len(data.dataset.y_test)
    print("data: {} clients, {} train samples ({} held out for validation), {} test samples".format(*summary))

    from raytune_fl.tracking import StudyTracker, default_tracking_uri

    uri = args.mlflow_uri or default_tracking_uri()
    print(f"MLflow tracking URI: {uri}  (experiment {space.name!r})", flush=True)
    print(f"Ray Tune results:    {args.storage.uri}", flush=True)
    from raytune_fl.tune.manifest import StudyManifest

    try:  # before Ray starts: a resume of a study that does not exist (or changed) fails here
        if args.resume:
            manifest = StudyManifest.load(args.storage, space, uri)
        else:
            manifest = StudyManifest.start(args.storage, space, uri)
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    try:
        tracker = StudyTracker(uri, space.name)
    except Exception as error:  # each tracking backend (files, SQLAlchemy, HTTP) fails with its own exception types
        print(f"error: --mlflow-uri: cannot use {uri}: {type(error).__name__}: {error}", file=sys.stderr)
        return 2

    from raytune_fl.tune import run_variant

    try:
        join_ray(args.address, space.base.resources)
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    started = time.time()
    outcomes = []
    for name in variants:
        done = manifest.outcome(name) if args.resume else None
        if done is not None:
            print(f"=== variant {name}: finished before the interruption, kept ===", flush=True)
            outcomes.append(done)
            continue
        print(f"=== variant {name} (method {space.variants[name].method}) ===", flush=True)
        outcome = run_variant(
            space,
            name,
            storage=args.storage,
            tracker=tracker,
            data=data,
            resume=manifest.run(name) if args.resume else None,
            on_start=lambda run, name=name: manifest.started(name, run),
        )
        manifest.finished(name, outcome)
        outcomes.append(outcome)
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
