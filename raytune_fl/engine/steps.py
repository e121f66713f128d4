"""What the two local loops share, written once: the settings and result, each phase's plan and the loss bookkeeping.

engine/local.py takes the steps one client at a time, engine/batched.py for K stacked clients at once; the step
itself (forward, backward, hooks, update) is engine/client_step.py's, everything a step is planned and counted with
is here:
- the plan: a client's batches and augmentation numbers, drawn pass by pass on its CPU generator (`client_steps`)
  and moved to the device in one copy (`group_steps`), and the phase's rate, epochs, step budget and terms
  (`PhasePlan`), its frozen parameters and module modes (`phase_setup`);
- the bookkeeping: per-step sums of the loss, cross-entropy and each term in float64, averaged over the steps each
  was on, checked for NaN/Inf, then the hooks' round end and each client's `LocalResult` (`LossTotals`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import Tensor, nn

from raytune_fl.engine.augment import AugmentDraws, AugmentSpec
from raytune_fl.engine.lr_schedule import LrSchedule
from raytune_fl.engine.precision import Precision
from raytune_fl.errors import RaytuneFLError
from raytune_fl.methods.base import ClientContext, LocalTerm, Method, Phase
from raytune_fl.metrics import LOCAL_CE, LOCAL_LOSS, TERM_PREFIX
from raytune_fl.privacy.local import local_plan


@dataclass(frozen=True)
class LocalPrivacy:
    """Local DP-SGD (privacy.mechanism: local): each sample's gradient clipped to `clip_norm` in L2, Gaussian noise
    of standard deviation `noise_multiplier * clip_norm` added to their sum (engine/dp_sgd.py)."""

    clip_norm: float
    noise_multiplier: float


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
    privacy: LocalPrivacy | None = None  # local DP-SGD: Poisson batches (`poisson_steps`), clipped noisy gradients

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


class NonFiniteLossError(FloatingPointError, RaytuneFLError):
    """Local training produced a NaN/Inf loss: the trial has diverged."""


# ------------------------------------------------------------------------------------------------ the plan


def pass_batches(n: int, settings: LocalSettings, remaining: int | None = None) -> list[tuple[int, int]]:
    """A pass's batches over n samples as (start, size), at most `remaining` of them (a step budget's rest)."""
    # BatchNorm and the batch-statistic terms need two samples; drop_last skips any incomplete last batch
    smallest = settings.batch_size if settings.drop_last else 2
    batches = [(s, min(settings.batch_size, n - s)) for s in range(0, n, settings.batch_size)]
    batches = [(start, size) for start, size in batches if size >= smallest]
    return batches if remaining is None else batches[:remaining]


@dataclass(frozen=True)
class ClientStep:
    """One step of one client, on the CPU: its samples and their augmentation numbers."""

    index: Tensor  # (size,) rows of the client's data
    offsets: Tensor | None  # (2, size) crop row and column offsets; None without crop
    flips: Tensor | None  # (size,) bool; None without flip
    first: bool  # the first batch of its pass


def client_steps(
    n: int, settings: LocalSettings, generator: torch.Generator, epochs: int, budget: int | None
) -> list[ClientStep]:
    """A client's steps in a phase: `epochs` passes, or passes until `budget` steps (a new order each pass).

    Each pass draws its order, then its augmentation numbers (AugmentDraws' order), on the client's CPU generator:
    the same numbers on every device. Nothing else reads the generator while the client trains, so drawing every
    pass before the first step gives the numbers drawing each pass before its own steps would.
    """
    if settings.privacy is not None:
        return poisson_steps(n, settings, generator, epochs, budget)
    steps: list[ClientStep] = []
    spec = settings.augment
    for _ in range(epochs if budget is None else budget):  # a step budget takes at most one pass per step
        if budget is not None and len(steps) >= budget:
            break
        order = torch.randperm(n, generator=generator, device="cpu")
        batches = pass_batches(n, settings, None if budget is None else budget - len(steps))
        draws = None
        if spec.active:
            draws = AugmentDraws.draw(spec, [size for _, size in batches], generator, torch.device("cpu"))
        for number, (start, size) in enumerate(batches):
            offsets = flips = None
            if draws is not None:
                begin = draws.starts[number]
                offsets = draws.offsets[:, begin : begin + size] if spec.crop_padding else None
                flips = draws.flips[begin : begin + size] if spec.horizontal_flip else None
            steps.append(ClientStep(order[start : start + size], offsets, flips, number == 0))
    return steps


def poisson_steps(
    n: int, settings: LocalSettings, generator: torch.Generator, epochs: int, budget: int | None
) -> list[ClientStep]:
    """Local DP-SGD's steps (privacy/local.py's plan): each step a Poisson batch, every one of the n samples in it
    independently with the plan's rate, then its augmentation numbers; `epochs` x ceil(n / batch_size) steps, or
    exactly `budget`. A batch may be empty: it is still a step (noise only), as the accountant counts it. The noise
    is drawn on the same generator after all of them, step by step: a seed still replays."""
    plan = local_plan(n, settings.batch_size, epochs)
    per_epoch = max(plan.steps_per_round // epochs, 1)
    spec, cpu = settings.augment, torch.device("cpu")
    steps: list[ClientStep] = []
    for number in range(plan.steps_per_round if budget is None else budget):
        # float64: the comparison is a Bernoulli draw of the rate to within 2^-53, not float32's 2^-24
        chosen = torch.rand(n, generator=generator, dtype=torch.float64, device="cpu") < plan.sample_rate
        index = chosen.nonzero().flatten()
        offsets = flips = None
        if spec.active:
            draws = AugmentDraws.draw(spec, [index.numel()], generator, cpu)
            offsets = draws.offsets if spec.crop_padding else None
            flips = draws.flips if spec.horizontal_flip else None
        steps.append(ClientStep(index, offsets, flips, number % per_epoch == 0))
    return steps


@dataclass(frozen=True)
class StepGroup:
    """Clients that take a step together: same step number, same batch size."""

    clients: tuple[int, ...]
    size: int
    rows: Tensor  # (len(clients), size) rows of the round's concatenated client data
    offsets: Tensor | None  # (2, len(clients) * size) crop offsets, client after client; None without crop
    flips: Tensor | None  # (len(clients) * size,) flips; None without flip
    firsts: tuple[bool, ...] = ()  # per client: whether this is the first batch of its pass (the gradient probe's)

    def samples(self, x: Tensor, y: Tensor, spec: AugmentSpec) -> tuple[Tensor, Tensor]:
        """The group's inputs (augmented) and labels, client after client: (len(clients) * size, ...) each."""
        rows = self.rows.reshape(-1)
        xb = x[rows]
        if spec.active:
            none = torch.empty(2, 0, dtype=torch.long, device=x.device)  # a switched-off part: never read
            offsets = self.offsets if self.offsets is not None else none
            flips = self.flips if self.flips is not None else none[0].bool()
            xb = AugmentDraws(offsets, flips, (0,)).apply(xb, spec, 0)
        return xb, y[rows]


