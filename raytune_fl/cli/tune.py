"""`scripts/tune.py`: one Optuna-driven Tune study per ablation variant of a search-space file."""

from __future__ import annotations

import argparse
import shlex
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import TYPE_CHECKING

from raytune_fl.cli import common, progress, stopping
from raytune_fl.config import ConfigError, Objective, SearchSpace, TuneSettings
from raytune_fl.metrics import EPSILON, ROUND, TEST_ACC, VAL_ACC
from raytune_fl.registry import UnknownNameError
from raytune_fl.tracking.records import ENDED_STATUSES
from raytune_fl.tracking.schema import LEFT_RUNNING, TRIAL_ERROR, study_key
from raytune_fl.tune import interrupt
from raytune_fl.tune.uncertainty import NOISE_Z, accuracy_se, has_binomial_se, within_noise

if TYPE_CHECKING:
    from pathlib import Path

    from raytune_fl.engine.data import FederatedData
    from raytune_fl.export.model_helper import ModelExporter
    from raytune_fl.runtime.cluster import RayStart
    from raytune_fl.tracking import StudyTracker
    from raytune_fl.tune.manifest import StudyManifest
    from raytune_fl.tune.outcome import VariantOutcome
    from raytune_fl.tune.study import StudyOptions
    from raytune_fl.tune.warm_start import WarmPlan, WarmPoints


def build_parser() -> argparse.ArgumentParser:
    parser = common.command_parser(
        "tune.py",
        "Tune each ablation variant of a search-space file with Ray Tune + Optuna (TPE) + ASHA; "
        "log every trial and round to MLflow.",
    )
    common.add_overrides(parser)
    parser.add_argument("--num-samples", type=int, help="override tune.num_samples (trials per searched variant)")
    parser.add_argument(
        "--per-setting",
        action="append",
        default=[],
        metavar="KEY=V1,V2",
        help="tune each variant separately at every setting of this grid (as ablate's --grid, e.g. alpha=0.01,1.0; "
        "repeat for more axes); `ablate --grid ... --per-setting` then runs each setting with its own selection",
    )
    parser.add_argument("--seed", type=int, help="override base.seed (training) and tune.seed (TPE sampler)")
    common.add_cluster(parser)
    parser.add_argument(
        "--optuna-storage",
        metavar="URL",
        type=common.expand_home,
        help="Optuna storage (SQLAlchemy URL, e.g. sqlite:///path/optuna.db or postgresql://user:pw@host/db) each "
        "searched variant's study <space name>-<variant> persists to, for optuna.load_study and optuna-dashboard; "
        "default: optuna.db beside the MLflow SQLite file, else <cwd>/optuna.db",
    )
    parser.add_argument(
        "--no-models",
        action="store_true",
        help="do not log each variant's best global model as an MLflow PyTorch model (a few seconds per variant)",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="continue the study a killed run left in --storage (same --space and overrides): finished variants "
        "are kept, the interrupted one resumes its trials from their last checkpoints, the rest start",
    )
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="also print a line when each trial starts and one per trial round (its scores, loss and round time); "
        "by default a live status line per variant (a line per trial and a summary every 30 s when not a terminal)",
    )
    from raytune_fl.tracking.system_metrics import SYSTEM_METRICS_HELP, SystemMetricsFlag  # MLflow's switch

    parser.add_argument("--system-metrics", action=SystemMetricsFlag, help=SYSTEM_METRICS_HELP)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    state = stopping.StopState("before any variant started")
    with stopping.guarded("tune", argv), progress.watch_silences():  # a line when a phase is silent for long
        try:
            return _main(args, state)
        except stopping.StudyInterrupted as stop:  # Ctrl-C or SIGTERM: what was cut is said, --resume goes on
            return state.stopped(stop)


@dataclass(frozen=True)
class Stores:
    """What the study writes to, opened once every check passed."""

    uri: str  # MLflow's
    tracker: StudyTracker
    manifest: StudyManifest  # the study record --resume continues from
    optuna_url: str | None  # the Optuna storage (None: nothing searched)


