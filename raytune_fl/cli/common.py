"""What the command lines share: their common options, the checks of the command line and the data before Ray
starts, and joining the cluster. Each command is its own module (tune.py, ablate.py, dashboard.py, reproduce.py).

A command checks everything first, creating nothing: the space and its overrides, --storage (made by
`make_storage` afterwards), --mlflow-uri (scheme, SQLite folder, a server's answer), --address (a quiet probe of a
few seconds, where Ray would retry for minutes), whether one trial fits on a private cluster, the data. Only then
does it start Ray and make folders, stores and records.

Errors are `ConfigError`s naming the option or field on their first line; a command prints them as `error: ...`
and exits with 2. Warnings (a field given twice on the command line) are one `WARNING: ...` line each on stderr.
"""

from __future__ import annotations

import argparse
import atexit
import os
import re
import shlex
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import yaml

from raytune_fl.config import (
    ConfigError,
    DuplicateKeyError,
    ExperimentConfig,
    OctalNumberError,
    ResourcesConfig,
    SearchSpace,
    check_client_count,
    did_you_mean,
    load_space,
    load_yaml,
    override,
)
from raytune_fl.methods import METHODS
from raytune_fl.paths import expand_home

if TYPE_CHECKING:
    from raytune_fl.data import ArrayDataset
    from raytune_fl.engine.data import FederatedData
    from raytune_fl.runtime.cluster import RayStart

SPACE_HELP = "search-space YAML file, e.g. search_spaces/univarfl.yaml"
MLFLOW_URI_HELP = "MLflow tracking URI; default: MLFLOW_TRACKING_URI, else sqlite:///<cwd>/mlflow.db"


def console_prog(script: str) -> str:
    """The program name usage lines show: `raytune-fl tune` when run as that (console.py names argv[0] so), else
    the script's file name."""
    return sys.argv[0] if sys.argv and sys.argv[0].startswith("raytune-fl ") else script


# each command's script in a clone, from its root
SCRIPTS = {
    "tune": "scripts/tune.py",
    "ablate": "scripts/ablate.py",
    "reproduce": "scripts/reproduce.py",
    "dashboard": "dashboards/build.py",
}


def command_line(command: str, argv0: str | None = None, cwd: str | Path | None = None) -> str:
    """How to type `command` ('tune', 'ablate', 'reproduce', 'dashboard') in the folder `cwd` (default: this
    process's), in the form this process was started with (`argv0`, default sys.argv[0]): `raytune-fl X` after
    `raytune-fl ...`; else `python` and the command's script, found from the one that was run and named as that one
    was typed: `python ../../scripts/ablate.py` after `python ../../scripts/tune.py` in examples/<x>/."""
    program = sys.argv[0] if argv0 is None else argv0
    if program.startswith("raytune-fl ") or Path(program).name == "raytune-fl":  # console.py names argv[0] so
        return f"raytune-fl {command}"
    return f"python {_script(command, program, Path.cwd() if cwd is None else Path(cwd))}"


def _script(command: str, program: str, cwd: Path) -> str:
    """The path to `command`'s script that works from `cwd`: found from the clone's script `program`, relative to
    `cwd` where it was typed relative or lies under `cwd`, else absolute; run some other way (`python -c`, a test),
    the path from a clone's root."""
    wanted = SCRIPTS[command]
    ran = Path(os.path.abspath(cwd / program))  # cwd / an absolute path is that path
    if ran.suffix == ".py" and ran.parent.name in ("scripts", "dashboards"):
        found = ran.parent.parent / wanted
        if found.is_file():
            relative = not Path(program).is_absolute() or found.is_relative_to(os.path.abspath(cwd))
            return shlex.quote(os.path.relpath(found, cwd) if relative else str(found))
    return wanted


