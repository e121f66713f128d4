"""Many clients in one step: engine/client_step.py's step, vectorised over the clients of one worker.

K clients train as one model whose parameters, buffers (BatchNorm running statistics) and SGD momentum carry a
leading client dimension: `torch.func.vmap` over `functional_call` turns each layer into one batched kernel (a
convolution becomes a grouped one), so a step costs about what one client's step costs in launches, whatever K.

What stays per client, exactly as the sequential loop does it:
- the batches: each client's steps come from engine/steps.py's `client_steps`, the plan the sequential loop trains
  on (its CPU generator draws its batch order and augmentation numbers pass by pass), so every client sees the
  same samples; the phase's rate, step budget and terms are its `PhasePlan`, the loss means its `LossTotals`;
- steps: a client that has run out of batches (smaller data, a step budget) sits out: its parameters, buffers and
  momentum stop changing. A step's clients are grouped by batch size (`group_steps`), so a short last batch is its
  own group (BatchNorm's batch statistics and the loss's mean see exactly that client's samples, no padding);
- the step: engine/client_step.py's, as the sequential loop's (losses, gradient probe, backward, hooks, update);
  what is here is how K clients hold their parameters (`_StackedClients`);
- hooks: `on_round_start` / `on_round_end` run per client on that client's own module (loaded with its weights,
  written back after training); loss terms run inside the vmapped step with their per-client tensors
  (`ClientHook.per_client`) and weights stacked; gradient hooks run batched (`ClientHook.after_backward_batched`).

The results equal the sequential loop's up to floating-point summation order inside the batched kernels
(tests/engine/test_client_batch.py states the tolerance). A method whose hooks cannot be vectorised is trained
one client at a time (`vectorisable`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from torch import Tensor, nn
from torch.func import functional_call, vmap

from raytune_fl.engine.client_step import LocalData, LocalRound, flat_gradient, step_losses, train_round
from raytune_fl.engine.precision import StackedLossScaler, mixed_forward, stacked_loss_scaler
from raytune_fl.engine.sgd import sgd_step
from raytune_fl.engine.steps import LocalResult, LocalSettings, PhasePlan, StepGroup
from raytune_fl.methods.base import Batch, ClientContext, ClientHook, Method


def client_bytes(model: nn.Module, sample: Tensor, batch_size: int) -> int:
    """Memory one more client adds to a batch, estimated: its parameters four times (the stacked copy, gradient,
    momentum, the update's temporaries), its buffers, and twice its activations at `batch_size` (every module's
    output in one forward pass, kept for the backward, and a gradient of each). `sample`: one input, (C, H, W)."""
    outputs: list[int] = []

    def count(_module: nn.Module, _inputs: Any, output: Any) -> None:
        tensors = output if isinstance(output, tuple) else (output,)
        outputs.append(sum(t.numel() * t.element_size() for t in tensors if isinstance(t, Tensor)))

    leaves = [m for m in model.modules() if not list(m.children())]
    handles = [m.register_forward_hook(count) for m in leaves]
    was_training = model.training
    try:
        model.eval()
        with torch.no_grad():
            model(sample.unsqueeze(0))
    finally:
        model.train(was_training)
        for handle in handles:
            handle.remove()
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    buffers = sum(b.numel() * b.element_size() for b in model.buffers())
    return 4 * params + buffers + 2 * sum(outputs) * batch_size


def auto_client_batch(model: nn.Module, sample: Tensor, batch_size: int, memory_gb: float, clients: int) -> int:
    """`resources.client_batch: auto`: the most clients (at least 1, at most `clients`) whose estimated memory
    (`client_bytes`) fits `memory_gb` GiB."""
    fits = int(memory_gb * 2**30 // max(client_bytes(model, sample, batch_size), 1))
    return max(1, min(fits, clients))


def vectorisable(method: Method) -> str:
    """Why `method` cannot train several clients in one step ("" when it can): a hook that edits gradients without
    a batched form, or one that says it cannot (`ClientHook.batchable`); asynchronous methods dispatch one by one."""
    if method.buffer_size is not None:
        return "asynchronous: clients are dispatched one arrival at a time"
    for hook in method.all_hooks:
        kind = type(hook)
        if not getattr(hook, "batchable", True):
            return f"its hook {hook.name!r} cannot run on stacked clients"
        edits = kind.after_backward is not ClientHook.after_backward
        if edits and kind.after_backward_batched is ClientHook.after_backward_batched:
            return f"its hook {hook.name!r} edits gradients and has no after_backward_batched"
    return ""


class _Step(nn.Module):
    """One client's losses at one step (engine/client_step.py's `step_losses`), for functional_call: the model's
    parameters are swapped for the client's (vmapped) slice while `forward` runs, so a term reading `batch.model`
    sees this client's weights."""

    def __init__(
        self,
        model: nn.Module,
        terms: Sequence[Any],
        num_classes: int,
        forward: Callable[[nn.Module, Tensor], Any] | None = None,
    ) -> None:
        super().__init__()
        self.model = model
        self.terms = list(terms)  # not submodules: a term holds no parameters
        self.num_classes = num_classes
        self.model_forward = forward  # precision.mixed_forward's; None: the model called plainly

    def forward(self, x: Tensor, y: Tensor, weights: Sequence[Any]) -> tuple[Tensor, ...]:
        # float32 outputs under every precision: the terms are fp32, as in the sequential loop
        logits, z = self.model(x) if self.model_forward is None else self.model_forward(self.model, x)
        return tuple(step_losses(Batch(x, y, logits, z, self.model, self.num_classes), self.terms, weights))


