"""The local training loop, one client at a time (engine/batched.py runs the same loop over K stacked clients).

Methods add loss terms; they never copy this loop.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from raytune_fl.engine.augment import AugmentDraws, AugmentSpec
from raytune_fl.engine.lr_schedule import LrSchedule
from raytune_fl.engine.metric_names import (
    GRAD_COS_PREFIX,
    GRAD_NORM_CE,
    GRAD_NORM_PREFIX,
    GRAD_NORM_TOTAL,
    LOCAL_CE,
    LOCAL_LOSS,
    TERM_PREFIX,
)
from raytune_fl.engine.precision import LossScaler, Precision, loss_scaler, mixed_forward
from raytune_fl.engine.sgd import PlainSGD
from raytune_fl.methods.base import Batch, ClientContext, Method, Phase


@dataclass(frozen=True)
class LocalSettings:
    epochs: int
    batch_size: int
    lr: float
    momentum: float
    weight_decay: float
    augment: AugmentSpec = AugmentSpec()  # all off by default: the loop then draws no extra random numbers
    drop_last: bool = False  # skip an epoch's incomplete last batch (off: only a batch of one sample is skipped)
    bn_running: bool = False  # BatchNorm in eval mode while training: use, never update, its running statistics
    schedule: LrSchedule = LrSchedule()  # `lr` is the base rate; `for_round` applies the schedule
    probe_rounds: frozenset[int] = frozenset()  # rounds that measure gradient norms (diagnostics.gradient_norms)
    precision: Precision = "fp32"  # the forward pass in autocast (engine/precision.py); fp32: no autocast at all

    def for_round(self, round_index: int) -> LocalSettings:
        """These settings at the learning rate of round `round_index` (the same object when the rate is constant)."""
        lr = self.schedule.lr(self.lr, round_index)
        return self if lr == self.lr else replace(self, lr=lr)


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
    """Local SGD on (x, y), phase by phase (`method.phases`; most methods have one, the whole model).

    `client` carries the client's id, round, state and the server payload. `max_steps` (system heterogeneity):
    exactly that many steps, reshuffling each pass, instead of the run's epochs (in a phase that runs them).
    """
    ctx = client or ClientContext(model, client_id=0, round_index=1, x=x, y=y, lr=settings.lr)
    model.train()
    hooks = method.all_hooks
    for hook in hooks:
        hook.on_round_start(ctx)
    names = [LOCAL_LOSS, LOCAL_CE] + [TERM_PREFIX + term.name for term in method.terms]
    # on the training device: the per-step sums never wait for the GPU; one read at the end of the round
    sums = torch.zeros(len(names), dtype=torch.float64, device=x.device)
    counts = [0] * len(names)  # a term is averaged over the steps it was on (plain ints: no device work)
    probe = (
        GradientProbe([t.name for t in method.terms], x.device) if ctx.round_index in settings.probe_rounds else None
    )
    # one loss scale for the whole round (fp16), across phases, as one GradScaler around the round would keep it
    scaler = loss_scaler(settings.precision, x.device)
    for phase in method.phases:
        _train_phase(
            model, method, phase, x, y, settings, generator, num_classes, ctx, max_steps, sums, counts, probe, scaler
        )
    means = [total / max(count, 1) for total, count in zip(sums.tolist(), counts)]
    if ctx.steps and not all(map(_finite, means)):
        raise NonFiniteLossError(f"non-finite local loss: {dict(zip(names, means))}")
    for hook in hooks:
        hook.on_round_end(ctx)
    metrics = dict(zip(names, means)) | (probe.means() if probe else {})
    return LocalResult(ctx.steps, metrics, dict(ctx.new_state), dict(ctx.extras))


def _train_phase(
    model: nn.Module,
    method: Method,
    phase: Phase,
    x: Tensor,
    y: Tensor,
    settings: LocalSettings,
    generator: torch.Generator,
    num_classes: int,
    ctx: ClientContext,
    max_steps: int | None,
    sums: Tensor,
    counts: list[int],
    probe: GradientProbe | None = None,
    scaler: LossScaler | None = None,
) -> None:
    forward = mixed_forward(settings.precision, x.device)  # refuses a precision the device cannot run
    frozen = _freeze_outside(model, phase.trains)
    set_phase_modes(model, phase, settings)
    # a fresh optimiser every phase: momentum does not leak across rounds, clients or phases. Built after the
    # hooks so a frozen parameter (requires_grad=False) is left out and never decayed.
    optimizer = PlainSGD(
        [p for p in model.parameters() if p.requires_grad],
        lr=settings.lr if phase.lr is None else phase.lr,
        momentum=settings.momentum,
        weight_decay=settings.weight_decay,
    )
    terms = method.terms if phase.terms else ()
    width = 2 + len(terms)  # the terms are the last entries of sums/counts
    hooks = method.all_hooks
    budget = max_steps if phase.epochs is None else None
    epochs = settings.epochs if phase.epochs is None else phase.epochs
    steps = 0
    n = x.shape[0]
    passes = epochs if budget is None else budget  # a step budget takes at most one pass per step
    for _ in range(passes):
        if budget is not None and steps >= budget:
            break
        # the batch order is drawn on the CPU generator (the same order on every device), moved once per pass
        order = torch.randperm(n, generator=generator, device="cpu").to(x.device)
        batches = pass_batches(n, settings, None if budget is None else budget - steps)
        draws = None
        if settings.augment.active:  # the pass's numbers in one draw, in the order batch-by-batch draws took them
            draws = AugmentDraws.draw(settings.augment, [size for _, size in batches], generator, x.device)
        for batch_number, (start, size) in enumerate(batches):
            index = order[start : start + size]
            xb, yb = x[index], y[index]
            if draws is not None:
                xb = draws.apply(xb, settings.augment, batch_number)
            logits, z = forward(model, xb)  # float32 outputs under every precision: the terms below are fp32
            ce = F.cross_entropy(logits, yb)
            values: list[Tensor] = [ce]
            loss = ce
            if terms:
                batch = Batch(xb, yb, logits, z, model, num_classes)
                for term in terms:
                    value = term.loss(batch)
                    values.append(value)
                    loss = loss + term.weight * value
            if probe is not None and batch_number == 0:  # the first batch of every pass: early and late in the round
                # unscaled under fp16: autograd.grad of the loss itself (a diagnostic; .grad is left alone)
                probe.measure(values, [term.weight for term in terms], optimizer.params)
            optimizer.zero_grad()
            if scaler is None:
                loss.backward()
                for hook in hooks:
                    hook.after_backward(ctx)
                optimizer.step()
            else:  # fp16: hooks (clipping, SCAFFOLD's correction) see unscaled gradients; an overflow skips the step
                scaler.scale(loss).backward()
                stepper = scaler.unscale(optimizer.params, optimizer.step)
                for hook in hooks:
                    hook.after_backward(ctx)
                scaler.step(stepper)  # a skipped step still counts below: its batch was drawn and seen
            sums[:width] += torch.stack([loss.detach(), *(v.detach() for v in values)]).double()
            counts[:width] = [count + 1 for count in counts[:width]]
            steps += 1
            ctx.steps += 1
    for p in frozen:
        p.requires_grad_(True)
    model.train()


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


def set_phase_modes(model: nn.Module, phase: Phase, settings: LocalSettings) -> None:
    """Train/eval modes for a phase: the body's BatchNorm in eval mode (FedPAC's classifier phase), or every
    BatchNorm's (batchnorm.local_training: running); the loop puts the model back in train mode after the phase."""
    if phase.body_eval:
        model.eval()
        _classifier(model).train()
    if settings.bn_running:
        for module in model.modules():
            if isinstance(module, nn.modules.batchnorm._BatchNorm):
                module.eval()