def mlflow_ui_lines(uri: str, experiment_id: str, experiment: str, what: str = "the runs") -> list[str]:
    """How to compare `what` in the MLflow UI: the command and the page, for a "next" block."""
    from raytune_fl.tracking.urls import runs_url

    if uri.startswith("sqlite:"):
        return [
            f"  compare {what} in the MLflow UI:  mlflow ui --backend-store-uri {uri} --port 5000",
            f"    then open {runs_url('http://127.0.0.1:5000', experiment_id)}",
            f"    (experiment {experiment!r}, the runs table; docs/tutorial/reading-results.md)",
        ]
    if uri.startswith(("http://", "https://")):
        return [f"  compare {what} in the MLflow UI:  {runs_url(uri, experiment_id)}"]
    return [f"  compare {what} in the MLflow UI on {uri}, experiment {experiment!r}"]


def space_options(args: argparse.Namespace) -> list[str]:
    """The options that name a study's space as the user gave them (--space, each --plugin, --mlflow-uri): what
    the commands a "next" block prints need to find the same space, plugins and store."""
    options = ["--space", args.space]
    for plugin in getattr(args, "plugin", None) or []:
        options += ["--plugin", plugin]
    if getattr(args, "mlflow_uri", None):
        options += ["--mlflow-uri", args.mlflow_uri]
    return options


def command_parser(prog: str, description: str) -> argparse.ArgumentParser:
    """A command's parser, with the option every command has: --space."""
    parser = argparse.ArgumentParser(prog=console_prog(prog), description=description)
    parser.add_argument("--space", required=True, type=expand_home, help=SPACE_HELP)
    parser.add_argument(
        "--plugin",
        action="append",
        default=[],
        metavar="MODULE",
        help="a module that registers your datasets, models or methods (docs/how-to/plugins.md), imported before "
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
        type=expand_home,
        help="where Ray Tune results, checkpoints and the study record go, reachable from every Ray node: a "
        "directory (on a cluster: shared, e.g. NFS), file:///dir, s3://bucket/prefix, gs://bucket/prefix or "
        "hdfs://host/path; another S3-compatible endpoint via AWS_ENDPOINT_URL (docs/how-to/storage.md) "
        "(default: %(default)s)",
    )


def add_mlflow_uri(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--mlflow-uri", type=expand_home, help=MLFLOW_URI_HELP)


def tracking_uri(args: argparse.Namespace) -> str:
    from raytune_fl.tracking import default_tracking_uri

    from_env = expand_home(os.environ.get("MLFLOW_TRACKING_URI", ""))  # quoted in a job script: not expanded
    return args.mlflow_uri or from_env or default_tracking_uri()


EXIT_HOOKS_S = 8.0  # a stopped command's exit hooks, at most: well inside Slurm's KillWait (30 s by default)


def exit_now(code: int) -> NoReturn:
    """A command's exit: the atexit handlers (Ray's shutdown, MLflow's and logging's flushes), then no interpreter
    teardown. With torch, Ray and MLflow loaded the teardown takes seconds (3.7 s measured after a study, no Python
    frame running) and writes nothing: everything a command produces is written by then. The exit code is decided:
    a Ctrl-C or SIGTERM during these last seconds (a second one after a stop, say) ends the process with it."""
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: os._exit(code))
    if code in (130, 143):  # a stopped command: its cluster may be gone with the job (scancel), and Ray's shutdown
        # and Tune's exit hook then wait on its GCS without a limit; past EXIT_HOOKS_S the process ends regardless
        # (its lines are printed and flushed by then: no flush here, which could wait on a lock the stuck thread holds)
        watchdog = threading.Timer(EXIT_HOOKS_S, os._exit, (code,))
        watchdog.daemon = True
        watchdog.start()
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

# the options that set a field themselves: a --set of the same field is applied after them (and wins)
_OPTION_FIELDS = {"rounds": ("base.rounds",), "num_samples": ("tune.num_samples",), "seed": ("base.seed", "tune.seed")}


def warn(message: str) -> None:
    """One line on stderr that the command goes on after."""
    print(f"WARNING: {message}", file=sys.stderr, flush=True)


