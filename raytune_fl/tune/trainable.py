"""One Tune trial = one complete federated simulation, reporting (and checkpointing) every round.

Light to import (no torch at module level): the trial's process starts its client actors first, and imports torch
and the engine while they start (actors/client.py's start_early: their start-up and the trial's overlap).
"""

from __future__ import annotations

import logging
import tempfile
from typing import TYPE_CHECKING, Any

import ray
from ray import tune

from raytune_fl.actors.client import PROCESS_ACTORS
from raytune_fl.config import VariantTrials

if TYPE_CHECKING:
    from raytune_fl.engine.report import RoundReport


def federated_trial(config: dict[str, Any], *, trials: VariantTrials, system_metrics: bool = False) -> None:
    """One of the variant's `trials`, at Tune's `config`. `system_metrics`: the driver's MLflow switch
    (tracking/system_metrics.py), read where it built the trainable: this process samples its node once per round
    and the samples go with the round's report."""
    experiment = trials.experiment
    resources = experiment.resources
    if resources.actors > 0:  # before the imports below: the actors import torch meanwhile, in their processes
        PROCESS_ACTORS.start_early(resources)
    import torch

    from raytune_fl.actors import ray_pool_factory
    from raytune_fl.devices import choose_device
    from raytune_fl.engine.checkpoint import load_state, save_state
    from raytune_fl.engine.federation import Federation, in_process_pool
    from raytune_fl.engine.report import TuneResults

    # Ray logs a line per checkpoint, i.e. per round: the progress printer already says each round
    logging.getLogger("ray.train._internal.storage").setLevel(logging.WARNING)
    torch.set_num_threads(
        max(1, int(resources.driver_cpus or (resources.cpus_per_actor if not resources.actors else 1)))
    )
    # this process computes on its bundle's GPU share (devices.gpu_shares): the clients with actors: 0, else the
    # evaluation; each actor picks its own device from its bundle
    device = choose_device(resources.device, bool(ray.get_gpu_ids()))
    # Tune runs the next trial in this same process (reuse_actors): the client actors wait here for it
    pool = ray_pool_factory(resources, experiment.faults, PROCESS_ACTORS) if resources.actors > 0 else in_process_pool
    trial = trials.trial(config)  # the variant's fixed values, then Tune's
    federation = Federation.of(trial, pool_factory=pool, device=device)
    checkpoint = tune.get_checkpoint()
    if checkpoint is not None:  # a resumed trial (Tuner.restore): continue after the last checkpointed round
        with checkpoint.as_directory() as directory:
            federation.load_state_dict(load_state(directory))
    every = experiment.checkpoint_every
    sampler = None
    if system_metrics:
        from raytune_fl.tracking.system_metrics import SystemSampler

        sampler = SystemSampler()  # made before the first round: its first window is that round

    tune_result = TuneResults()

    def report(round_report: RoundReport) -> None:
        # every report carries the tuned metric (val_acc / val_loss; between evaluations the last evaluated round's);
        # a checkpoint goes with it every `every` rounds and the last, so a resumed trial repeats < `every` rounds
        round_index, metrics = round_report.round, tune_result(round_report)
        if sampler is not None:
            metrics.update(sampler.sample())
        due = every > 0 and not round_report.diverged and (round_index % every == 0 or round_index == experiment.rounds)
        if not due:
            return tune.report(metrics)
        with tempfile.TemporaryDirectory() as directory:
            save_state(federation.state_dict(), directory)
            tune.report(metrics, checkpoint=tune.Checkpoint.from_directory(directory))

    federation.run(on_round=report)
