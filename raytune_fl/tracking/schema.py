"""The MLflow layout as names: run tags and their values, artifact paths, and the params codec.

Writers (tracking/tracker.py, tracking/trials.py, the tune and ablation stages) and readers (tracking/store.py, the
report) use these constants instead of string literals. Plain Python: no MLflow import, so any layer may use it.

Layout: experiment = space name; per variant study a parent run (stage=tune) with a child run per trial; per
ablation a parent run (stage=ablation, role=parent) with a child run per cell (role=trial).
"""

from __future__ import annotations

import json
import re
from typing import Any

# ---------------------------------------------------------------- experiment tags

# MLflow's own: the experiment's type, "Machine learning" (custom_model_development) or "GenAI apps & agents"
# (genai_development). Set on every experiment we create or use (tracker.StudyTracker). MLflow 3.10-3.17's UI
# opens an experiment on the page of its "GenAI | Model training" switch instead (a browser setting, GenAI until
# switched; in 3.17 `?workflowType=machine_learning` in the URL overrides it: tracking/urls.py's runs_url).
TAG_EXPERIMENT_KIND = "mlflow.experimentKind"
EXPERIMENT_KIND_TRAINING = "custom_model_development"

# ---------------------------------------------------------------- run tags: names

TAG_PARENT_RUN = "mlflow.parentRunId"  # MLflow's own: marks a child run
TAG_STAGE = "stage"
TAG_ROLE = "role"  # ablation runs only: parent or trial
TAG_VARIANT = "variant"
TAG_METHOD = "method"
TAG_DATASET = "dataset"  # tune parent
TAG_PARTITION = "partition"  # tune parent: e.g. dirichlet(alpha=0.5)
TAG_SEARCHED = "searched"  # tune parent: the searched hyperparameters, comma-separated
TAG_OPTUNA_STUDY = "optuna_study"  # tune parent of a searched variant: its Optuna study name
TAG_OPTUNA_STORAGE = "optuna_storage"  # tune parent: that study's Optuna storage URL (password masked)
TAG_SAMPLER = "sampler"  # tune parent of a searched variant: tune.sampler (tpe, random, grid, gp, cmaes, qmc)
TAG_SCHEDULER = "scheduler"  # tune parent of a searched variant: the scheduler in force (asha, hyperband, median, none)
TAG_BEST_PREFIX = "best."  # tune parent: best.<hyperparameter> = the selected value (params codec)
# tune parent of a PBT study: the selected trial's schedule (config/schedule.py's JSON), what `ablate` replays
TAG_BEST_SCHEDULE = "best_schedule"
TAG_PLAN = "plan"  # ablation parent: the plan's fingerprint (what --resume matches on)
TAG_SEEDS = "seeds"
# tune parent: the training seeds its trials used (comma-separated); ablation parent: the ones every tuned study used
TAG_TUNING_SEEDS = "tuning_seeds"
TAG_SEED_RULE = "seed_rule"  # ablation parent: how its seeds were chosen (ablation/seeds.py: held_out, with_tuning)
TAG_SEEDS_AUTO = "seeds_auto"  # ablation parent of --seeds auto: the target half-width and the seed cap
TAG_GRID = "grid"
TAG_VARIANTS = "variants"
TAG_STUDY_RUN_IDS = "study_run_ids"
TAG_CONFIG_SOURCE_PREFIX = "config_source."
TAG_SEED = "seed"  # ablation cell
TAG_SETTING = "setting"
TAG_CELL = "cell"
TAG_STUDY_RUN_ID = "study_run_id"
TAG_TRIAL_ID = "trial_id"  # trial run: Tune's trial id (a resumed trial finds its run by it)
TAG_TRIAL_STATUS = "trial_status"
TAG_RESUMED = "resumed"
# tune and ablation parents stopped by SIGINT/SIGTERM (KILLED): "true"; removed when --resume reopens the run
TAG_INTERRUPTED = "interrupted"
TAG_RESUME_COMMAND = "resume_command"  # beside it: the command line that continues the stopped study
TAG_REPLAY_DIFFERED = "replay_differed"  # rounds a resumed trial replayed with other values (re-logged)
TAG_DIVERGENCE = "divergence"  # not-a-metric: a tag (the reason, as the report's divergence)
TAG_ROUNDS_COMPLETED = "rounds_completed"
TAG_ACTOR_FAILURES = "actor_failures"  # not-a-metric: a tag (the run's total worker deaths)
TAG_TRIAL_RESTARTS = "trial_restarts"
TAG_FAILURE = "failure"  # a FAILED parent run: the first line of the error that ended it
# an ablation cell's run cut by a stop, whose cell `ablate --resume` ran again: the id of the run that replaced it
TAG_SUPERSEDED_BY = "superseded_by"
SUPERSEDED_SUFFIX = " (superseded)"  # added to such a run's name: the UI never shows two runs of one cell
TAG_DESCRIPTION = "mlflow.note.content"  # MLflow's own: the run's description (markdown) in the UI
TAG_MODEL_ID = "model_id"  # a run that logged a model: its MLflow model id (load with models:/<id>)
TAG_MODEL_RUN_ID = "model_run_id"  # tune parent: the trial run that logged the variant's best model
TAG_OBJECTIVES = "objectives"  # tune parent of a multi-objective study: metric:mode, comma-separated
TAG_PARETO_FRONT = "pareto_front"  # trial run on its variant's Pareto front: "true"
# tune parent: edge.<hyperparameter> = "lower" or "upper" when the selected value lies within 5 % of that bound of its
# range (on the range's own scale, tune/edges.py), and `edges` the flagged values in one line; none flagged: no tags
TAG_EDGE_PREFIX = "edge."
TAG_EDGES = "edges"
DATASET_CONTEXT = "mlflow.data.context"  # MLflow's own input tag: what the dataset was used for
CONTEXT_TRAIN = "train"
MODEL_NAME = "global_model"  # the name a run's logged model has (MLflow's Models column)