def pass_batches(n: int, settings: LocalSettings, remaining: int | None = None) -> list[tuple[int, int]]:
    """A pass's batches over n samples as (start, size), at most `remaining` of them (a step budget's rest)."""
    # BatchNorm and the batch-statistic terms need two samples; drop_last skips any incomplete last batch
    smallest = settings.batch_size if settings.drop_last else 2
    batches = [(s, min(settings.batch_size, n - s)) for s in range(0, n, settings.batch_size)]
    batches = [(start, size) for start, size in batches if size >= smallest]
    return batches if remaining is None else batches[:remaining]


def _classifier(model: nn.Module) -> nn.Module:
    classifier = getattr(model, "classifier", None)
    if not isinstance(classifier, nn.Module):
        raise ValueError(f"a classifier or body phase needs `model.classifier`; {type(model).__name__} has none")
    return classifier


def _freeze_outside(model: nn.Module, part: str) -> list[nn.Parameter]:
    """Switch off the gradients of the trainable parameters outside `part`; returns them, to switch back on."""
    if part == "all":
        return []
    inside = {id(p) for p in _classifier(model).parameters()}
    frozen = [p for p in model.parameters() if p.requires_grad and (id(p) in inside) != (part == "classifier")]
    for p in frozen:
        p.requires_grad_(False)
    return frozen


def _finite(value: float) -> bool:
    return value == value and abs(value) != float("inf")
