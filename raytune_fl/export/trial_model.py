"""A finished trial's global model, rebuilt from its last Tune checkpoint and logged as an MLflow model.

The checkpoint holds the federation's state after its last checkpointed round (every round by default, and the
last round always); the model is rebuilt from it in the driver, scored again on the test set (the score logged
beside the model must be the model's), and logged on the trial's own run (export/model_helper.py does it from a
helper process).

The engine (torch) is imported when a model is rebuilt: the study's driver imports this module and never trains.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from ray import tune

from raytune_fl.config import TrialSpec
from raytune_fl.engine.data import FederatedData
from raytune_fl.tracking import StudyTracker
from raytune_fl.tracking.store import trial_run

if TYPE_CHECKING:
    import torch


@dataclass
class TrainedModel:
    model: torch.nn.Module  # the global model, eval mode, CPU
    round: int  # the round it was trained to
    metrics: dict[str, Any]  # its evaluation now: val_acc, test_acc, ...
    example: np.ndarray  # a few test images: the signature's input


def trained_model(checkpoint: tune.Checkpoint, trial: TrialSpec, data: FederatedData) -> TrainedModel:
    from raytune_fl.engine.checkpoint import load_state
    from raytune_fl.engine.federation import Federation

    with checkpoint.as_directory() as directory:
        state = load_state(directory)
    federation = Federation.of(trial, data=data)
    federation.load_state_dict(state)
    metrics = federation.evaluate()  # leaves the model holding the global weights
    return TrainedModel(federation.model.cpu().eval(), federation.round, metrics, data.dataset.x_test[:2])


def log_trial_model(
    tracker: StudyTracker,
    parent_run_id: str,
    result: tune.Result,
    trial: TrialSpec,
    data: FederatedData,
    *,
    link_parent: bool,
) -> tuple[str, str, TrainedModel] | None:
    """The trial's model on its MLflow run (and listed on the parent with `link_parent`): (model id, run id, the
    model), or None when the trial left no checkpoint or no run."""
    found = trial_checkpoint(result)
    if found is None:
        return None
    return log_checkpoint_model(tracker, parent_run_id, *found, trial, data, link_parent)


def trial_checkpoint(result: tune.Result) -> tuple[str, tune.Checkpoint] | None:
    """A finished trial's id and last checkpoint, or None when it left none (checkpoint_every: 0)."""
    trial_id = (result.metrics or {}).get("trial_id")
    if result.checkpoint is None or trial_id is None:
        return None
    return str(trial_id), result.checkpoint


def log_checkpoint_model(
    tracker: StudyTracker,
    parent_run_id: str,
    trial_id: str,
    checkpoint: tune.Checkpoint,
    trial: TrialSpec,
    data: FederatedData,
    link_parent: bool,
) -> tuple[str, str, TrainedModel] | None:
    run = trial_run(tracker.client, tracker.experiment_id, parent_run_id, trial_id)
    if run is None:
        return None
    trained = trained_model(checkpoint, trial, data)
    linked = (parent_run_id,) if link_parent else ()
    model_id = tracker.log_model(run.info.run_id, trained.model, trained.example, trained.round, linked)
    return model_id, run.info.run_id, trained
