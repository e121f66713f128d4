"""Personalisation at evaluation (`Method.finetune`, the config's `personalise.finetune_steps`): the model a client
uses trains on that client's own training samples with the one local loop (engine/local.py), plain cross-entropy,
before its held-out parts are scored; the evaluator then restores the global weights, so training never sees it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np
import torch
from torch import Tensor, nn

from raytune_fl.aggregators import fedavg
from raytune_fl.engine.client_step import LocalData
from raytune_fl.engine.data import FederatedData
from raytune_fl.engine.local import train_local
from raytune_fl.engine.steps import LocalSettings
from raytune_fl.engine.worker import WorkerSpec
from raytune_fl.methods.base import ClientContext, Finetune, Method, Phase, Stateless
from raytune_fl.weights import as_tensor

FINETUNE_STREAM = 61  # keys fine-tuning's random numbers apart from training's (worker.client_seed)


def finetune_seed(seed: int, round_index: int, client_id: int) -> int:
    """A stream per (run seed, round, client) of its own: the same fine-tuning in every run of a seed, whichever
    rounds are evaluated, and never one of training's streams."""
    sequence = np.random.SeedSequence([seed, round_index, client_id, FINETUNE_STREAM])
    return int(sequence.generate_state(1, np.uint64)[0]) >> 1  # a Python int: NumPy 1.x refuses uint64 >> int


def finetune_method(finetune: Finetune) -> Method:
    """FedAvg's plain local round (no terms, no hooks) in one phase: `finetune.trains` for its epochs, or for the
    run's single pass under a step budget (train_local's `max_steps`)."""
    phase = Phase(trains=finetune.trains, epochs=finetune.epochs or None)
    return Method("finetune", (), Stateless(fedavg), phases=(phase,))


@dataclass(frozen=True)
class FinetuneRun:
    """Everything fine-tuning needs beside the model: what trains, the run's local settings and seed, and each
    client's training samples (positions in `x`, `y`; gathered per client, as a worker gathers them)."""

    finetune: Finetune
    settings: LocalSettings
    seed: int
    x: Tensor
    y: Tensor
    parts: Sequence[np.ndarray]
    num_classes: int
    images: Callable[[Tensor], Tensor]  # the model's layout (ModelSpec.images)

    @classmethod
    def of(cls, finetune: Finetune | None, spec: WorkerSpec, data: FederatedData) -> FinetuneRun | None:
        """The run's fine-tuning (the trial's worker settings and data), or None where it is off. Its settings: the
        run's, without DP-SGD (nothing is released) or the gradient probe; the schedule's rate applies per round."""
        if finetune is None:
            return None
        plain = replace(spec.local, privacy=None, probe_rounds=frozenset(), epochs=1)
        x, y = as_tensor(data.dataset.x_train), as_tensor(data.dataset.y_train)  # shared, not copied
        return cls(finetune, plain, spec.seed, x, y, data.train_parts, spec.model.num_classes, spec.model.images)

    def train(self, model: nn.Module, client_id: int, round_index: int) -> int:
        """Fine-tune `model` (holding the model client `client_id` uses) in place; returns the steps taken.

        Its own generator, and the global random state kept (fork_rng): evaluating never shifts training's random
        numbers, whether the federation trains in this process or not."""
        device = next(model.parameters()).device
        index = torch.as_tensor(np.asarray(self.parts[client_id]), dtype=torch.long, device="cpu")  # rows of x
        x, y = self.images(self.x[index]).to(device), self.y[index].to(device)
        settings = self.settings.for_round(max(round_index, 1))
        generator = torch.Generator().manual_seed(finetune_seed(self.seed, round_index, client_id))
        ctx = ClientContext(model, client_id, round_index, x, y, settings.lr)
        steps = self.finetune.steps or None
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            data = LocalData(x, y, self.num_classes)
            result = train_local(model, finetune_method(self.finetune), data, settings, generator, ctx, steps)
        return result.steps