def _main(args: argparse.Namespace, state: stopping.StopState) -> int:
    try:  # every check, before anything is written and before Ray starts
        space, variants = common.resolve_space(args)
        if space.base.partition.val_fraction == 0:  # tuning selects on validation, never on the test set
            raise ConfigError(
                f"base.partition.val_fraction: 0 leaves no validation split for tune.metric {space.tune.primary!r}; "
                "hold some out (e.g. 0.1), or run the fixed variants with "
                f"{common.command_line('ablate')} --ignore-studies"
            )
        uri = common.check_mlflow_uri(args)
        optuna_url, optuna_new = _check_optuna_storage(args, space, variants, uri)
        common.check_address(args.address)
        common.check_cluster_fits(args.address, space.base.resources, space.base.precision)
        manifest = _resumed_manifest(args, space, uri, optuna_url) if args.resume else None
        studies = _warm_started(space, _studies(args, space, variants), uri)
    except (ConfigError, UnknownNameError) as error:
        return common.fail(error)
    _print_data(studies)
    # what the study writes, made from here on; a store that fails to open ends this cluster again
    ray_start = common.start_ray_early(args.address, space.plugins)
    if ray_start is None:  # a cluster to join: joined, and one trial's fit on it checked, before anything is made
        try:
            common.join_ray(args.address, space.base.resources, plugins=space.plugins)
        except ConfigError as error:
            return common.fail(error)
    try:
        tracker, manifest = _open_stores(args, space, uri, (optuna_url, optuna_new), manifest)
        state.resumable = True  # from here on a stop leaves a study --resume continues
    except BaseException as error:
        code = common.fail(error) if isinstance(error, ConfigError) else None  # said before the cluster's end
        if ray_start is not None:
            ray_start.cancel()
        if code is None:
            raise
        return code

    from raytune_fl.export.model_helper import ModelExporter

    # its process starts now (milliseconds) and gets ready on idle CPU time (export/model_helper.py)
    exporter = None if args.no_models else ModelExporter(uri, space.name, space.plugins)
    try:
        stores = Stores(uri, tracker, manifest, optuna_url)
        return _run_variants(args, space, studies, stores, exporter, ray_start, state)
    finally:
        if exporter is not None:
            exporter.close()


def _print_data(studies: list[VariantStudy]) -> None:
    """Each setting's data, one line (the file's base: one line)."""
    for setting, data in {s.setting: s.data for s in studies}.items():
        at = f" at {setting}" if setting else ""
        print(
            f"data{at}: {data.num_clients} clients, {len(data.dataset.y_train)} train samples "
            f"({len(data.val_indices)} held out for validation), {len(data.dataset.y_test)} test samples"
        )


@dataclass(frozen=True)
class VariantStudy:
    """One study the command runs: a variant, at the file's base or (--per-setting) at one grid setting."""

    variant: str
    setting: str | None  # as fields, e.g. partition.alpha=0.1 (what `ablate --per-setting` finds it by)
    space: SearchSpace  # the file's, its base at the setting
    data: FederatedData
    warm_start: WarmPlan | None = None  # the configurations it tries first: where from (tune/warm_start.py)
    warm_points: WarmPoints | None = None  # those of an MLflow source, read before anything runs

    @property
    def key(self) -> str:  # the study manifest's entry
        return study_key(self.variant, self.setting)