def resolve_space(args: argparse.Namespace, warnings: bool = True) -> tuple[SearchSpace, list[str]]:
    """The search space with command-line overrides applied and checked, before Ray starts; `args.storage` checked
    (nothing made: `make_storage` makes it once every check passed) and replaced by its Storage. `warnings`: say
    on stderr which value is used where the command line gives one field twice."""
    try:
        space = load_space(args.space, plugins=args.plugin)
    except (OSError, UnicodeDecodeError) as error:  # unreadable, or not a text file
        raise ConfigError(f"--space: cannot read {args.space}: {error}") from None
    changes, notes = _overrides(args)
    if changes:
        space = override(space, changes, source=f"{args.space} with command-line overrides")
    notes += [note for note in (client_batch_note(space.base), asha_note(space)) if note]
    if warnings:
        for note in notes:
            warn(note)
    variants = _chosen_variants(args.variants, space)
    if args.address is not None:  # a malformed address would only fail inside ray.init, with a traceback
        _check_address_form("--address", args.address)
    from raytune_fl.runtime.storage import check_storage

    # checked (a wrong bucket or endpoint fails here, not in Ray), made by make_storage; from here on a Storage
    args.storage = check_storage(args.storage)
    if args.storage.is_local:  # a Ray job's temporary working dir keeps nothing
        from raytune_fl.runtime.cluster import check_outside_job_dir

        check_outside_job_dir(args.storage.path, "--storage")
    if any(space.variants[v].method in METHODS.user_names() for v in variants):  # issue 46: a plugin's method
        from raytune_fl.testing.method_check import check_plugin_methods  # torch: only where there is one

        check_plugin_methods(space, variants)  # built and run two tiny rounds, its state through a checkpoint
    return space, variants


def _overrides(args: argparse.Namespace) -> tuple[dict[str, Any], list[str]]:
    """The fields the command line changes (the options, then each --set, which wins), and a note for each field
    given twice."""
    changes: dict[str, Any] = {}
    given: dict[str, tuple[str, Any]] = {}  # field -> the option that set it and its value
    for name, fields in _OPTION_FIELDS.items():
        value = getattr(args, name, None)  # --num-samples and --seed: tune.py's own options
        if value is not None:
            for key in fields:
                changes[key] = value
                given[key] = (f"--{name.replace('_', '-')}", value)
    notes: list[str] = []
    set_texts: dict[str, str] = {}
    for item in args.set:
        key, text = _set_item(item, changes)
        if key in set_texts:
            notes.append(f"--set {key} is given twice ({set_texts[key]}, then {text}): the last, {text}, is used")
        set_texts[key] = text
    for key, (option, value) in given.items():  # an option and a --set of its field that disagree: --set wins
        if key in set_texts and changes[key] != value:
            note = f"{key}: --set {key}={set_texts[key]} and {option} {value} disagree: {set_texts[key]} is used "
            note += "(--set is applied after the other options)"
            other = {"base.seed": "tune.seed", "tune.seed": "base.seed"}.get(key)
            if other and other not in set_texts:
                note += f"; {other} stays {value} from {option}"
            notes.append(note)
    return changes, notes


def _set_item(item: str, changes: dict[str, Any]) -> tuple[str, str]:
    """One --set KEY=VALUE into `changes` (its value read as YAML); the key and the value's text."""
    key, sep, text = item.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(f"--set {item!r}: expected KEY=VALUE, e.g. base.rounds=5")
    try:
        changes[key] = load_yaml(text)  # a flow mapping may give a key twice too: {fixed: {mu: 1, mu: 2}}
    except DuplicateKeyError as error:
        raise ConfigError(
            f"{key}.{error.path}: given twice in --set {item}; YAML would silently keep the last value, so keep one"
        ) from None
    except OctalNumberError as error:
        where = f"{key}.{error.path}" if error.path else key
        raise ConfigError(f"{where}: {error.detail} (in --set {item})") from None
    except yaml.YAMLError as error:
        raise ConfigError(f"--set {key}: the value is not valid YAML: {error}") from None
    return key, text