# ---------------------------------------------------------------- run tags: values

STAGE_TUNE = "tune"
STAGE_ABLATION = "ablation"
STAGE_GRID = "grid"  # ground-truth grid points of benchmarks/search.py (the dashboard's search landscape)
ROLE_PARENT = "parent"
ROLE_TRIAL = "trial"
NO_STUDY = "none"  # study_run_id of a cell configured from the YAML
SETTING_DEFAULT = "default"  # the setting label of an ablation without a grid
TRUE = "true"

# trial_status
TRIAL_RUNNING = "running"
TRIAL_FINISHED = "finished"  # ran every round
TRIAL_STOPPED_EARLY = "stopped_early"  # ASHA stopped it: its last value is a truncated score
# ran every round and ended at chance (engine/chance.py): not averaged into a table, counted beside it
TRIAL_COLLAPSED = "collapsed"  # not-a-metric: the status; the round's 0/1 flag is metrics.COLLAPSED
TRIAL_DIVERGED = "diverged"  # not-a-metric: stopped itself on a non-finite loss; the study went on
TRIAL_ERROR = "error"
TRIAL_INTERRUPTED = "interrupted"  # still open when its study was killed or failed
TRIAL_UNKNOWN = "unknown"  # what a reader says of a run without the tag
# the statuses of a run that ran every round: its scores are final (collapsed ones at chance), never re-run
RAN_EVERY_ROUND = (TRIAL_FINISHED, TRIAL_COLLAPSED)

# MLflow run statuses
RUN_RUNNING = "RUNNING"
RUN_FINISHED = "FINISHED"
RUN_FAILED = "FAILED"
RUN_KILLED = "KILLED"

# ---------------------------------------------------------------- artifacts

CONFIG_FILE = "config.yaml"  # parent runs: the study's or ablation's configuration
PARTITION_FOLDER = "partition"  # partition.parquet and partition.png; partition/<setting>/ with a grid
PARTITION_FILE = "partition.parquet"
ROUND_METRICS_FILE = "round_metrics.parquet"  # trial runs: one row per round
SPECTRUM_FILE = "classifier_spectrum.parquet"
CLIENT_ACCURACY_FILE = "client_accuracy.parquet"
CLIENT_ROUNDS_FILE = "client_rounds.parquet"
ABLATION_FOLDER = "ablation"  # ablation parent: results.parquet, table.md, table.csv
ABLATION_RESULTS_FILE = "results.parquet"
DASHBOARD_FOLDER = "dashboard"