def _studies(args: argparse.Namespace, space: SearchSpace, variants: list[str]) -> list[VariantStudy]:
    """Each variant's study; with --per-setting, one per variant and setting, setting by setting, each checked."""
    methods = [space.variants[name].method for name in variants]
    if not args.per_setting:
        data = common.check_data(space.base, methods)
        return [VariantStudy(name, None, space, data) for name in variants]
    from raytune_fl.ablation.grid import as_fields, check_not_overridden, parse_grid, settings

    studies = []
    axes = as_fields(parse_grid(args.per_setting, "--per-setting"))
    chosen = {name: space.variants[name] for name in variants}
    own_optimizer = [name for name, v in chosen.items() if v.optimizer is not None]
    check_not_overridden(axes, {n: {*v.fixed, *v.search} for n, v in chosen.items()}, own_optimizer, "--per-setting")
    for setting, experiment in settings(space, axes, "--per-setting").items():
        try:
            data = common.check_data(experiment, methods)
        except ConfigError as error:
            raise ConfigError(f"--per-setting {setting}: {error}") from None
        at_setting = space.model_copy(update={"base": experiment})
        studies += [VariantStudy(name, setting, at_setting, data) for name in variants]
    return studies


def _warm_started(space: SearchSpace, studies: list[VariantStudy], uri: str) -> list[VariantStudy]:
    """The studies with their warm starts planned (a source that runs later is refused), those from a study in
    MLflow read and fitted now, before anything is written."""
    from raytune_fl.tracking.store import store_exists
    from raytune_fl.tune.warm_start import from_mlflow, plan

    plans = plan(space, [(study.variant, study.setting) for study in studies])
    planned = []
    for study in studies:
        warm = plans.get(study.key)
        points = None
        if warm is not None and warm.mlflow_run is not None:
            if not store_exists(uri):  # a client would make the store; a refusal writes nothing
                raise ConfigError(f"{warm.field}.from: no MLflow store at {uri} to read run {warm.mlflow_run} from")
            search, tune = space.variants[study.variant].search, space.tune
            points = from_mlflow(uri, warm, search, study.key, tune.primary, tune.mode == "max")
        planned.append(replace(study, warm_start=warm, warm_points=points))
    return planned


def _warm_points(study: VariantStudy, outcomes: list[VariantOutcome]) -> WarmPoints | None:
    """What `study` tries first: the top of its source's study (which ran before it), fitted to its ranges, or of
    the MLflow study read before Ray started; refused (ConfigError) where they do not fit."""
    from raytune_fl.tune.warm_start import fitted, from_outcome

    warm = study.warm_start
    if warm is None or warm.study is None:
        return study.warm_points
    source = next((o for o in outcomes if _key(o) == warm.study), None)
    if source is None:  # tune/warm_start.py's plan: it ran first
        raise RuntimeError(f"warm start of {study.key}: its source study {warm.study} has not run")
    search = study.space.variants[study.variant].search
    return fitted(from_outcome(warm, source.ranked, source.parent_run_id), search, warm, study.key)


def _run_variants(
    args: argparse.Namespace,
    space: SearchSpace,
    studies: list[VariantStudy],
    stores: Stores,
    exporter: ModelExporter | None,
    ray_start: RayStart | None,
    state: stopping.StopState,
) -> int:
    """Wait for a private cluster's start (a joined one is joined already) and run each variant's study; the summary
    and what to run next."""
    from raytune_fl.tracking.records import partition_title
    from raytune_fl.tune.study import StudyOptions

    # drawn on a thread while Ray finishes its start and the first variant sets up; its parent run logs it there
    for study in studies:
        stores.tracker.render_partition(study.data, partition_title(study.space.base))
    if ray_start is not None:  # a private cluster's start, begun beside the stores' opening (else joined already)
        try:
            common.join_ray(args.address, space.base.resources, ray_start, space.plugins)
        except ConfigError as error:
            return common.fail(error)
    interrupt.reassert()  # ray.init on this thread (a joined cluster) sets its own SIGTERM handler
    started = time.time()
    options = StudyOptions(
        args.storage, stores.tracker, log_model=not args.no_models, optuna_storage=stores.optuna_url, exporter=exporter
    )
    try:
        outcomes = _each_study(args, studies, stores.manifest, options, state)
    except ConfigError as error:  # a warm start's source that does not fit, or a trial's config error: no "next"
        return common.fail(error)
    state.cut = "every variant had finished; the summary was not printed"
    # every variant's scores are over the same validation images (a setting's own partition: the outcomes say)
    val_samples = None if args.per_setting else len(studies[0].data.val_indices)
    wall_s = time.time() - started
    print_summary(
        outcomes, stores.uri, space.name, wall_s, tune=space.tune, val_samples=val_samples, tuning_seed=space.base.seed
    )
    print_next_steps(args, stores.uri, space.name, stores.tracker.experiment_id, outcomes)
    return 0 if all(o.best_metrics for o in outcomes) else 1