def _stack_state(hooks: Sequence[ClientHook], name: str) -> Any:
    """One per-client attribute of the K instances of a hook, stacked: tensors, lists or dicts of tensors, None
    (all None), or an empty list where others are full (FedDyn's lambda_k = 0: zeros, which add nothing)."""
    values = [getattr(hook, name) for hook in hooks]
    if all(v is None for v in values):
        return None
    if any(v is None for v in values):
        raise ValueError(f"hook {hooks[0].name!r}: {name} is None for some clients only")
    first = values[0]
    if isinstance(first, Tensor):
        return torch.stack(values)
    if isinstance(first, (list, tuple)):
        full = next((v for v in values if len(v)), None)
        if full is None:
            return list(first)
        values = [v if len(v) else [torch.zeros_like(t) for t in full] for v in values]
        return [torch.stack(parts) for parts in zip(*values)]
    if isinstance(first, dict):
        return {key: torch.stack([v[key] for v in values]) for key in first}
    raise TypeError(f"hook {hooks[0].name!r}: per-client attribute {name} is a {type(first).__name__}")


@contextlib.contextmanager
def _swapped(hooks: Sequence[ClientHook], states: dict[tuple[int, str], Any]) -> Iterator[None]:
    """Set the representative hooks' per-client attributes to this client's slices while the step runs."""
    saved = {(i, name): getattr(hooks[i], name) for i, name in states}
    try:
        for (i, name), value in states.items():
            setattr(hooks[i], name, value)
        yield
    finally:
        for (i, name), value in saved.items():
            setattr(hooks[i], name, value)


def train_local_batched(
    models: Sequence[nn.Module],
    methods: Sequence[Method],
    data: LocalData,
    settings: LocalSettings,
    generators: Sequence[torch.Generator],
    contexts: Sequence[ClientContext],
    max_steps: Sequence[int | None],
) -> list[LocalResult]:
    """Local SGD for K clients at once. `models[k]` holds client k's starting weights, `methods[k]` its own hook
    instances; `data` is the clients' data concatenated, `contexts[k].x/y` client k's rows of it (in order).
    Returns each client's result as train_local would."""
    if sum(ctx.x.shape[0] for ctx in contexts) != data.x.shape[0]:
        raise ValueError("train_local_batched: the clients' rows do not make up the data")
    run = LocalRound(models, methods, contexts, data, settings, generators, max_steps)
    # fp16: a loss scale per client for the whole round, as each client's own GradScaler in the sequential loop
    return train_round(run, Stacked(stacked_loss_scaler(settings.precision, len(models), data.x.device)))


class Stacked:
    """engine/client_step.py's Batching for K clients: their parameters stacked, the step vmapped."""

    names_clients = True

    def __init__(self, scaler: StackedLossScaler | None) -> None:
        self.scaler = scaler

    def clients(self, run: LocalRound, plan: PhasePlan, order: list[int]) -> _StackedClients:
        return _StackedClients(run, plan, order, self.scaler)


