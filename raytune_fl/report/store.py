"""Reading the MLflow store: each variant's latest tuned study, and the runs of an ablation.

The write side is `raytune_fl.tracking`; this module only reads (and parses what that side wrote).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

import pandas as pd
from mlflow.entities import Run
from mlflow.tracking import MlflowClient

# the final-round metrics an ablation table row keeps
RESULT_METRICS = ("test_acc", "val_acc", "test_loss", "val_loss")


@dataclass(frozen=True)
class StudyRecord:
    """A finished tune-stage parent run: what the variant's study selected."""

    run_id: str
    method: str
    params: dict[str, Any]  # the selected trial's hyperparameters (searched + fixed), typed again
    metrics: dict[str, float]  # best_val_acc, best_test_acc, ...
    start_time_ms: int
    dataset: str = ""  # what it was tuned on: an ablation on other data should say so


def parse_tag_value(text: str) -> Any:
    """Tags hold JSON for numbers, lists and booleans and raw text for strings (see tracking's _param_value)."""
    try:
        return json.loads(text)
    except (json.JSONDecodeError, ValueError):
        return text


def experiment_id(client: MlflowClient, name: str) -> str | None:
    found = client.get_experiment_by_name(name)
    return None if found is None else found.experiment_id


def search_all(client: MlflowClient, experiment: str, filter_string: str) -> list[Run]:
    """Every matching run, newest first (search_runs pages at 1,000)."""
    runs: list[Run] = []
    token = None
    while True:
        page = client.search_runs(
            [experiment], filter_string=filter_string, order_by=["attributes.start_time DESC"], page_token=token
        )
        runs.extend(page)
        token = page.token
        if not token:
            return runs


def latest_study(client: MlflowClient, experiment: str, variant: str) -> StudyRecord | None:
    """The newest FINISHED tune parent of `variant` that selected a configuration, or None."""
    runs = client.search_runs(
        [experiment],
        filter_string=f"tags.stage = 'tune' and tags.variant = '{variant}' and attributes.status = 'FINISHED'",
        order_by=["attributes.start_time DESC"],
    )
    for run in runs:
        tags = run.data.tags
        if "mlflow.parentRunId" in tags or not any(key.startswith("best_") for key in run.data.metrics):
            continue  # a child run, or a parent whose study selected nothing
        params = {key.removeprefix("best."): parse_tag_value(v) for key, v in tags.items() if key.startswith("best.")}
        return StudyRecord(
            run.info.run_id,
            tags.get("method", ""),
            params,
            dict(run.data.metrics),
            run.info.start_time,
            tags.get("dataset", ""),
        )
    return None


def ablation_results(client: MlflowClient, experiment: str, parent_run_id: str) -> pd.DataFrame:
    """One row per child run of an ablation parent, with its final-round metrics (MLflow's latest = highest step)."""
    rows = []
    for run in search_all(client, experiment, f"tags.mlflow.parentRunId = '{parent_run_id}'"):
        tags, metrics = run.data.tags, run.data.metrics
        rows.append(
            {
                "run_id": run.info.run_id,
                "run_name": run.info.run_name,
                "variant": tags.get("variant", ""),
                "method": tags.get("method", ""),
                "seed": int(tags.get("seed", -1)),
                "setting": tags.get("setting", ""),
                "cell": tags.get("cell", ""),
                "status": tags.get("trial_status", "unknown"),
                "rounds_completed": int(tags.get("rounds_completed", 0)),
                **{name: float(metrics.get(name, math.nan)) for name in RESULT_METRICS},
            }
        )
    columns = ["run_id", "run_name", "variant", "method", "seed", "setting", "cell", "status", "rounds_completed"]
    return pd.DataFrame(rows, columns=[*columns, *RESULT_METRICS])
