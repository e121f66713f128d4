"""The local training loop, one client at a time (engine/batched.py runs the same loop over K stacked clients).

Both loops plan and count their steps with engine/steps.py (the batches and augmentation a client draws, a phase's
rate, budget and terms, the loss bookkeeping and the round's result); the step itself is here: the forward pass,
the loss terms, the backward pass, the hooks and the optimiser. Methods add loss terms; they never copy this loop.
"""

from __future__ import annotations

from dataclasses import replace

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from raytune_fl.engine.precision import LossScaler, loss_scaler, mixed_forward
from raytune_fl.engine.sgd import PlainSGD
from raytune_fl.engine.steps import (
    LocalResult,
    LocalSettings,
    LossTotals,
    NonFiniteLossError,
    PhasePlan,
    group_steps,
    pass_batches,
    phase_plan,
    phase_setup,
    set_phase_modes,
    start_round,
)
from raytune_fl.methods.base import Batch, ClientContext, Method, Phase
from raytune_fl.metrics import GRAD_COS_PREFIX, GRAD_NORM_CE, GRAD_NORM_PREFIX, GRAD_NORM_TOTAL

# the settings, result and error are defined in engine/steps.py (both loops use them) and imported from here
__all__ = [
    "GradientProbe",
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
    x: Tensor,
    y: Tensor,
    settings: LocalSettings,
    generator: torch.Generator,
    num_classes: int,
    client: ClientContext | None = None,
    max_steps: int | None = None,
) -> LocalResult:
    """Local SGD on (x, y), phase by phase (`method.phases`; most methods have one, the whole model).

    `client` carries the client's id, round, state and the server payload. `max_steps` (system heterogeneity):
    exactly that many steps, reshuffling each pass, instead of the run's epochs (in a phase that runs them).
    """
    ctx = client or ClientContext(model, client_id=0, round_index=1, x=x, y=y, lr=settings.lr)
    model.train()
    start_round([method], [ctx])
    totals = LossTotals(method, 1, x.device)
    probe = (
        GradientProbe([t.name for t in method.terms], x.device) if ctx.round_index in settings.probe_rounds else None
    )
    # one loss scale for the whole round (fp16), across phases, as one GradScaler around the round would keep it
    scaler = loss_scaler(settings.precision, x.device)
    for phase in method.phases:
        plan = phase_plan(method, phase, settings, max_steps)
        _train_phase(model, method, phase, plan, x, y, settings, generator, num_classes, ctx, totals, probe, scaler)
    [result] = totals.results([ctx], [method])
    return result if probe is None else replace(result, metrics=result.metrics | probe.means())


def _train_phase(
    model: nn.Module,
    method: Method,
    phase: Phase,
    plan: PhasePlan,
    x: Tensor,
    y: Tensor,
    settings: LocalSettings,
    generator: torch.Generator,
    num_classes: int,
    ctx: ClientContext,
    totals: LossTotals,
    probe: GradientProbe | None = None,
    scaler: LossScaler | None = None,
) -> None:
    forward = mixed_forward(settings.precision, x.device)  # refuses a precision the device cannot run
    with phase_setup([model], phase, settings):
        # a fresh optimiser every phase: momentum does not leak across rounds, clients or phases. Built after the
        # hooks so a frozen parameter (requires_grad=False) is left out and never decayed.
        optimizer = PlainSGD(
            [p for p in model.parameters() if p.requires_grad],
            lr=plan.lr,
            momentum=settings.momentum,
            weight_decay=settings.weight_decay,
        )
        steps = plan.steps(x.shape[0], settings, generator)
        for step, (group,) in zip(steps, group_steps([steps], [0], x.device)):
            xb, yb = group.samples(x, y, settings.augment)
            logits, z = forward(model, xb)  # float32 outputs under every precision: the terms below are fp32
            values = _losses(plan, Batch(xb, yb, logits, z, model, num_classes))
            loss = values[0]
            if probe is not None and step.first:  # the first batch of every pass: early and late in the round
                # unscaled under fp16: autograd.grad of the loss itself (a diagnostic; .grad is left alone)
                probe.measure(values[1:], [term.weight for term in plan.terms], optimizer.params)
            _update(optimizer, scaler, loss, method, ctx)
            totals.add((0,), torch.stack([v.detach() for v in values]).unsqueeze(0))
            ctx.steps += 1


