"""A trained federation handed to the model exporter as a finished Tune trial would hand it."""

from __future__ import annotations

from dataclasses import dataclass

from ray import tune

from raytune_fl.config import ExperimentConfig, TrialSpec
from raytune_fl.export.model_helper import ModelExporter

EXPORT_EXPERIMENT = ExperimentConfig.model_validate(
    {
        "dataset": "digits",
        "partition": {"kind": "dirichlet", "alpha": 0.5, "clients": 3, "min_size": 20, "seed": 0},
        "rounds": 2,
        "batch_size": 32,
        "resources": {"actors": 0},
    }
)

EXPORT_TRIAL = TrialSpec.resolve(EXPORT_EXPERIMENT, "fedavg", {})


@dataclass
class TuneResult:  # what ModelExporter.log reads of a tune.Result
    metrics: dict
    checkpoint: tune.Checkpoint | None


def log_model(exporter: ModelExporter, trained, trial: str) -> tuple[str, str] | None:
    _, parent, checkpoint, data, _ = trained
    result = TuneResult({"trial_id": trial}, checkpoint)
    return exporter.log(parent, result, EXPORT_TRIAL, data, link_parent=True)