def _each_study(
    args: argparse.Namespace,
    studies: list[VariantStudy],
    manifest: StudyManifest,
    options: StudyOptions,
    state: stopping.StopState,
) -> list[VariantOutcome]:
    """Each study in turn (with --resume, a finished one kept), recorded in the study record as it goes; `state`
    says what a stop would cut."""
    from raytune_fl.tune import run_variant
    from raytune_fl.tune.study import StudyAt

    outcomes: list[VariantOutcome] = []
    keys = [study.key for study in studies]
    for index, study in enumerate(studies):
        key, name = study.key, study.variant
        run_state = manifest.state(key) if args.resume else "new"
        state.cut = _cut(None, [_key(o) for o in outcomes], keys[index:])  # a stop between variants
        kept = manifest.outcome(key) if run_state == "finished" else None
        if kept is not None:
            print(f"=== variant {key}: finished before the interruption, kept ===", flush=True)
            outcomes.append(kept)
            continue
        method = study.space.variants[name].method
        warm_start = _warm_points(study, outcomes)  # before the study's header: a refusal starts nothing
        print(f"=== variant {key} (method {method}){_RESUMING.get(run_state, '')} ===", flush=True)
        if warm_start is not None:
            described = warm_start.describe() if warm_start.configs else ""
            print(_warm_line(key, described, warm_start.source), flush=True)
        try:
            outcome = run_variant(
                study.space,
                name,
                replace(options, watch=progress.console(args.verbose)),
                data=study.data,
                resume=manifest.run(key) if run_state in ("interrupted", "killed") else None,
                on_start=partial(manifest.started, key),
                at=StudyAt(study.setting, warm_start),
            )
        except ConfigError as error:  # a trial's (tune/refusal.py) or a warm start's: the record says so
            manifest.refused(key, str(error))
            raise
        except stopping.StudyInterrupted as stop:
            manifest.interrupted(key, stop.name)
            state.cut = _cut(key, [_key(o) for o in outcomes], keys[index + 1 :], getattr(stop, LEFT_RUNNING, None))
            raise
        manifest.finished(key, outcome)
        outcomes.append(outcome)
    return outcomes


# what --resume does with a variant the study record names as started but not finished (tune/manifest.py)
_RESUMING = {
    "interrupted": ": interrupted; its finished trials kept, the cut ones resumed from their checkpoints",
    "killed": ": its driver was killed; its finished trials kept, the cut ones resumed from their checkpoints",
    "refused": ": a configuration error stopped its last try (its parent run FAILED); started afresh",
}


def _warm_line(key: str, described: str, source: str = "") -> str:
    """One line on a study's warm start: what it tried first, or that its source had nothing to give."""
    if described:
        return f"[{key}] warm-started with {described}"
    return f"[{key}] warm start: {source or 'its source'} has no trial that ran every round; it starts cold"


def _key(outcome: VariantOutcome) -> str:
    return study_key(outcome.variant, outcome.setting)


def _cut(variant: str | None, finished: list[str], left: list[str], left_running: str | None = None) -> str:
    """One line: the variant whose study was cut (nothing selected for it), and the others' state. `left_running`:
    the parent run MLflow could not close at the stop (the warning above says so), which stays RUNNING."""
    parts = []
    if variant is not None:
        run = f"its parent run {left_running} left RUNNING" if left_running else "its parent run KILLED"
        parts.append(f"variant {variant!r} stopped mid-study, nothing selected for it ({run})")
    if finished:
        parts.append(f"finished: {', '.join(finished)}")
    if left:
        parts.append(f"not started: {', '.join(left)}")
    return "; ".join(parts) or "before any variant started"


