"""The local training loop, one client at a time: engine/client_step.py's step on the client's own module.

The step itself (losses, gradient probe, backward, hooks, update) and the round around it are engine/client_step.py's,
shared with engine/batched.py's stacked clients; the plan and bookkeeping are engine/steps.py's. What is here is only
how one client holds its parameters: its module, called directly, and a fresh PlainSGD over its trainable parameters
every phase. Methods add loss terms; they never copy this loop.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from raytune_fl.engine.client_step import LocalData, LocalRound, flat_gradient, step_losses, train_round
from raytune_fl.engine.dp_sgd import PrivateStep, private_problem
from raytune_fl.engine.precision import LossScaler, UnscaledStep, loss_scaler, mixed_forward
from raytune_fl.engine.sgd import PlainSGD
from raytune_fl.engine.steps import (
    LocalResult,
    LocalSettings,
    NonFiniteLossError,
    PhasePlan,
    StepGroup,
    pass_batches,
    set_phase_modes,
)
from raytune_fl.methods.base import Batch, ClientContext, Method
from raytune_fl.privacy.local import local_plan

# the settings, result and error are defined in engine/steps.py (both loops use them) and imported from here
__all__ = [
    "LocalData",
    "LocalResult",
    "LocalSettings",
    "NonFiniteLossError",
    "pass_batches",
    "set_phase_modes",
    "train_local",
]


def train_local(
    model: nn.Module,
    method: Method,
    data: LocalData,
    settings: LocalSettings,
    generator: torch.Generator,
    client: ClientContext | None = None,
    max_steps: int | None = None,
) -> LocalResult:
    """Local SGD on `data`, phase by phase (`method.phases`; most methods have one, the whole model).

    `client` carries the client's id, round, state and the server payload (its x, y: `data`'s). `max_steps` (system
    heterogeneity): exactly that many steps, reshuffling each pass, instead of the run's epochs (in a phase that
    runs them).
    """
    ctx = client or ClientContext(model, client_id=0, round_index=1, x=data.x, y=data.y, lr=settings.lr)
    run = LocalRound((model,), (method,), (ctx,), data, settings, (generator,), (max_steps,))
    # one loss scale for the whole round (fp16), across phases, as one GradScaler around the round would keep it
    [result] = train_round(run, OneAtATime(loss_scaler(settings.precision, data.x.device)))
    return result


class OneAtATime:
    """engine/client_step.py's Batching for one client: its own module."""

    names_clients = False

    def __init__(self, scaler: LossScaler | None) -> None:
        self.scaler = scaler

    def clients(self, run: LocalRound, plan: PhasePlan, order: list[int]) -> _OneClient:
        return _OneClient(run, plan, self.scaler)


class _OneClient:
    """A phase of one client: its module and a fresh optimiser (momentum does not leak across rounds, clients or
    phases), built after the hooks and the phase froze parameters, so a frozen one is left out and never decayed."""

    def __init__(self, run: LocalRound, plan: PhasePlan, scaler: LossScaler | None) -> None:
        (self.model,), (self.method,), (self.ctx,) = run.models, run.methods, run.contexts
        self.forward = mixed_forward(run.settings.precision, run.data.x.device)  # refuses what the device cannot run
        self.plan, self.num_classes, self.scaler = plan, run.data.num_classes, scaler
        settings = run.settings
        trainable = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = PlainSGD(trainable, lr=plan.lr, momentum=settings.momentum, weight_decay=settings.weight_decay)
        self.stepper: UnscaledStep | None = None  # fp16: the unscaled step GradScaler takes
        self.private: PrivateStep | None = None
        if settings.privacy is not None:
            problem = private_problem(self.model, self.method, settings)
            if problem:
                raise ValueError(f"privacy.mechanism: local: {problem}")
            expected = local_plan(self.ctx.x.shape[0], settings.batch_size, plan.epochs).expected_batch
            self.private = PrivateStep(settings.privacy, expected, run.generators[0])

    def losses(self, group: StepGroup, xb: Tensor, yb: Tensor) -> list[Tensor]:
        logits, z = self.forward(self.model, xb)  # float32 outputs under every precision: the terms are fp32
        batch = Batch(xb, yb, logits, z, self.model, self.num_classes)
        return step_losses(batch, self.plan.terms, [term.weight for term in self.plan.terms])

    def private_gradients(self, group: StepGroup, xb: Tensor, yb: Tensor) -> list[Tensor] | None:
        assert self.private is not None  # set where settings.privacy is
        grads, values = self.private.gradients(self.model, self.plan.terms, self.num_classes, xb, yb)
        for p, g in zip(self.optimizer.params, grads):
            p.grad = g
        return None if values is None else list(values.unbind())

    def flat_gradients(self, value: Tensor) -> Tensor:
        return flat_gradient(value, self.optimizer.params).unsqueeze(0)

    def objective(self, loss: Tensor) -> Tensor:
        return loss if self.scaler is None else self.scaler.scale(loss)

    def zero_grad(self) -> None:
        self.optimizer.zero_grad()

    def edit_gradients(self) -> None:
        if self.scaler is not None:  # fp16: hooks (clipping, SCAFFOLD's correction) see unscaled gradients
            self.stepper = self.scaler.unscale(self.optimizer.params, self.optimizer.step)
        for hook in self.method.all_hooks:
            hook.after_backward(self.ctx)

    def update(self) -> None:
        if self.scaler is None or self.stepper is None:
            self.optimizer.step()
        else:  # an overflow skips the step; a skipped step still counts: its batch was drawn and seen
            self.scaler.step(self.stepper)

    def finish(self) -> None:
        """The module trained in place: nothing to write back."""