def _chosen_variants(option: str | None, space: SearchSpace) -> list[str]:
    """--variants (each once, in the order given), else every variant of the file."""
    if not option:
        return list(space.variants)
    chosen = list(dict.fromkeys(v.strip() for v in option.split(",") if v.strip()))  # each runs once
    unknown = [v for v in chosen if v not in space.variants]
    if unknown or not chosen:
        hint = did_you_mean(unknown[0], space.variants) if len(unknown) == 1 else ""
        raise ConfigError(
            f"--variants: unknown variant(s) {', '.join(unknown) or '(none given)'}; {hint}"
            f"the file has: {', '.join(space.variants)}"
        )
    return chosen


def asha_note(space: SearchSpace) -> str | None:
    """The warning where the grace period leaves ASHA nothing to stop: a file's grace period meant for longer runs
    (a quick `--rounds 2` is a fine reason; a silent switch-off is not)."""
    asha = space.tune.scheduler.asha
    if asha is None or asha.grace_period is None or asha.grace_period < space.base.rounds:
        return None
    if not any(variant.search for variant in space.variants.values()):
        return None  # nothing is searched: every variant runs once, ASHA or not
    return (
        f"tune.scheduler.asha.grace_period: {asha.grace_period} is not below base.rounds {space.base.rounds}: ASHA "
        "stops no trial early (every trial runs every round)"
    )


def client_batch_note(base: ExperimentConfig) -> str | None:
    """The warning where resources.client_batch asks for more clients at once than a round trains: the engine trains
    at most those together (engine/federation.py's client_batch caps it), so the training is the same."""
    if base.partition.clients_from_data:
        return None  # the count is the data's: engine/federation.py caps client_batch at the round's clients
    batch, per_round = base.resources.client_batch, base.clients_per_round()
    if batch == "auto" or batch <= per_round:
        return None
    return (
        f"base.resources.client_batch: {batch} is more than the {per_round} clients a round trains (participation "
        f"{base.participation:g} of {base.partition.clients} clients); {per_round} is used"
    )


def _check_address_form(source: str, address: str) -> None:
    match = _ADDRESS.fullmatch(address)
    if address not in ("auto", "local") and not (match and 1 <= int(match[1]) <= 65535):
        raise ConfigError(
            f"{source} {address!r}: expected 'auto', 'local', host:port or ray://host:port with a port in 1..65535"
        )


def check_address(address: str | None) -> None:
    """The cluster `address` (else RAY_ADDRESS) names answers, before anything is written or Ray starts: a quiet
    probe of a few seconds (runtime/cluster.py::check_address), where Ray would retry for minutes; errors name
    the option, or the variable, that gave the address."""
    from raytune_fl.runtime import cluster

    source = "--address" if address else "RAY_ADDRESS"
    effective = address or os.environ.get("RAY_ADDRESS")
    if not effective:
        return  # a private local cluster
    if source == "RAY_ADDRESS":
        _check_address_form(source, effective)
    try:
        cluster.check_address(effective)
    except (ConnectionError, ValueError) as error:
        raise ConfigError(f"{source}: cannot join the Ray cluster: {error}") from None


def check_cluster_fits(address: str | None, resources: ResourcesConfig, precision: str = "fp32") -> None:
    """Where the command would start a private local cluster: that one trial fits on it, counted before it starts
    (`join_ray` checks a joined cluster, and this one again, once it is up), and this CPU runs `precision` where
    the trials compute on it (a trial would refuse it only once Ray and MLflow are up)."""
    from raytune_fl.devices import bf16_refusal, local_cpu_has_bf16
    from raytune_fl.runtime import cluster
    from raytune_fl.tune.resources import check_fits, check_nodes_fit

    if not cluster.starts_private_cluster(address):
        return
    refusal = bf16_refusal(precision, resources, local_cpu_has_bf16() if precision == "bf16" else None)
    if refusal is not None:
        raise ConfigError(refusal)
    totals = cluster.private_cluster_resources()
    if totals is None:
        return
    try:
        check_fits(resources, totals)
        check_nodes_fit(resources, [totals])
    except ValueError as error:
        raise ConfigError(f"{error} (this machine's private Ray cluster)") from None