def _check_optuna_storage(
    args: argparse.Namespace, space: SearchSpace, variants: list[str], uri: str
) -> tuple[str | None, bool]:
    """The Optuna storage URL the searched variants persist to (None: nothing searched, no Optuna study, no file),
    its form and (SQLite) folder checked, and an existing database opened and write-probed; a new SQLite file is
    made (and probed) by `_open_stores`: whether it is one comes second."""
    if not any(space.variants[name].search for name in variants):
        return None, False
    from raytune_fl.runtime import cluster, optuna_storage

    url = optuna_storage.resolve_url(args.optuna_storage, uri)
    optuna_storage.check_form(url, given=args.optuna_storage is not None)
    option = "--optuna-storage" if args.optuna_storage is not None else "--optuna-storage (the default)"
    cluster.check_store_outside_job_dir(url, option)  # a Ray job's temporary working dir keeps nothing
    new = optuna_storage.is_new_file(url)
    if not new:  # a database server, an existing file: opened and write-probed now (the probe study deleted)
        optuna_storage.check(url, given=args.optuna_storage is not None)
    return url, new


def _resumed_manifest(args: argparse.Namespace, space: SearchSpace, uri: str, optuna_url: str | None) -> StudyManifest:
    """--resume's study record, read (never made): none, another space or another store is refused here."""
    from raytune_fl.tune.manifest import StudyManifest

    manifest = StudyManifest.load(args.storage, space, uri)
    if optuna_url is not None:
        from raytune_fl.runtime import optuna_storage

        manifest.check_optuna_storage(optuna_storage.masked(optuna_url))
    return manifest


def _open_stores(
    args: argparse.Namespace,
    space: SearchSpace,
    uri: str,
    optuna: tuple[str | None, bool],
    manifest: StudyManifest | None,
) -> tuple[StudyTracker, StudyManifest]:
    """Once every check passed: the --storage folder, the MLflow experiment, the Optuna storage and (last, a fresh
    study's) the study record. A ConfigError names the option that is wrong."""
    from raytune_fl.runtime.storage import make_storage
    from raytune_fl.tracking import StudyTracker
    from raytune_fl.tune.manifest import StudyManifest

    print(f"MLflow tracking URI: {uri}  (experiment {space.name!r})", flush=True)
    print(f"Ray Tune results:    {args.storage.uri}", flush=True)
    try:
        tracker = StudyTracker(uri, space.name)
    except Exception as error:  # each tracking backend (files, SQLAlchemy, HTTP) fails with its own exception types
        raise ConfigError(f"--mlflow-uri: cannot use {uri}: {type(error).__name__}: {error}") from None
    optuna_url, new = optuna
    if optuna_url is not None:
        from raytune_fl.runtime import optuna_storage

        if new:  # made, opened and write-probed (a probe study, deleted)
            optuna_storage.check(optuna_url, given=args.optuna_storage is not None)
        shown = optuna_storage.masked(optuna_url)
        print(f"Optuna studies:      {shown}  (view with: {optuna_storage.dashboard_command(optuna_url)})", flush=True)
    make_storage(args.storage)
    if manifest is None:
        manifest = StudyManifest.start(args.storage, space, uri)
    return tracker, manifest


def search_line(tune: TuneSettings) -> str | None:
    """The summary's word on how the trials were proposed and stopped, where that is not TPE with ASHA (or none)."""
    if tune.sampler == "tpe" and tune.scheduler_name in ("asha", "none"):
        return None
    return f"search: sampler {tune.sampler}, scheduler {tune.scheduler_name} (tune.sampler, tune.scheduler)"


