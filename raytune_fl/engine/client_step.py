"""The client's local step, written once: its losses, the gradient probe, the backward pass, the hooks, the update.

A local round trains K clients (K = 1 in the sequential loop) phase by phase on engine/steps.py's plan; each step of
a group of them runs `_take_step`, in the same order whatever K: the loss terms (`step_losses`), the probe
(diagnostics.gradient_norms) on a pass's first batch, one backward pass, the hooks' gradient edits, the optimiser.
What differs is only how the clients hold their parameters, which a `Batching` decides for a phase:
engine/local.py's one module with its own parameters (the model called directly), engine/batched.py's K stacked
clients (the model called under `torch.func.vmap`, each client's loss depending on its own slice only).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from raytune_fl.engine.steps import (
    LocalResult,
    LocalSettings,
    LossTotals,
    PhasePlan,
    StepGroup,
    group_steps,
    phase_plan,
    phase_setup,
    start_round,
)
from raytune_fl.methods.base import Batch, ClientContext, LocalTerm, Method, Phase
from raytune_fl.metrics import GRAD_COS_PREFIX, GRAD_NORM_CE, GRAD_NORM_PREFIX, GRAD_NORM_TOTAL


@dataclass(frozen=True)
class LocalData:
    """What a local round trains on: inputs and labels (K clients' rows one after another) and the class count
    (the loss terms' `Batch.num_classes`)."""

    x: Tensor
    y: Tensor
    num_classes: int


@dataclass(frozen=True)
class LocalRound:
    """One local round of K clients (`contexts[k].x` is client k's rows of `data`, in order): what its phases and
    steps read, and the loss totals and gradient probe they fill."""

    models: Sequence[nn.Module]
    methods: Sequence[Method]
    contexts: Sequence[ClientContext]
    data: LocalData
    settings: LocalSettings
    generators: Sequence[torch.Generator]
    max_steps: Sequence[int | None]  # each client's step budget (system heterogeneity); None: the run's epochs
    totals: LossTotals = field(init=False)
    probe: GradientProbe | None = field(init=False)  # on the rounds of diagnostics.gradient_norms

    def __post_init__(self) -> None:
        device = self.data.x.device
        object.__setattr__(self, "totals", LossTotals(self.methods[0], len(self.models), device))
        probed = self.contexts[0].round_index in self.settings.probe_rounds  # a batch's clients share a round
        names = [term.name for term in self.methods[0].terms]
        object.__setattr__(self, "probe", GradientProbe(names, len(self.models), device) if probed else None)

    @property
    def starts(self) -> list[int]:
        """Where each client's rows begin in `data`."""
        sizes = [ctx.x.shape[0] for ctx in self.contexts]
        return [sum(sizes[:k]) for k in range(len(sizes))]


class Clients(Protocol):
    """A phase's clients as a step trains them (built inside the phase's setup, so frozen parameters stay out)."""

    def losses(self, group: StepGroup, xb: Tensor, yb: Tensor) -> list[Tensor]:
        """The group's loss, cross-entropy and each phase term (`step_losses`), one value per client of it."""

    def private_gradients(self, group: StepGroup, xb: Tensor, yb: Tensor) -> list[Tensor] | None:
        """Local DP-SGD (engine/dp_sgd.py): `.grad` set to the noisy mean of the clipped per-sample gradients; the
        drawn samples' mean loss, cross-entropy and terms (None for an empty batch)."""

    def flat_gradients(self, value: Tensor) -> Tensor:
        """d value / d trainable parameters, per client of the group: (clients, parameters); `.grad` untouched."""

    def objective(self, loss: Tensor) -> Tensor:
        """What is differentiated: `loss`, scaled per client under fp16."""

    def zero_grad(self) -> None: ...

    def edit_gradients(self) -> None:
        """fp16: the gradients unscaled; then the hooks' edits (clipping, SCAFFOLD's correction, FedProx's pull)."""

    def update(self) -> Tensor | None:
        """The optimiser's step (skipped for a client whose fp16 gradients overflowed); returns the group's caller
        indices on the device for LossTotals (None: one client)."""

    def finish(self) -> None:
        """After the phase's last step: the trained weights where their modules and hooks read them."""


class Batching(Protocol):
    """How a round holds its clients: one module (engine/local.py) or K stacked (engine/batched.py)."""

    names_clients: bool  # a non-finite loss names its client

    def clients(self, run: LocalRound, plan: PhasePlan, order: list[int]) -> Clients:
        """The phase's clients, in `order` (stacked row -> the round's client index); `plan`: the lead client's."""


def train_round(run: LocalRound, batching: Batching) -> list[LocalResult]:
    """Local SGD for the round's clients, phase by phase (`method.phases`; most methods have one, the whole model);
    each client's result (its loss means, probe means, steps and the state its hooks wrote)."""
    for model in run.models:
        model.train()
    start_round(run.methods, run.contexts)
    for phase in run.methods[0].phases:
        _train_phase(run, phase, batching)
    results = run.totals.results(run.contexts, run.methods, name_clients=batching.names_clients)
    if run.probe is None:
        return results
    return [replace(result, metrics=result.metrics | run.probe.means(k)) for k, result in enumerate(results)]


def _train_phase(run: LocalRound, phase: Phase, batching: Batching) -> None:
    settings, starts = run.settings, run.starts
    plans = [phase_plan(method, phase, settings, cap) for method, cap in zip(run.methods, run.max_steps)]
    schedules = [plan.steps(ctx.x.shape[0], settings, g) for plan, ctx, g in zip(plans, run.contexts, run.generators)]
    # the most steps first: the clients still training at a step are then a leading run of stacked rows (a view of
    # the stacked tensors, updated in place) rather than scattered ones (gathered and written back)
    order = sorted(range(len(plans)), key=lambda k: -len(schedules[k]))
    with phase_setup([run.models[k] for k in order], phase, settings):
        # the lead client's plan: its terms belong to the hook instances the step runs
        clients = batching.clients(run, plans[order[0]], order)
        device = run.data.x.device
        for groups in group_steps([schedules[k] for k in order], [starts[k] for k in order], device):
            for group in groups:
                _take_step(run, clients, group, [order[row] for row in group.clients])
        clients.finish()


def _take_step(run: LocalRound, clients: Clients, group: StepGroup, ids: list[int]) -> None:
    """One step of `group`'s clients (`ids`: the round's index of each)."""
    xb, yb = group.samples(run.data.x, run.data.y, run.settings.augment)
    values: list[Tensor] | None
    if run.settings.privacy is not None:  # no probe: its gradients are not privatised
        values = clients.private_gradients(group, xb, yb)
    else:
        values = clients.losses(group, xb, yb)
        if run.probe is not None:  # the first batch of every pass: early and late in the round
            run.probe.measure(clients, group, ids, values, run.methods)
        clients.zero_grad()
        clients.objective(values[0]).sum().backward()  # a client's loss depends on its own parameters only
    clients.edit_gradients()
    rows = clients.update()
    if values is not None:  # an empty DP-SGD batch has no loss: it is a step (noise only), not a loss to average
        run.totals.add(ids, torch.stack([v.detach() for v in values], dim=-1).view(len(ids), -1), rows)
    for k in ids:
        run.contexts[k].steps += 1


def step_losses(batch: Batch, terms: Sequence[LocalTerm], weights: Sequence[Any]) -> list[Tensor]:
    """One client's loss, then its cross-entropy and each term (unweighted); `weights[t]`: term t's weight (a float,
    or a client's slice of per-client weights under vmap)."""
    ce = F.cross_entropy(batch.logits, batch.y)
    values: list[Tensor] = [ce]
    loss = ce
    for term, weight in zip(terms, weights):
        value = term.loss(batch)
        values.append(value)
        loss = loss + weight * value
    return [loss, *values]


class GradientProbe:
    """diagnostics.gradient_norms: on the batches it is shown, the norms of the gradients of cross-entropy, of
    each weighted loss term and of their sum, and each term's cosine with cross-entropy's; averaged over them,
    per client.

    Why: a regulariser can only correct drift if its gradient is not negligible next to cross-entropy's. Hooks
    that edit gradients after backward (FedProx's proximal pull) are not loss terms and are not measured. The
    gradients come from `torch.autograd.grad`, so training (the `.grad` the step uses, the random numbers) is
    the same with the probe as without it.
    """

    def __init__(self, term_names: list[str], clients: int, device: torch.device) -> None:
        self.term_names = term_names
        self.names = [GRAD_NORM_TOTAL, GRAD_NORM_CE]
        self.names += [GRAD_NORM_PREFIX + name for name in term_names] + [GRAD_COS_PREFIX + name for name in term_names]
        self.sums = torch.zeros(clients, len(self.names), dtype=torch.float64, device=device)
        self.counts = [0] * clients

    def measure(
        self, clients: Clients, group: StepGroup, ids: list[int], values: list[Tensor], methods: Sequence[Method]
    ) -> None:
        """A step's measurement for the clients of `group` at their pass's first batch. `values`: the step's loss,
        cross-entropy, then the phase's terms (none in a phase that trains without them)."""
        probed = [i for i, first in enumerate(group.firsts) if first]
        if not probed:
            return
        # unscaled under fp16: autograd.grad of the loss itself (a diagnostic; .grad is left alone)
        ce, *terms = [clients.flat_gradients(value) for value in values[1:]]
        for i in probed:
            weights = [term.weight for term in methods[ids[i]].terms[: len(terms)]]
            self.add(ids[i], ce[i], [weight * gradient[i] for weight, gradient in zip(weights, terms)])

    def add(self, client: int, ce: Tensor, weighted: list[Tensor]) -> None:
        """One measurement of `client`: its flat cross-entropy gradient and weighted term gradients."""
        weighted = weighted + [torch.zeros_like(ce)] * (len(self.term_names) - len(weighted))
        total = ce + sum(weighted, torch.zeros_like(ce))
        norms = [total.norm(), ce.norm(), *(g.norm() for g in weighted)]
        cosines = [F.cosine_similarity(g, ce, dim=0) for g in weighted]  # 0 where either gradient is 0
        self.sums[client] += torch.stack(norms + cosines).double()
        self.counts[client] += 1

    def means(self, client: int = 0) -> dict[str, float]:
        return dict(zip(self.names, (self.sums[client] / max(self.counts[client], 1)).tolist()))


def flat_gradient(value: Tensor, params: list[Tensor], start_dim: int = 0) -> Tensor:
    """d value / d params, flattened into one vector (zeros where `value` does not depend on a parameter);
    `start_dim` 1: stacked clients' parameters, one row per client."""
    if not value.requires_grad:
        return torch.cat([torch.zeros_like(p).flatten(start_dim) for p in params], dim=start_dim)
    grads = torch.autograd.grad(value, params, retain_graph=True, allow_unused=True)
    flat = [(torch.zeros_like(p) if g is None else g).flatten(start_dim) for p, g in zip(params, grads)]
    return torch.cat(flat, dim=start_dim)