def check_mlflow_uri(args: argparse.Namespace) -> str:
    """The tracking URI (the option's, else the default), checked before anything is written: MLflow's own
    environment variables (tracking/environment.py), the URI's scheme, its SQLite file's folder, its server's answer
    (tracking/uri_check.py)."""
    from raytune_fl.runtime.cluster import check_store_outside_job_dir
    from raytune_fl.tracking.environment import check_mlflow_environment
    from raytune_fl.tracking.uri_check import check_tracking_uri

    check_mlflow_environment()  # first: the URI check itself reads MLFLOW_TRACKING_INSECURE_TLS
    uri = tracking_uri(args)
    environ = "MLFLOW_TRACKING_URI" if os.environ.get("MLFLOW_TRACKING_URI") else "--mlflow-uri (the default)"
    option = "--mlflow-uri" if args.mlflow_uri else environ
    check_tracking_uri(uri, option)
    check_store_outside_job_dir(uri, option)  # a Ray job's temporary working dir keeps nothing
    return uri


def check_new_folder(path: Path, option: str) -> None:
    """That `option`'s folder exists and takes files, or can be made; nothing is made."""
    from raytune_fl.runtime.cluster import check_outside_job_dir
    from raytune_fl.runtime.storage import check_creatable

    check_outside_job_dir(path, option)  # a Ray job's temporary working dir keeps nothing
    try:
        check_creatable(path)
    except OSError as error:
        raise ConfigError(f"{option}: cannot create {path}: {error.strerror or error}") from None


def check_data(base: ExperimentConfig, methods: Sequence[str] = ()) -> FederatedData:
    """The dataset and its partition, checked before any Ray process starts, with the model and `methods` it
    trains (the variants'); errors name the field."""
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
    check_modality(base, dataset, methods)
    channels, size = dataset.model_inputs
    check_user_model(base.model, channels, dataset.num_classes, size, dataset.is_text)
    # the partitioner's own message would name its arguments, not the fields (natural clients: none set)
    if not spec.clients_from_data:
        _check_client_fields(base, samples)
    try:
        data = prepare_data(base)
    except ConfigError:  # names its own field (engine/data.py's check_steps: base.batch_size, partition.min_size)
        raise
    except (OSError, ValueError) as error:  # e.g. no Dirichlet draw gives every client min_size samples
        raise ConfigError(f"base.partition: {error}") from None
    if spec.clients_from_data:  # what the config could not check before the data gave the clients' count
        try:
            check_client_count(base, data.num_clients, source=f"the {data.num_clients} clients {spec.partitioner} made")
        except ValueError as error:
            raise ConfigError(f"base.{error}") from None
    return data


def _check_client_fields(base: ExperimentConfig, samples: int) -> None:
    spec = base.partition
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


def check_modality(base: ExperimentConfig, dataset: ArrayDataset, methods: Sequence[str] = ()) -> None:
    """Refuse what needs the other kind of data, naming the field: an image model or image augmentation on text,
    a text model on images, a method that runs only on an image model (MethodSpec.image_model)."""
    from raytune_fl.models import MODELS
    from raytune_fl.models.registry import TEXT_MODELS

    kind = "text (token ids (N, L))" if dataset.is_text else "images (N, C, H, W)"
    holds = f"dataset {dataset.name!r} holds {kind}"
    built_in = base.model not in MODELS.user_names()
    if built_in and dataset.is_text != (base.model in TEXT_MODELS):
        wanted = ", ".join(sorted(TEXT_MODELS if dataset.is_text else set(MODELS.names()) - TEXT_MODELS))
        needs = "reads token ids (text)" if base.model in TEXT_MODELS else "needs images"
        raise ConfigError(f"base.model: {base.model} {needs}, and {holds}; use one of {wanted}")
    if not dataset.is_text:
        return
    if base.augment.crop_padding or base.augment.horizontal_flip:
        raise ConfigError(f"base.augment: crops and flips are image augmentations, and {holds}; remove base.augment")
    if base.resources.channels_last and "channels_last" in base.resources.model_fields_set:
        raise ConfigError(f"base.resources.channels_last: NHWC is a layout of images, and {holds}; remove it")
    for method in dict.fromkeys(methods):
        why = METHODS.get(method).image_model
        if why:
            raise ConfigError(f"method {method!r} runs only on an image model ({why}), and {holds}")