def print_summary(
    outcomes: list,
    uri: str,
    experiment: str,
    wall_s: float,
    *,
    tune: TuneSettings | None = None,
    val_samples: int | None = None,
    tuning_seed: int | None = None,
) -> None:
    """Each variant's selected configuration and score by `tune`'s rule (default: val_acc); an accuracy with its
    binomial standard error over the `val_samples` validation images (else the outcomes' own count), and which
    variants that noise cannot rank; with several objectives, the Pareto fronts. `tuning_seed`: the training seed
    every trial ran at, which the ablation holds out."""
    metric, objectives = (tune.primary, tune.objectives) if tune is not None else (VAL_ACC, ())
    print("\n=== best configuration per variant (selected on validation; test reported beside) ===")
    settings = list(dict.fromkeys(o.setting for o in outcomes))
    if any(o.best_metrics for o in outcomes):  # said once, before the scores it qualifies
        with_se = any(
            _standard_errors(group, metric, _val_samples(group, val_samples))
            for group in ([o for o in outcomes if o.setting == s] for s in settings)
        )
        print(_optimism_line(metric, with_se))
    for setting in settings:  # a study per setting (--per-setting): each setting's variants ranked apart
        if setting is not None:
            print(f"--- tuned at {setting} ---")
        _print_scores([o for o in outcomes if o.setting == setting], metric, val_samples)
    print_fronts(outcomes, objectives)
    warmed = [o for o in outcomes if getattr(o, "warm_start", "")]  # an API caller's outcome may predate the field
    if warmed:
        print()
    for o in warmed:
        print(_warm_line(_key(o), o.warm_start))
    print(f"\ntotal wall time: {wall_s:.0f}s")
    if tune is not None and (line := search_line(tune)) is not None:
        print(line)
    if tuning_seed is not None:  # which seeds were searched, and which the ablation scores (ablation/seeds.py)
        from raytune_fl.ablation.seeds import held_out_seeds

        scored = ", ".join(map(str, held_out_seeds(tuning_seed, 3, [])))
        print(
            f"seeds: every trial trained at seed {tuning_seed} (searched); `ablate` scores at seeds held out from the "
            f"search ({scored} for --seeds 3), so no ablation run repeats a selected trial"
        )
    _print_where(outcomes, uri, experiment)


def _print_where(outcomes: list, uri: str, experiment: str) -> None:
    """Where each variant's runs, model and Optuna study are."""
    print(f"MLflow: experiment {experiment!r} at {uri}")
    if uri.startswith("sqlite:"):
        print(f"  view with: mlflow ui --backend-store-uri {uri}")
    for o in outcomes:
        if o.parent_run_id:
            model = f", best model models:/{o.model_id}" if o.model_id else ""
            print(f"  {_label(o)}: parent run {o.parent_run_id}{model}")
    studies = [o for o in outcomes if o.optuna_study]
    for storage in dict.fromkeys(o.optuna_storage for o in studies):
        print(f"Optuna: studies at {storage}")
        print(f"  view with: optuna-dashboard {storage}")
        for o in studies:
            if o.optuna_storage == storage:
                print(f"  {_label(o)}: optuna.load_study(study_name={o.optuna_study!r}, storage={storage!r})")


def _label(outcome: VariantOutcome) -> str:
    """The variant, and the setting it was tuned at when the study was per setting."""
    return outcome.variant if outcome.setting is None else f"{outcome.variant} @ {outcome.setting}"


def trial_counts(trials: dict[str, int]) -> dict[str, int]:
    """A variant's trial counts in the order every count is shown: finished, collapsed (ran every round, ended at
    chance), stopped_early, diverged, error; a study recorded before a status existed counts 0 of it."""
    order = (*ENDED_STATUSES, TRIAL_ERROR)
    return {**{k: int(trials.get(k, 0)) for k in order}, **{k: v for k, v in trials.items() if k not in order}}


