"""Grid points as MLflow runs: the ground truth `benchmarks/search.py` measures search strategies against.

A grid run (tag stage = grid) holds one configuration trained under one seed: its searched hyperparameters as
params, the seed as a tag, and its per-round val/test metrics with step = round. The dashboard's search-landscape
section reads them back (raytune_fl/report/runs.py: Store.grid_runs); only this benchmark writes them, so the
writer lives beside it, not in the package.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from mlflow import MlflowClient
from mlflow.entities import Metric, Param, RunTag

from raytune_fl.tracking.schema import STAGE_GRID, TAG_SEED, TAG_STAGE, TAG_VARIANT
from raytune_fl.tracking.store import experiment_id

ROUND_METRICS = ("val_acc", "val_loss", "test_acc", "test_loss", "round_time_s", "clients")


def log_grid_run(
    tracking_uri: str,
    experiment: str,
    variant: str,
    params: Mapping[str, Any],
    seed: int,
    rounds: Sequence[Mapping[str, Any]],
    wall_s: float | None = None,
) -> str:
    """One grid point under one seed, with its round metrics (and its wall time from start to end, when given);
    returns the run id. Creates the experiment if needed."""
    client = MlflowClient(tracking_uri)
    found = experiment_id(client, experiment)
    exp = found if found is not None else client.create_experiment(experiment)
    name = f"grid {variant} " + " ".join(f"{k}={v:.4g}" for k, v in params.items()) + f" seed {seed}"
    run = client.create_run(exp, run_name=name, tags={TAG_STAGE: STAGE_GRID, TAG_VARIANT: variant, TAG_SEED: str(seed)})
    metrics = [
        Metric(key, float(row[key]), 0, int(row["round"]))
        for row in rounds
        for key in ROUND_METRICS
        if isinstance(row.get(key), (int, float))
    ]
    if wall_s is not None:
        metrics.append(Metric("wall_s", float(wall_s), 0, 0))
    client.log_batch(
        run.info.run_id,
        metrics=metrics,
        params=[Param(k, repr(float(v))) for k, v in params.items()],
        tags=[RunTag("rounds", str(len(rounds)))],
    )
    client.set_terminated(run.info.run_id)
    return run.info.run_id
