"""The one local training loop. Methods add loss terms; they never copy this loop."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from raytune_fl.engine.augment import AugmentSpec, augment_batch
from raytune_fl.methods.base import Batch, ClientContext, Method


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
    state: dict[str, Any]  # per-client state the hooks wrote, by hook name (the server keeps it)
    extras: dict[str, Any]  # what the hooks wrote for the aggregator, by hook name


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
    client: ClientContext | None = None,
    max_steps: int | None = None,
) -> LocalResult:
    """Local SGD on (x, y). `client` carries the client's id, round, state and the server payload.

    `max_steps` (system heterogeneity): exactly that many steps, reshuffling each pass, instead of `epochs`.
    """
    ctx = client or ClientContext(model, client_id=0, round_index=1, x=x, y=y, lr=settings.lr)
    model.train()
    hooks = method.all_hooks
    for hook in hooks:
        hook.on_round_start(ctx)
    # a fresh optimiser every round: momentum does not leak across rounds or clients. Built after the
    # hooks so a frozen parameter (requires_grad=False) is left out and never decayed.
    optimizer = torch.optim.SGD(
        [p for p in model.parameters() if p.requires_grad],
        lr=settings.lr,
        momentum=settings.momentum,
        weight_decay=settings.weight_decay,
    )
    names = ["loss", "ce"] + [f"term_{term.name}" for term in method.terms]
    sums = torch.zeros(len(names), dtype=torch.float64)
    steps = 0
    n = x.shape[0]
    passes = settings.epochs if max_steps is None else max_steps  # a step budget takes at most one pass per step
    for _ in range(passes):
        if max_steps is not None and steps >= max_steps:
            break
        order = torch.randperm(n, generator=generator)
        for start in range(0, n, settings.batch_size):
            if max_steps is not None and steps >= max_steps:
                break
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
            for hook in hooks:
                hook.after_backward(ctx)
            optimizer.step()
            sums += torch.stack([loss.detach(), *(v.detach() for v in values)]).double()
            steps += 1
            ctx.steps = steps
    means = (sums / max(steps, 1)).tolist()
    if steps and not all(map(_finite, means)):
        raise NonFiniteLossError(f"non-finite local loss: {dict(zip(names, means))}")
    for hook in hooks:
        hook.on_round_end(ctx)
    return LocalResult(steps, dict(zip(names, means)), dict(ctx.new_state), dict(ctx.extras))


def _finite(value: float) -> bool:
    return value == value and abs(value) != float("inf")