def study_key(variant: str, setting: str | None) -> str:
    """What names a tune study where its variant alone would not: `<variant>@<setting>` for a study per setting
    (tune --per-setting): its parent run's name, its Optuna study, its entry in the study manifest."""
    return variant if setting is None else f"{variant}@{setting}"


def same_setting(first: str | None, second: str | None) -> bool:
    """Whether two setting labels (`partition.alpha=0.1,rho=1`) name one setting: their numbers compared as numbers
    (a study tagged `partition.alpha=1` before labels held the field's own value is the setting alpha=1.0)."""
    if first is None or second is None:
        return first is second
    parts = [re.split(r"([=,])", label) for label in (first, second)]
    return len(parts[0]) == len(parts[1]) and all(_same_text(a, b) for a, b in zip(*parts, strict=True))


def _same_text(first: str, second: str) -> bool:
    try:
        return first == second or float(first) == float(second)
    except ValueError:
        return False


def setting_folder(setting: str) -> str:
    """An ablation setting as its artifact folder names it (partition/<folder>/)."""
    return setting.replace("=", "-").replace(",", "_")


# ---------------------------------------------------------------- the params codec

MAX_PARAM_LEN = 6000  # MLflow's limit on a param value


def encode_value(value: Any) -> str:
    """A param or tag value as MLflow text: strings raw, everything else JSON (cut at MLflow's limit)."""
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text[:MAX_PARAM_LEN]


def decode_value(text: str) -> Any:
    """`encode_value` undone where the type is not known: JSON if it parses, else the raw string."""
    try:
        return json.loads(text)
    except (json.JSONDecodeError, ValueError):
        return text


def decode_float(text: str) -> float:
    return float(text)


def decode_int(text: str) -> int:
    return int(float(text))  # "3" and "3.0" alike


def decode_choice(text: str, choices: tuple[Any, ...] | list[Any]) -> Any:
    """The choice whose encoding is `text`."""
    for choice in choices:
        if text == encode_value(choice):
            return choice
    raise ValueError(f"{text!r} is none of the choices {list(choices)}")


# ---------------------------------------------------------------- tune parents: the best score's uncertainty

# Metrics of a tune parent beside best_val_acc: val_samples, the validation images it is a proportion of, and
# best_val_acc_se, its binomial standard error sqrt(p(1-p)/val_samples) (tune/uncertainty.py).
METRIC_VAL_SAMPLES = "val_samples"
METRIC_BEST_VAL_ACC_SE = "best_val_acc_se"
# tune parent: what the best score rests on ("single trial, seed 0"): not a seed-averaged ranking. Not "best.":
# that prefix holds the selected hyperparameters.
TAG_BEST_BASIS = "best_basis"


# ---------------------------------------------------------------- ablations: the split as a source of noise

# Appended (constants only). ablation cell: the partition seed it trained on (every cell; with
# `ablate.py --partition-seeds N` > 1 the cells of one (variant, seed, setting) differ in it). Ablation parent, only
# when N > 1: the partition seeds, comma-separated.
TAG_PARTITION_SEED = "partition_seed"
TAG_PARTITION_SEEDS = "partition_seeds"
# ablation parent: per (variant, setting) the table metric's mean, sd, n, ci_low and ci_high (the 95 % t-interval
# of the mean) as metrics named ablation/<variant>/<setting folder>/<metric>_<statistic>
SUMMARY_STATISTICS = ("mean", "sd", "n", "ci_low", "ci_high")
ABLATION_SUMMARY_FILE = "summary.csv"  # ablation parent, under ablation/: summarise()'s rows

# ---------------------------------------------------------------- warm starts (tune/warm_start.py)

# tune parent of a warm-started study: where its first configurations came from ("2 configurations from
# partition.alpha=0.1 (MLflow run <id>)") and, as JSON, the configurations enqueued; a trial run that tried one of
# them first: warm_start = "enqueued"
TAG_WARM_START = "warm_start"
TAG_WARM_START_CONFIGS = "warm_start_configs"
WARM_START_ENQUEUED = "enqueued"

# an attribute the tracker sets on a stop (KeyboardInterrupt) whose parent run it could not close (MLflow gone): the
# run id left RUNNING, for the command's last line, which would otherwise say the run was KILLED
LEFT_RUNNING = "parent_left_running"
