"""What the command lines share: their common options, the checks of the command line and the data before Ray
starts, and joining the cluster. Each command is its own module (tune.py, ablate.py, dashboard.py).

Errors are `ConfigError`s naming the option or field; a command prints them as `error: ...` and exits with 2.
"""

from __future__ import annotations

import argparse
import atexit
import os
import re
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NoReturn

import yaml

from raytune_fl.config import ConfigError, ExperimentConfig, ResourcesConfig, SearchSpace, load_space, override

if TYPE_CHECKING:
    from raytune_fl.engine.data import FederatedData
    from raytune_fl.runtime.cluster import RayStart

SPACE_HELP = "search-space YAML file, e.g. search_spaces/univarfl.yaml"
MLFLOW_URI_HELP = "MLflow tracking URI; default: sqlite:///<cwd>/mlflow.db"


def command_parser(prog: str, description: str) -> argparse.ArgumentParser:
    """A command's parser, with the option every command has: --space."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--space", required=True, help=SPACE_HELP)
    parser.add_argument(
        "--plugin",
        action="append",
        default=[],
        metavar="MODULE",
        help="a module that registers your datasets, models or methods (README, 'Your own code'), imported before "
        "the space is checked and in every Ray worker; added to the file's `plugins` (repeatable)",
    )
    return parser


def add_overrides(parser: argparse.ArgumentParser) -> None:
    """--rounds, --variants and --set: what `resolve_space` applies to the file."""
    parser.add_argument("--rounds", type=int, help="override base.rounds")
    parser.add_argument("--variants", help="comma-separated subset of the file's variants, e.g. full,fedavg")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override any field by its dotted path, value in YAML, e.g. --set base.partition.alpha=0.5 "
        "--set variants.full.fixed.fidelity=official (repeatable; applied after the other options)",
    )


def add_cluster(parser: argparse.ArgumentParser) -> None:
    """--address, --mlflow-uri and --storage: where a study runs and what it writes to."""
    parser.add_argument(
        "--address",
        help="Ray cluster to join ('auto' or host:port); default: RAY_ADDRESS, else a private local cluster",
    )
    add_mlflow_uri(parser)
    parser.add_argument(
        "--storage",
        default="ray_results",
        help="where Ray Tune results, checkpoints and the study record go, reachable from every Ray node: a "
        "directory (on a cluster: shared, e.g. NFS), file:///dir, s3://bucket/prefix, gs://bucket/prefix or "
        "hdfs://host/path; another S3-compatible endpoint via AWS_ENDPOINT_URL (README) (default: %(default)s)",
    )


def add_mlflow_uri(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--mlflow-uri", help=MLFLOW_URI_HELP)


def tracking_uri(args: argparse.Namespace) -> str:
    from raytune_fl.tracking import default_tracking_uri

    return args.mlflow_uri or default_tracking_uri()


def exit_now(code: int) -> NoReturn:
    """A command's exit: the atexit handlers (Ray's shutdown, MLflow's and logging's flushes), then no interpreter
    teardown. With torch, Ray and MLflow loaded the teardown takes seconds (3.7 s measured after a study, no Python
    frame running) and writes nothing: everything a command produces is written by then."""
    if "ray" in sys.modules:
        from raytune_fl.runtime.cluster import stop_ray

        stop_ray()  # before the exit hooks, one of which is Ray's with its half-second wait
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def fail(message: object) -> int:
    """Say what is wrong on stderr; the exit code of a bad command line or input."""
    print(f"error: {message}", file=sys.stderr)
    return 2


_ADDRESS = re.compile(r"(?:ray://)?(?:\[[0-9A-Fa-f:.]+\]|[\w.-]+):(\d{1,5})")


def resolve_space(args: argparse.Namespace) -> tuple[SearchSpace, list[str]]:
    """The search space with command-line overrides applied and checked, before Ray starts."""
    try:
        space = load_space(args.space, plugins=args.plugin)
    except (OSError, UnicodeDecodeError) as error:  # unreadable, or not a text file
        raise ConfigError(f"--space: cannot read {args.space}: {error}") from None
    changes: dict[str, Any] = {}
    if args.rounds is not None:
        changes["base.rounds"] = args.rounds
    num_samples, seed = getattr(args, "num_samples", None), getattr(args, "seed", None)  # tune.py's own options
    if num_samples is not None:
        changes["tune.num_samples"] = num_samples
    if seed is not None:
        changes["base.seed"] = seed
        changes["tune.seed"] = seed
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
    from raytune_fl.runtime.storage import resolve_storage

    # made and write-probed (a wrong bucket or endpoint fails here, not in Ray); from here on a Storage
    args.storage = resolve_storage(args.storage)
    return space, variants


def check_data(base: ExperimentConfig) -> FederatedData:
    """The dataset and its partition, checked before any Ray process starts; errors name the field."""
    from raytune_fl.data import load_dataset
    from raytune_fl.engine.data import prepare_data

    spec = base.partition
    # where the data comes from: missing or malformed files are reported against that field
    field = "dataset_options" if base.dataset_options else "root"
    try:  # loaded first (and cached)
        dataset = load_dataset(base.dataset, root=base.root, options=base.dataset_settings)
    except (OSError, ValueError, TypeError) as error:
        raise ConfigError(f"base.{field}: {error}") from None
    samples = len(dataset.y_train)
    check_user_model(base.model, dataset.in_channels, dataset.num_classes, dataset.image_size)
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


def check_user_model(name: str, in_channels: int, num_classes: int, image_size: tuple[int, int]) -> None:
    """A plugin's model built once for the data, before Ray starts: a factory or forward that breaks the model
    contract fails here, naming base.model, not in every client actor. Built-in models are not built here (torch)."""
    from raytune_fl.models import MODELS

    if name not in MODELS.user_names():
        return
    from raytune_fl.models import build_model

    try:
        build_model(name, in_channels, num_classes, image_size)
    except Exception as error:  # the user's factory may raise anything
        text = str(error) if isinstance(error, ValueError) else f"model {name!r}: {type(error).__name__}: {error}"
        raise ConfigError(f"base.model: {text}") from None


def start_ray_early(address: str | None, plugins: Sequence[str]) -> RayStart | None:
    """A private local cluster's start, begun on a thread before the last checks (tune.py's MLflow and Optuna
    stores); None where Ray is joined instead (started in `join_ray`, once everything is checked)."""
    from raytune_fl.plugins import runtime_env
    from raytune_fl.runtime import cluster as ray_cluster

    if not ray_cluster.starts_private_cluster(address):
        return None
    return ray_cluster.RayStart(address, runtime_env(plugins))


def join_ray(
    address: str | None, resources: ResourcesConfig, started: RayStart | None = None, plugins: Sequence[str] = ()
) -> None:
    """Start or join Ray (or wait for the start `started` began) with the job's `plugins` imported in every worker,
    say which cluster it is, and check that one trial fits on it."""
    from raytune_fl.plugins import PluginError, runtime_env
    from raytune_fl.runtime import cluster as ray_cluster  # start_ray looked up at call time: tests replace it
    from raytune_fl.tune.resources import check_fits, check_nodes_fit

    try:
        if started is not None:
            started.wait()
        else:
            ray_cluster.start_ray(address, runtime_env(plugins))
    except PluginError as error:
        raise ConfigError(str(error)) from None
    except (ConnectionError, RuntimeError, TimeoutError) as error:  # unreachable head, auth token missing, ...
        source = "--address" if address else "RAY_ADDRESS"
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ConfigError(
            f"{source}: cannot join the Ray cluster: {first}\n"
            "  is the head running (`ray status --address <head>:6379`)? with token authentication, set "
            "RAY_AUTH_MODE=token and RAY_AUTH_TOKEN (README, 'Running on a cluster')"
        ) from None
    where, cluster, nodes = ray_cluster.cluster_view()
    print(f"Ray cluster: {where} ({cluster.get('CPU', 0):g} CPU, {cluster.get('GPU', 0):g} GPU)", flush=True)
    try:
        check_fits(resources, cluster)
        check_nodes_fit(resources, nodes)
    except ValueError as error:
        raise ConfigError(str(error)) from None