class _Rows:
    """A group's rows of the stacked tensors: a view when they are consecutive (stepped in place), else a gathered
    copy (`index` is then set: the step writes the copies back)."""

    def __init__(self, clients: tuple[int, ...], device: torch.device) -> None:
        self.first, self.last = clients[0], clients[-1]
        run = clients == tuple(range(self.first, self.last + 1))
        self.index = None if run else torch.tensor(clients, device=device)

    def __call__(self, value: Any) -> Any:
        if value is None:
            return value
        if isinstance(value, Tensor):
            return value[self.first : self.last + 1] if self.index is None else value.index_select(0, self.index)
        if isinstance(value, list):
            return [self(v) for v in value]
        return {key: self(v) for key, v in value.items()}


class _StackedClients:
    """A phase's clients as one model: their parameters, buffers and momentum with a leading client dimension (in
    `order`), the vmapped losses, and the gradients and update of a step's group of them."""

    def __init__(self, run: LocalRound, plan: PhasePlan, order: list[int], scaler: StackedLossScaler | None) -> None:
        device = run.data.x.device
        forward = mixed_forward(run.settings.precision, device, vmapped=True)  # refuses what the device cannot run
        self.models, self.methods = [run.models[k] for k in order], [run.methods[k] for k in order]
        self.settings, self.lr, self.scaler = run.settings, plan.lr, scaler
        self.ids = torch.tensor(order, device=device)  # stacked row -> the round's client index
        # a parameter frozen by the phase or a hook (requires_grad False on every client's module) is a constant,
        # as the sequential optimiser leaves it out
        self.params = _stack_parameters(self.models)
        named_buffers = [dict(model.named_buffers()) for model in self.models]
        self.buffers = {name: torch.stack([b[name] for b in named_buffers]) for name in named_buffers[0]}
        self.trainable = [name for name, p in self.params.items() if p.requires_grad]
        momentum = run.settings.momentum != 0
        self.momentum = {name: torch.zeros_like(self.params[name]) for name in self.trainable} if momentum else {}
        self.hooks = self.methods[0].all_hooks
        per_client = {
            (i, attr): _stack_state([m.all_hooks[i] for m in self.methods], attr)
            for i, hook in enumerate(self.hooks)
            for attr in getattr(hook, "per_client", ())
        }
        self.per_client = {key: value for key, value in per_client.items() if value is not None}
        weights = _term_weights(self.methods, len(plan.terms), self.params, device)
        self.batched_weights = {t: w for t, w in enumerate(weights) if isinstance(w, Tensor)}
        model_forward = None if run.settings.precision == "fp32" else forward
        step = _Step(self.models[0], plan.terms, run.data.num_classes, model_forward)
        self.loss = _batched_loss(step, weights, self.hooks)
        # the step's group: its rows, their buffers, gradients and (fp16) overflows, set as the step goes
        self.group_clients: tuple[int, ...] = ()
        self.pick = _Rows((0,), device)
        self.rows = self.ids
        self.group_buffers: dict[str, Tensor] = {}
        self.grads: dict[str, Tensor] = {}
        self.found: Tensor | None = None

    def losses(self, group: StepGroup, xb: Tensor, yb: Tensor) -> list[Tensor]:
        self.group_clients, self.pick = group.clients, _Rows(group.clients, xb.device)
        self.rows = self.pick(self.ids)
        xb = xb.view(len(group.clients), group.size, *xb.shape[1:])
        yb = yb.view(len(group.clients), group.size)
        self.group_buffers = {name: self.pick(b) for name, b in self.buffers.items()}
        values = self.loss(
            {name: self.pick(p) for name, p in self.params.items()},
            self.group_buffers,
            {key: self.pick(v) for key, v in self.per_client.items()},
            {t: self.pick(w) for t, w in self.batched_weights.items()},
            xb,
            yb,
        )
        return list(values)

    def private_gradients(self, group: StepGroup, xb: Tensor, yb: Tensor) -> list[Tensor] | None:
        # engine/federation.py's client_batch trains one client at a time under local DP-SGD
        raise ValueError("resources.client_batch: local DP-SGD trains one client at a time")

    def flat_gradients(self, value: Tensor) -> Tensor:
        params = [self.params[name] for name in self.trainable]
        return flat_gradient(value.sum(), params, start_dim=1)[list(self.group_clients)]

    def objective(self, loss: Tensor) -> Tensor:
        return loss if self.scaler is None else loss * self.scaler.scale.index_select(0, self.rows)

    def zero_grad(self) -> None:
        for name in self.trainable:
            self.params[name].grad = None

    def edit_gradients(self) -> None:
        self.grads = {name: g for name in self.trainable if (g := self.params[name].grad) is not None}
        self.found = None  # fp16: which of the group's clients overflowed
        if self.scaler is not None:  # unscaled before the hooks read them; rows outside the group are zeros
            with torch.no_grad():
                self.found = self.pick(self.scaler.unscale(self.grads, self.scaler.scale.index_select(0, self.ids)))
        for i, hook in enumerate(self.hooks):
            if type(hook).after_backward is not ClientHook.after_backward:
                hook.after_backward_batched([m.all_hooks[i] for m in self.methods], self.grads)

    @torch.no_grad()
    def update(self) -> Tensor:
        """The SGD step of the group's rows (skipped for a client whose fp16 gradients overflowed)."""
        pick, stepped = self.pick, list(self.grads)
        current = [pick(self.params[name]) for name in stepped]
        buffers_now = [pick(self.momentum[name]) for name in stepped] if self.momentum else []
        before = [t.clone() for t in current + buffers_now] if self.found is not None else []
        # momentum buffers start at zeros: buf = 0 * m + g = g, torch's first step
        sgd_step(current, [pick(self.grads[name]) for name in stepped], buffers_now, self.lr, self.settings)
        if self.found is not None and self.scaler is not None:  # an overflowed client's step is skipped
            for value, old in zip(current + buffers_now, before):
                value.copy_(torch.where(self.found.view(-1, *([1] * (value.dim() - 1))), old, value))
            self.scaler.update(self.rows, self.found)
        if pick.index is not None:  # scattered rows stepped on copies: write them back
            for name, value in zip(stepped, current):
                self.params[name].index_copy_(0, pick.index, value)
            for name, value in zip(stepped, buffers_now):
                self.momentum[name].index_copy_(0, pick.index, value)
            for name, value in self.group_buffers.items():
                self.buffers[name].index_copy_(0, pick.index, value)
        return self.rows

    def finish(self) -> None:
        """The trained clients back into their own modules (their hooks read them)."""
        with torch.no_grad():
            for k, model in enumerate(self.models):
                for name, p in model.named_parameters():
                    p.copy_(self.params[name][k])
                for name, b in model.named_buffers():
                    b.copy_(self.buffers[name][k])