def _print_scores(outcomes: list, metric: str, val_samples: int | None) -> None:
    """The variants' selected configurations and scores, and which of them the validation noise cannot rank."""
    nan = float("nan")
    val_samples = _val_samples(outcomes, val_samples)
    errors = _standard_errors(outcomes, metric, val_samples)
    print(_scores_line(metric, val_samples))
    for o in outcomes:
        if not o.best_metrics:
            print(f"{o.variant:>16}: no successful trial ({trial_counts(o.trials)}); first error: {o.errors[:1]}")
            continue
        m = o.best_metrics
        params = ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in o.best_params.items())
        if o.variant in errors:
            score = f"{metric} {100 * m[metric]:.1f} % ± {100 * errors[o.variant]:.1f}"
            test = f"{TEST_ACC} {100 * m.get(TEST_ACC, nan):.1f} %"
        else:
            score, test = f"{metric}={m.get(metric, nan):.4f}", f"{TEST_ACC}={m.get(TEST_ACC, nan):.4f}"
        if EPSILON in m:  # base.privacy: what the selected trial spent
            test += f"  {EPSILON} {m[EPSILON]:.3g}"
        print(
            f"{o.variant:>16}: {score}  {test} (round {int(m.get(ROUND, 0))}) "
            f"[{params or 'no hyperparameters'}] trials {trial_counts(o.trials)} {o.wall_time_s:.0f}s"
        )
        if o.schedule is not None:  # PBT: the values in force round by round, what `ablate` replays
            print(f"{'':>18}schedule: {o.schedule.describe()}")
        for edge in o.edges:  # the range may have cut off a better value (tune/edges.py)
            print(f"{'':>18}edge: {edge.describe()}")
    if errors:
        scores = {o.variant: (o.best_metrics[metric], errors[o.variant]) for o in outcomes if o.variant in errors}
        ranked = within_noise(scores, maximize=True, z=NOISE_Z)  # an accuracy: higher is better
        if ranked is not None:
            print(_noise_line(*ranked, z=NOISE_Z))


def print_fronts(outcomes: list, objectives: Sequence[Objective]) -> None:
    """Each variant's Pareto front (several objectives): its trials, best first on the first objective, the one
    the ablation runs marked."""
    if len(objectives) < 2:
        return
    listed = ", ".join(str(o) for o in objectives)
    print(f"\n=== Pareto front per variant over {listed}: no trial on it is beaten on every objective ===")
    print(f"  (* = selected: the front's best {objectives[0].metric}, what the ablation runs)")
    for o in outcomes:
        if not o.front:
            continue
        first = objectives[0]
        ordered = sorted(o.front, key=lambda t: t.scores[first.metric], reverse=first.mode == "max")
        print(f"{_label(o):>16}: {len(ordered)} trial{'s' if len(ordered) != 1 else ''} on the front")
        for trial in ordered:
            scores = "  ".join(f"{name}={value:.4f}" for name, value in trial.scores.items())
            params = progress.params_text(trial.params)
            print(f"{'*' if trial.selected else ' ':>18} {scores}  [{params or 'no hyperparameters'}]")


def _val_samples(outcomes: list, val_samples: int | None) -> int | None:
    """The validation set's size: the caller's, else the outcomes' own (an API caller's outcomes carry it,
    run_variant's; a setting's own partition has its own)."""
    return val_samples if val_samples is not None else next((o.val_samples for o in outcomes if o.val_samples), None)


def _optimism_line(metric: str, with_se: bool) -> str:
    """Why the scores below cannot rank the variants, said once per summary: each is the best of many noisy trials
    (the winner's curse), and the ± of two variants measured on the same images is not independent."""
    accuracy = has_binomial_se(metric)  # higher is better: the best is the maximum
    text = (
        f"Each variant's best {metric} is the {'maximum' if accuracy else 'best'} over its study's trials, so it is "
        f"optimistic ({'biased upwards' if accuracy else 'biased towards a better score'}, the more so the more "
        "trials)"
    )
    if with_se:
        text += (
            "; the ± treats the variants as independent although all are scored on the same validation images, "
            "so comparing variants here is only indicative"
        )
    else:
        text += "; comparing variants here is only indicative"
    return text + ": the ablation over seeds on the test set is what ranks them."


