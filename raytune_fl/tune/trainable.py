"""One Tune trial = one complete federated simulation, reporting (and checkpointing) every round.

Light to import (no torch at module level): the trial's process starts its client actors first, and imports torch
and the engine while they start (actors/client.py's start_early: their start-up and the trial's overlap).

A scheduled trial (tune.scheduler.pbt) keeps its hyperparameter schedule (config/schedule.py) in a file beside the
federation's state in each checkpoint and reports the values in force as `hp.<name>` every round: a trial PBT
restarts from a better trial's checkpoint with new values inherits that trial's schedule and appends its own. An
ablation cell replays such a schedule (`replay`): a federation per segment, each loading the state the previous one
ended with and stopping after the segment's last round, as PBT's restart did.
"""

from __future__ import annotations

import functools
import logging
import numbers
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import ray
from ray import tune

from raytune_fl.actors.client import PROCESS_ACTORS
from raytune_fl.config import ParamSchedule, Segment, VariantTrials
from raytune_fl.errors import RaytuneFLError
from raytune_fl.metrics import HP_PREFIX
from raytune_fl.tune.refusal import config_fault, refused_result

if TYPE_CHECKING:
    from raytune_fl.engine.report import RoundReport

SCHEDULE_FILE = "schedule.json"  # beside the federation's state in a scheduled trial's checkpoint


class SegmentEnd(RaytuneFLError):
    """A segment's last round was reported: its federation stops there (the next segment's continues). Not a
    failure: raised by the round's report and caught by the trial around that federation's run."""


def read_schedule(directory: str | Path) -> ParamSchedule:
    """The schedule a checkpoint directory holds (empty: a checkpoint of an unscheduled trial)."""
    path = Path(directory) / SCHEDULE_FILE
    return ParamSchedule.from_json(path.read_text()) if path.is_file() else ParamSchedule()


def write_schedule(schedule: ParamSchedule, directory: str | Path) -> None:
    (Path(directory) / SCHEDULE_FILE).write_text(schedule.to_json())


def hp_metrics(params: Mapping[str, Any]) -> dict[str, float]:
    """The values in force as metrics: numbers (booleans as 0/1); a text choice is in the schedule only."""
    return {f"{HP_PREFIX}{name}": float(v) for name, v in params.items() if isinstance(v, numbers.Real)}


def federated_trial(
    config: dict[str, Any],
    *,
    trials: VariantTrials,
    system_metrics: bool = False,
    scheduled: bool = False,
    replay: ParamSchedule | None = None,
) -> None:
    """One of the variant's `trials`, at Tune's `config`. `system_metrics`: the driver's MLflow switch
    (tracking/system_metrics.py), read where it built the trainable: this process samples its node once per round
    and the samples go with the round's report. `scheduled` (PBT): the trial keeps and reports its schedule;
    `replay`: the trial runs this schedule's segments in order (`config` unused). A configuration error is reported
    as the trial's last result, not raised: Tune would retry it (tune/refusal.py)."""
    try:
        _run_trial(config, trials, system_metrics, scheduled, replay)
    except Exception as error:
        fault = config_fault(error)
        if fault is None:
            raise
        tune.report(refused_result(fault))


def _run_trial(
    config: dict[str, Any],
    trials: VariantTrials,
    system_metrics: bool,
    scheduled: bool,
    replay: ParamSchedule | None,
) -> None:
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
    state, schedule = _restored(load_state)
    follows = scheduled or replay is not None
    # the variant's fixed values, then Tune's (or a segment's)
    segments = replay.spans(experiment.rounds) if replay is not None else [(Segment(1, config), experiment.rounds)]
    sampler = None
    if system_metrics:
        from raytune_fl.tracking.system_metrics import SystemSampler

        sampler = SystemSampler()  # made before the first round: its first window is that round

    reporter = _Reporter(experiment.checkpoint_every, experiment.rounds, follows, TuneResults(), sampler, save_state)
    data = None  # the first segment's, for the next ones (the same experiment draws the same data)
    for segment, last in segments:
        done = int(state["round"]) if state is not None else 0  # not-a-metric: the checkpoint's key
        if done >= last:  # a resumed replay: this segment ran before its checkpoint
            continue
        federation = Federation.of(trials.trial(segment.params), pool_factory=pool, device=device, data=data)
        if state is not None:  # continue after the last checkpointed round
            federation.load_state_dict(state)
        if follows:
            schedule = schedule.then(done + 1, segment.params)
        try:
            federation.run(on_round=functools.partial(reporter.report, federation, schedule, last))
            return  # it ran the last round, or diverged
        except SegmentEnd:  # the next segment continues from here
            state, data = federation.state_dict(), federation.data


def _restored(load_state: Callable[[str], dict[str, Any]]) -> tuple[Mapping[str, Any] | None, ParamSchedule]:
    """The federation state and schedule of the trial's checkpoint: resumed (Tuner.restore), or restarted by PBT
    from a better trial's checkpoint; (None, an empty schedule) for a fresh start."""
    checkpoint = tune.get_checkpoint()
    if checkpoint is None:
        return None, ParamSchedule()
    with checkpoint.as_directory() as directory:
        return load_state(directory), read_schedule(directory)


@dataclass(frozen=True)
class _Reporter:
    """Each round's report to Tune, with a checkpoint when one is due; the end of a segment."""

    every: int  # experiment.checkpoint_every
    rounds: int
    follows: bool  # the trial keeps and reports its schedule
    results: Any  # engine.report.TuneResults (imported with torch, in the trial)
    sampler: Any  # tracking.system_metrics.SystemSampler, or None
    save_state: Callable[[dict[str, Any], str], Any]

    def report(self, federation: Any, schedule: ParamSchedule, last: int, round_report: RoundReport) -> None:
        # every report carries the tuned metric (val_acc / val_loss; between evaluations the last evaluated round's);
        # a checkpoint goes with it every `every` rounds and the last, so a resumed trial repeats < `every` rounds
        round_index, metrics = round_report.round, self.results(round_report)
        if self.follows:
            metrics.update(hp_metrics(schedule.in_force(round_index)))
        if self.sampler is not None:
            metrics.update(self.sampler.sample())
        every = self.every
        due = every > 0 and not round_report.diverged and (round_index % every == 0 or round_index == self.rounds)
        if not due:
            tune.report(metrics)
        else:
            with tempfile.TemporaryDirectory() as directory:
                self.save_state(federation.state_dict(), directory)
                if self.follows:
                    write_schedule(schedule, directory)
                tune.report(metrics, checkpoint=tune.Checkpoint.from_directory(directory))
        if round_index == last < self.rounds and not round_report.diverged:
            raise SegmentEnd