def check_user_model(
    name: str, in_channels: int, num_classes: int, image_size: tuple[int, int], text: bool = False
) -> None:
    """A plugin's model built once for the data, before Ray starts: a factory or forward that breaks the model
    contract fails here, naming base.model, not in every client actor. Built-in models are not built here (torch)."""
    from raytune_fl.models import MODELS

    if name not in MODELS.user_names():
        return
    from raytune_fl.models import build_model

    try:
        build_model(name, in_channels, num_classes, image_size, text)
    except Exception as error:  # the user's factory may raise anything
        said = str(error) if isinstance(error, ValueError) else f"model {name!r}: {type(error).__name__}: {error}"
        raise ConfigError(f"base.model: {said}") from None


def start_ray_early(address: str | None, plugins: Sequence[str]) -> RayStart | None:
    """A private local cluster's start, once every check passed, begun on a thread while tune.py makes its MLflow
    and Optuna stores; None where Ray is joined instead (`join_ray`)."""
    from raytune_fl.plugins import runtime_env
    from raytune_fl.runtime import cluster as ray_cluster

    if not ray_cluster.starts_private_cluster(address):
        return None
    print(f"{_RAY_STARTS}...", flush=True)  # a phase (cli/progress.py): `join_ray` waits for its end
    return ray_cluster.RayStart(address, runtime_env(plugins))


_RAY_STARTS = "starting Ray (a private local cluster)"


def join_ray(
    address: str | None, resources: ResourcesConfig, started: RayStart | None = None, plugins: Sequence[str] = ()
) -> None:
    """Start or join Ray (or wait for the start `started` began) with the job's `plugins` imported in every worker,
    say which cluster it is, and check that one trial fits on it."""
    from raytune_fl.plugins import PluginError
    from raytune_fl.runtime import cluster as ray_cluster
    from raytune_fl.tune.resources import check_fits, check_nodes_fit

    try:
        _start_ray(address, started, plugins)
    except PluginError as error:
        raise ConfigError(str(error)) from None
    except (ConnectionError, RuntimeError, TimeoutError) as error:  # unreachable head, auth token missing, ...
        source = "--address" if address else "RAY_ADDRESS"
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ConfigError(
            f"{source}: cannot join the Ray cluster: {first}\n"
            "  is the head running (`ray status --address <head>:6379`)? with token authentication, set "
            "RAY_AUTH_MODE=token and RAY_AUTH_TOKEN (docs/how-to/cluster.md)"
        ) from None
    where, cluster, nodes = ray_cluster.cluster_view()
    print(f"Ray cluster: {where} ({cluster.get('CPU', 0):g} CPU, {cluster.get('GPU', 0):g} GPU)", flush=True)
    try:
        check_fits(resources, cluster)
        check_nodes_fit(resources, nodes)
    except ValueError as error:
        raise ConfigError(str(error)) from None


def _start_ray(address: str | None, started: RayStart | None, plugins: Sequence[str]) -> None:
    """Start or join Ray, or wait for the start `started` began, saying so (a phase: cli/progress.py)."""
    from raytune_fl.cli import progress
    from raytune_fl.plugins import runtime_env
    from raytune_fl.runtime import cluster as ray_cluster  # start_ray looked up at call time: tests replace it

    if started is not None:  # said when it began; said again only if the wait is long
        with progress.during(f"{_RAY_STARTS}: waiting for it"):
            started.wait()
        return
    joined = address or os.environ.get("RAY_ADDRESS")
    if ray_cluster.starts_private_cluster(address):
        print(f"{_RAY_STARTS}...", flush=True)
    elif joined and joined != "local":
        print(f"joining the Ray cluster at {joined}...", flush=True)
    ray_cluster.start_ray(address, runtime_env(plugins))
