"""The one local training loop. Methods add loss terms; they never copy this loop."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from raytune_fl.engine.augment import AugmentSpec, augment_batch
from raytune_fl.methods.base import Batch, Method


@dataclass(frozen=True)
class LocalSettings:
    epochs: int
    batch_size: int
    lr: float
    momentum: float
    weight_decay: float
    augment: AugmentSpec = AugmentSpec()  # all off by default: the loop then draws no extra random numbers


@dataclass(frozen=True)
class LocalResult:
    steps: int
    metrics: dict[str, float]  # means over local batches: loss, ce and term_<name> (unweighted)


class NonFiniteLossError(FloatingPointError):
    """Local training produced a NaN/Inf loss: the trial has diverged."""


def train_local(
    model: nn.Module,
    method: Method,
    x: Tensor,
    y: Tensor,
    settings: LocalSettings,
    generator: torch.Generator,
    num_classes: int,
) -> LocalResult:
    model.train()
    # a fresh optimiser every round: momentum does not leak across rounds or clients
    optimizer = torch.optim.SGD(
        model.parameters(), lr=settings.lr, momentum=settings.momentum, weight_decay=settings.weight_decay
    )
    for term in method.terms:
        term.on_round_start(model)
    names = ["loss", "ce"] + [f"term_{term.name}" for term in method.terms]
    sums = torch.zeros(len(names), dtype=torch.float64)
    steps = 0
    n = x.shape[0]
    for _ in range(settings.epochs):
        order = torch.randperm(n, generator=generator)
        for start in range(0, n, settings.batch_size):
            index = order[start : start + settings.batch_size]
            if index.numel() < 2:  # BatchNorm and the batch-statistic terms need two samples
                continue
            xb, yb = augment_batch(x[index], settings.augment, generator), y[index]
            logits, z = model(xb)
            ce = F.cross_entropy(logits, yb)
            values: list[Tensor] = [ce]
            loss = ce
            if method.terms:
                batch = Batch(xb, yb, logits, z, model, num_classes)
                for term in method.terms:
                    value = term.loss(batch)
                    values.append(value)
                    loss = loss + term.weight * value
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            sums += torch.stack([loss.detach(), *(v.detach() for v in values)]).double()
            steps += 1
    means = (sums / max(steps, 1)).tolist()
    if steps and not all(map(_finite, means)):
        raise NonFiniteLossError(f"non-finite local loss: {dict(zip(names, means))}")
    return LocalResult(steps, dict(zip(names, means)))


def _finite(value: float) -> bool:
    return value == value and abs(value) != float("inf")