def group_steps(
    schedules: Sequence[list[ClientStep]], starts: Sequence[int], device: torch.device
) -> list[list[StepGroup]]:
    """Per step, its groups (largest batch first); every index and augmentation number moved in one copy each.
    `starts[k]`: where client k's rows begin in the data the groups index."""
    pieces: list[Tensor] = []  # rows, then offsets, then flips: sliced back per group after one transfer
    layout: list[list[tuple[tuple[int, ...], int, int, int, int, tuple[bool, ...]]]] = []
    at = 0
    for step in range(max((len(s) for s in schedules), default=0)):
        by_size: dict[int, list[int]] = {}
        for client, schedule in enumerate(schedules):
            if step < len(schedule):
                by_size.setdefault(schedule[step].index.numel(), []).append(client)
        groups = []
        for size in sorted(by_size, reverse=True):
            clients = tuple(by_size[size])
            entries = [schedules[c][step] for c in clients]
            rows_at = at
            pieces += [entry.index + starts[c] for c, entry in zip(clients, entries)]
            at += len(clients) * size
            offsets_at = flips_at = -1
            if entries[0].offsets is not None:
                offsets_at = at
                pieces += [e.offsets.reshape(-1) for e in entries if e.offsets is not None]  # (2, size): rows, columns
                at += 2 * len(clients) * size
            if entries[0].flips is not None:
                flips_at = at
                pieces += [e.flips.long() for e in entries if e.flips is not None]
                at += len(clients) * size
            groups.append((clients, size, rows_at, offsets_at, flips_at, tuple(entry.first for entry in entries)))
        layout.append(groups)
    flat = torch.cat(pieces).to(device) if pieces else torch.empty(0, dtype=torch.long, device=device)
    return [[_slice_group(flat, *group) for group in groups] for groups in layout]


def _slice_group(
    flat: Tensor,
    clients: tuple[int, ...],
    size: int,
    rows_at: int,
    offsets_at: int,
    flips_at: int,
    firsts: tuple[bool, ...],
) -> StepGroup:
    """A group's step out of `flat`, the one copy group_steps moved, at the offsets it laid the group out at."""
    g = len(clients)
    rows = flat[rows_at : rows_at + g * size].view(g, size)
    offsets = None
    if offsets_at >= 0:  # client after client, each (2, size): regroup to (2, g * size)
        offsets = flat[offsets_at : offsets_at + 2 * g * size].view(g, 2, size).transpose(0, 1).reshape(2, -1)
    flips = flat[flips_at : flips_at + g * size].bool() if flips_at >= 0 else None
    return StepGroup(clients, size, rows, offsets, flips, firsts)


