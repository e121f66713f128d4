"""One Tune trial = one complete federated simulation, reporting every round."""

from __future__ import annotations

from typing import Any

import torch
from ray import tune

from raytune_fl.actors import ray_pool_factory
from raytune_fl.config import ExperimentConfig
from raytune_fl.engine.federation import Federation, in_process_pool


def federated_trial(
    config: dict[str, Any], *, experiment: ExperimentConfig, method: str, fixed: dict[str, Any]
) -> None:
    resources = experiment.resources
    torch.set_num_threads(
        max(1, int(resources.driver_cpus or (resources.cpus_per_actor if not resources.actors else 1)))
    )
    pool = ray_pool_factory(resources) if resources.actors > 0 else in_process_pool
    federation = Federation(experiment, method, {**fixed, **config}, pool_factory=pool)
    federation.run(on_round=tune.report)  # every report carries the tuned metric (val_acc / val_loss)