def _stack_parameters(models: Sequence[nn.Module]) -> dict[str, Tensor]:
    """The clients' parameters stacked, trainable where every client's is."""
    named = [dict(model.named_parameters()) for model in models]
    params: dict[str, Tensor] = {}
    for name, p in named[0].items():
        if any(n[name].requires_grad != p.requires_grad for n in named):
            raise ValueError(f"client batching: {name} is trainable for some clients of the batch only")
        params[name] = torch.stack([n[name].detach() for n in named]).requires_grad_(p.requires_grad)
    return params


def _term_weights(methods: Sequence[Method], count: int, params: dict[str, Tensor], device: torch.device) -> list[Any]:
    """Each of the first `count` terms' weight: equal weights stay a Python float, as the sequential loop multiplies
    by; per-client ones (FedDyn's alpha_k) a tensor the step vmaps over."""
    weights: list[Any] = []
    for t in range(count):
        values = [m.terms[t].weight for m in methods]
        dtype = next(iter(params.values())).dtype
        weights.append(values[0] if len(set(values)) == 1 else torch.tensor(values, dtype=dtype, device=device))
    return weights


def _batched_loss(step_module: _Step, term_weights: list[Any], hooks: Sequence[ClientHook]) -> Callable[..., Any]:
    """The step module's loss, vmapped over the clients of a group: their parameters, buffers, per-client hook
    state and per-client term weights, inputs and labels."""

    def client_loss(p, b, state, w, xb, yb):  # one client's slice of everything
        weights = [w.get(t, term_weights[t]) for t in range(len(term_weights))]
        with _swapped(hooks, state):
            merged = {**{f"model.{k}": v for k, v in p.items()}, **{f"model.{k}": v for k, v in b.items()}}
            return functional_call(step_module, merged, (xb, yb, weights))

    return vmap(client_loss, randomness="error")