def _losses(plan: PhasePlan, batch: Batch) -> list[Tensor]:
    """The step's loss, then cross-entropy and each of the phase's terms (unweighted)."""
    ce = F.cross_entropy(batch.logits, batch.y)
    values: list[Tensor] = [ce]
    loss = ce
    for term in plan.terms:
        value = term.loss(batch)
        values.append(value)
        loss = loss + term.weight * value
    return [loss, *values]


def _update(optimizer: PlainSGD, scaler: LossScaler | None, loss: Tensor, method: Method, ctx: ClientContext) -> None:
    """Backward, the hooks' gradient edits, the optimiser's step."""
    optimizer.zero_grad()
    if scaler is None:
        loss.backward()
        for hook in method.all_hooks:
            hook.after_backward(ctx)
        optimizer.step()
    else:  # fp16: hooks (clipping, SCAFFOLD's correction) see unscaled gradients; an overflow skips the step
        scaler.scale(loss).backward()
        stepper = scaler.unscale(optimizer.params, optimizer.step)
        for hook in method.all_hooks:
            hook.after_backward(ctx)
        scaler.step(stepper)  # a skipped step still counts: its batch was drawn and seen


class GradientProbe:
    """diagnostics.gradient_norms: on the batches it is shown, the norms of the gradients of cross-entropy, of
    each weighted loss term and of their sum, and each term's cosine with cross-entropy's; averaged over them.

    Why: a regulariser can only correct drift if its gradient is not negligible next to cross-entropy's. Hooks
    that edit gradients after backward (FedProx's proximal pull) are not loss terms and are not measured. The
    gradients come from `torch.autograd.grad`, so training (the `.grad` the step uses, the random numbers) is
    the same with the probe as without it.
    """

    def __init__(self, term_names: list[str], device: torch.device) -> None:
        self.term_names = term_names
        self.names = [GRAD_NORM_TOTAL, GRAD_NORM_CE]
        self.names += [GRAD_NORM_PREFIX + name for name in term_names] + [GRAD_COS_PREFIX + name for name in term_names]
        self.sums = torch.zeros(len(self.names), dtype=torch.float64, device=device)
        self.count = 0

    def measure(self, values: list[Tensor], weights: list[float], params: list[Tensor]) -> None:
        """`values`: cross-entropy, then the terms of this phase (none in a phase that trains without them)."""
        ce = _flat_gradient(values[0], params)
        weighted = [weight * _flat_gradient(value, params) for value, weight in zip(values[1:], weights)]
        weighted += [torch.zeros_like(ce)] * (len(self.term_names) - len(weighted))
        total = ce + sum(weighted, torch.zeros_like(ce))
        norms = [total.norm(), ce.norm(), *(g.norm() for g in weighted)]
        cosines = [F.cosine_similarity(g, ce, dim=0) for g in weighted]  # 0 where either gradient is 0
        self.sums += torch.stack(norms + cosines).double()
        self.count += 1

    def means(self) -> dict[str, float]:
        return dict(zip(self.names, (self.sums / max(self.count, 1)).tolist()))


def _flat_gradient(value: Tensor, params: list[Tensor]) -> Tensor:
    """d value / d params, flattened into one vector (zeros where `value` does not depend on a parameter)."""
    if not value.requires_grad:
        return torch.cat([torch.zeros_like(p).flatten() for p in params])
    grads = torch.autograd.grad(value, params, retain_graph=True, allow_unused=True)
    return torch.cat([(torch.zeros_like(p) if g is None else g).flatten() for p, g in zip(params, grads)])