def _standard_errors(outcomes: list, metric: str, val_samples: int | None) -> dict[str, float]:
    """variant -> the binomial standard error of its best `metric`, for the variants that have one: an accuracy on
    the validation set, its size known."""
    if not has_binomial_se(metric):
        return {}
    errors = {}
    for o in outcomes:
        se = accuracy_se(o.best_metrics[metric], val_samples) if metric in (o.best_metrics or {}) else None
        if se is not None:
            errors[o.variant] = se
    return errors


def _scores_line(metric: str, val_samples: int | None) -> str:
    """What the scores below are, said once: the validation set's size and what the ± is."""
    single = "one trial, one seed per variant"
    if not has_binomial_se(metric):
        return f"{metric}: {single}; no standard error computed (only an accuracy has one: binomial over the images)"
    if not val_samples:
        return f"{metric}: {single}; no standard error (the validation set's size is unknown)"
    return (
        f"{metric}: {single}, on {val_samples} validation images (all clients' held-out parts); "
        f"± is one binomial standard error (SE), sqrt(p(1-p)/{val_samples})"
    )


def _noise_line(best: str, close: list[str], z: float) -> str:
    """Which variants the validation set's noise cannot rank against the best, or that the best stands out."""
    if not close:
        return (
            f"{best} leads the others by more than {z:g} standard errors (sampling noise of the validation "
            'images; seed-to-seed variation comes on top: the ablation in "next" below measures it)'
        )
    names = close[0] if len(close) == 1 else ", ".join(close[:-1]) + f" and {close[-1]}"
    verb = "is" if len(close) == 1 else "are"
    return (
        f"{names} {verb} within {z:g} standard errors of {best}: one trial and seed each cannot rank them; "
        'the ablation in "next" below ranks them over seeds (x settings with --grid)'
    )


def print_next_steps(
    args: argparse.Namespace,
    uri: str,
    experiment: str,
    experiment_id: str,
    outcomes: list,
    *,
    argv0: str | None = None,
    cwd: str | Path | None = None,
) -> None:
    """Where to look at what the study made, and what to run next: commands to copy, that work in the folder the
    study ran in (`cwd`, default this process's), typed as it was started (`argv0`, default sys.argv[0])."""
    print("\n=== next ===")
    for line in common.mlflow_ui_lines(uri, experiment_id, experiment, "the variants"):
        print(line)
    storages = list(dict.fromkeys(o.optuna_storage for o in outcomes if o.optuna_study))
    for storage in storages:
        print(f"  the Optuna studies (history, importances, contours):  optuna-dashboard {storage}")
    ablate, dashboard = (common.command_line(command, argv0, cwd) for command in ("ablate", "dashboard"))
    space = common.space_options(args)
    tuned = ["--variants", args.variants] if getattr(args, "variants", None) else []  # those the study tuned
    for grid in getattr(args, "per_setting", None) or []:  # each setting at its own selection
        tuned += ["--grid", grid]
    tuned += ["--per-setting"] if getattr(args, "per_setting", None) else []
    # the summary's scores are one trial and seed each: the ablation is what ranks the variants
    what = "ablate the selected configurations over seeds (what ranks the variants)"
    print(f"  {what}:  {ablate} {shlex.join([*space, *tuned, '--seeds', '3'])}")
    print(f"  the study as an HTML dashboard:  {dashboard} {shlex.join(space)}")
    model = next((o.model_id for o in outcomes if o.model_id), None)
    if model:
        print(f"  a trained model:  mlflow.pytorch.load_model('models:/{model}')  (with MLFLOW_TRACKING_URI={uri})")