@dataclass(frozen=True)
class PhasePlan:
    """How a client trains in a phase: at which rate, for how many epochs or steps, with which terms."""

    lr: float
    epochs: int
    budget: int | None  # the client's step budget (max_steps), in a phase that runs the run's epochs; else None
    terms: tuple[LocalTerm, ...]  # none in a phase that trains without them

    @property
    def width(self) -> int:
        """The loss, cross-entropy and this phase's terms: the first `width` names of LossTotals."""
        return 2 + len(self.terms)

    def steps(self, n: int, settings: LocalSettings, generator: torch.Generator) -> list[ClientStep]:
        return client_steps(n, settings, generator, self.epochs, self.budget)


def phase_plan(method: Method, phase: Phase, settings: LocalSettings, max_steps: int | None) -> PhasePlan:
    """`phase` of `method` under `settings`; `max_steps`: the client's step budget (system heterogeneity)."""
    return PhasePlan(
        lr=settings.lr if phase.lr is None else phase.lr,
        epochs=settings.epochs if phase.epochs is None else phase.epochs,
        budget=max_steps if phase.epochs is None else None,
        terms=tuple(method.terms) if phase.terms else (),
    )


@contextlib.contextmanager
def phase_setup(models: Sequence[nn.Module], phase: Phase, settings: LocalSettings) -> Iterator[None]:
    """While a phase trains: the parameters outside `phase.trains` frozen on every model, and the modes of the one
    that computes (`models[0]`) set for the phase; afterwards the frozen ones train again and it is in train mode."""
    frozen = [_freeze_outside(model, phase.trains) for model in models]
    set_phase_modes(models[0], phase, settings)
    try:
        yield
    finally:
        for parameters in frozen:
            for p in parameters:
                p.requires_grad_(True)
        models[0].train()


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


# ------------------------------------------------------------------------------------------------ the bookkeeping


def start_round(methods: Sequence[Method], contexts: Sequence[ClientContext]) -> None:
    """Each client's hooks see its round start (their own instances, their own context)."""
    for method, ctx in zip(methods, contexts):
        for hook in method.all_hooks:
            hook.on_round_start(ctx)


class LossTotals:
    """A round's per-step losses of K clients: the loss, cross-entropy and each term (unweighted), summed in float64.

    The sums stay on the training device (a step never waits for the GPU; one read at the round's end); the counts
    are plain ints (no device work): a term is averaged over the steps it was on, not over the round's.
    """

    def __init__(self, method: Method, clients: int, device: torch.device) -> None:
        self.names = [LOCAL_LOSS, LOCAL_CE] + [TERM_PREFIX + term.name for term in method.terms]
        self.sums = torch.zeros(clients, len(self.names), dtype=torch.float64, device=device)
        self.counts = [[0] * len(self.names) for _ in range(clients)]

    def add(self, clients: Sequence[int], values: Tensor, rows: Tensor | None = None) -> None:
        """One step of `clients`: `values[i]` is client `clients[i]`'s loss, cross-entropy and phase terms (the
        first `values.shape[1]` names); `rows`: `clients` as an index tensor on the device (None: one client)."""
        width = values.shape[1]
        if rows is None:
            (client,) = clients
            self.sums[client, :width] += values[0].double()
        else:
            self.sums[:, :width].index_add_(0, rows, values.double())
        for client in clients:
            self.counts[client][:width] = [count + 1 for count in self.counts[client][:width]]

    def means(self) -> list[dict[str, float]]:
        """Each client's means by name (0 for a name never on)."""
        return [
            dict(zip(self.names, (total / max(count, 1) for total, count in zip(row, counts))))
            for row, counts in zip(self.sums.tolist(), self.counts)
        ]

    def results(
        self, contexts: Sequence[ClientContext], methods: Sequence[Method], name_clients: bool = False
    ) -> list[LocalResult]:
        """The round's end, client by client: a NaN/Inf mean raises NonFiniteLossError (naming the client when
        `name_clients`), else its hooks' `on_round_end` run and its result is built."""
        results = []
        for means, ctx, method in zip(self.means(), contexts, methods):
            if ctx.steps and not all(map(_finite, means.values())):
                where = f" (client {ctx.client_id})" if name_clients else ""
                raise NonFiniteLossError(f"non-finite local loss{where}: {means}")
            for hook in method.all_hooks:
                hook.on_round_end(ctx)
            results.append(LocalResult(ctx.steps, means, dict(ctx.new_state), dict(ctx.extras)))
        return results


def _finite(value: float) -> bool:
    return value == value and abs(value) != float("inf")
