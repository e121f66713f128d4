"""Many clients in one step: the local loop of engine/local.py, vectorised over the clients of one worker.

K clients train as one model whose parameters, buffers (BatchNorm running statistics) and SGD momentum carry a
leading client dimension: `torch.func.vmap` over `functional_call` turns each layer into one batched kernel (a
convolution becomes a grouped one), so a step costs about what one client's step costs in launches, whatever K.

What stays per client, exactly as the sequential loop does it:
- the batches: each client's CPU generator draws its batch order and augmentation numbers pass by pass, in the
  order the sequential loop draws them (nothing else reads the generator), so every client sees the same samples;
- steps: a client that has run out of batches (smaller data, a step budget) sits out: its parameters, buffers and
  momentum stop changing. A step's clients are grouped by batch size, so a short last batch is its own group
  (BatchNorm's batch statistics and the loss's mean see exactly that client's samples, no padding);
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
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.func import functional_call, vmap

from raytune_fl.engine.augment import AugmentDraws
from raytune_fl.engine.local import (
    LocalResult,
    LocalSettings,
    NonFiniteLossError,
    _finite,
    _freeze_outside,
    pass_batches,
    set_phase_modes,
)
from raytune_fl.engine.metric_names import LOCAL_CE, LOCAL_LOSS, TERM_PREFIX
from raytune_fl.engine.precision import StackedLossScaler, mixed_forward, stacked_loss_scaler
from raytune_fl.engine.sgd import sgd_step
from raytune_fl.methods.base import Batch, ClientContext, ClientHook, Method, Phase


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


@dataclass(frozen=True)
class _Group:
    """Clients that take a step together: same step number, same batch size."""

    clients: tuple[int, ...]
    size: int
    rows: Tensor  # (len(clients), size) rows of the round's concatenated client data
    offsets: Tensor | None  # (2, len(clients) * size) crop offsets, client after client; None without crop
    flips: Tensor | None  # (len(clients) * size,) flips; None without flip


def _client_schedule(
    n: int, settings: LocalSettings, generator: torch.Generator, epochs: int, budget: int | None
) -> list[tuple[Tensor, Tensor | None, Tensor | None]]:
    """One client's (batch indices, crop offsets, flips) per step, drawn as engine/local.py's loop draws them."""
    steps: list[tuple[Tensor, Tensor | None, Tensor | None]] = []
    spec = settings.augment
    for _ in range(epochs if budget is None else budget):
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
            steps.append((order[start : start + size], offsets, flips))
    return steps


def _plan(
    schedules: Sequence[list[tuple[Tensor, Tensor | None, Tensor | None]]], starts: Sequence[int], device: torch.device
) -> list[list[_Group]]:
    """Per step, its groups (largest batch first); every index and augmentation number moved in one copy each."""
    pieces: list[Tensor] = []  # rows, then offsets, then flips: sliced back per group after one transfer
    layout: list[list[tuple[tuple[int, ...], int, int, int, int]]] = []
    at = 0
    for step in range(max((len(s) for s in schedules), default=0)):
        by_size: dict[int, list[int]] = {}
        for client, schedule in enumerate(schedules):
            if step < len(schedule):
                by_size.setdefault(schedule[step][0].numel(), []).append(client)
        groups = []
        for size in sorted(by_size, reverse=True):
            clients = tuple(by_size[size])
            entries = [schedules[c][step] for c in clients]
            rows_at = at
            pieces += [index + starts[c] for c, (index, _, _) in zip(clients, entries)]
            at += len(clients) * size
            offsets_at = flips_at = -1
            if entries[0][1] is not None:
                offsets_at = at
                pieces += [offsets.reshape(-1) for _, offsets, _ in entries]  # (2, size) each: rows, then columns
                at += 2 * len(clients) * size
            if entries[0][2] is not None:
                flips_at = at
                pieces += [flips.long() for _, _, flips in entries]
                at += len(clients) * size
            groups.append((clients, size, rows_at, offsets_at, flips_at))
        layout.append(groups)
    flat = torch.cat(pieces).to(device) if pieces else torch.empty(0, dtype=torch.long, device=device)
    plan = []
    for groups in layout:
        step_groups = []
        for clients, size, rows_at, offsets_at, flips_at in groups:
            g = len(clients)
            rows = flat[rows_at : rows_at + g * size].view(g, size)
            offsets = None
            if offsets_at >= 0:  # client after client, each (2, size): regroup to (2, g * size)
                offsets = flat[offsets_at : offsets_at + 2 * g * size].view(g, 2, size).transpose(0, 1).reshape(2, -1)
            flips = flat[flips_at : flips_at + g * size].bool() if flips_at >= 0 else None
            step_groups.append(_Group(clients, size, rows, offsets, flips))
        plan.append(step_groups)
    return plan


class _Step(nn.Module):
    """One client's loss at one step, for functional_call: the model's parameters are swapped for the client's
    (vmapped) slice while `forward` runs, so a term reading `batch.model` sees this client's weights."""

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

    def forward(self, x: Tensor, y: Tensor, weights: Sequence[Any]) -> tuple[Tensor, Tensor]:
        # float32 outputs under every precision: the terms below are fp32, as in the sequential loop
        logits, z = self.model(x) if self.model_forward is None else self.model_forward(self.model, x)
        ce = F.cross_entropy(logits, y)
        values = [ce]
        loss = ce
        if self.terms:
            batch = Batch(x, y, logits, z, self.model, self.num_classes)
            for term, weight in zip(self.terms, weights):
                value = term.loss(batch)
                values.append(value)
                loss = loss + weight * value
        return loss, torch.stack([loss, *values])


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
    x: Tensor,
    y: Tensor,
    starts: Sequence[int],
    settings: LocalSettings,
    generators: Sequence[torch.Generator],
    num_classes: int,
    contexts: Sequence[ClientContext],
    max_steps: Sequence[int | None],
) -> list[LocalResult]:
    """Local SGD for K clients at once. `models[k]` holds client k's starting weights, `methods[k]` its own hook
    instances; (x, y) is the clients' data concatenated (client k's rows from `starts[k]`), `contexts[k].x/y` each
    client's own view. Returns each client's result as train_local would."""
    k_count = len(models)
    for model in models:
        model.train()
    for method, ctx in zip(methods, contexts):
        for hook in method.all_hooks:
            hook.on_round_start(ctx)
    template = methods[0]
    names = [LOCAL_LOSS, LOCAL_CE] + [TERM_PREFIX + term.name for term in template.terms]
    sums = torch.zeros(k_count, len(names), dtype=torch.float64, device=x.device)
    counts = [[0] * len(names) for _ in range(k_count)]
    # fp16: a loss scale per client for the whole round, as each client's own GradScaler in the sequential loop
    scaler = stacked_loss_scaler(settings.precision, k_count, x.device)
    for phase in template.phases:
        _train_phase(models, methods, phase, x, y, starts, settings, generators, num_classes, contexts,
                     max_steps, sums, counts, scaler)  # fmt: skip
    results = []
    for row, count, method, ctx in zip(sums.tolist(), counts, methods, contexts):
        means = [total / max(c, 1) for total, c in zip(row, count)]
        if ctx.steps and not all(map(_finite, means)):
            raise NonFiniteLossError(f"non-finite local loss (client {ctx.client_id}): {dict(zip(names, means))}")
        for hook in method.all_hooks:
            hook.on_round_end(ctx)
        results.append(LocalResult(ctx.steps, dict(zip(names, means)), dict(ctx.new_state), dict(ctx.extras)))
    return results


def _train_phase(
    models: Sequence[nn.Module],
    methods: Sequence[Method],
    phase: Phase,
    x: Tensor,
    y: Tensor,
    starts: Sequence[int],
    settings: LocalSettings,
    generators: Sequence[torch.Generator],
    num_classes: int,
    contexts: Sequence[ClientContext],
    max_steps: Sequence[int | None],
    sums: Tensor,
    counts: list[list[int]],
    scaler: StackedLossScaler | None = None,
) -> None:
    forward = mixed_forward(settings.precision, x.device, vmapped=True)  # refuses what the device cannot run
    budget_epochs = settings.epochs if phase.epochs is None else phase.epochs
    schedules = [
        _client_schedule(
            ctx.x.shape[0], settings, generator, budget_epochs, max_steps[k] if phase.epochs is None else None
        )
        for k, (ctx, generator) in enumerate(zip(contexts, generators))
    ]
    # stacked with the most steps first: the clients still training at a step are then a leading run of rows (a
    # view of the stacked tensors, updated in place) rather than scattered ones (gathered and written back)
    order = sorted(range(len(models)), key=lambda k: -len(schedules[k]))
    models, methods = [models[k] for k in order], [methods[k] for k in order]
    template = models[0]
    frozen = [_freeze_outside(model, phase.trains) for model in models]
    set_phase_modes(template, phase, settings)
    # the clients' parameters and buffers with a leading client dimension; a parameter frozen by the phase or a
    # hook (requires_grad False on every client's module) is a constant, as the sequential optimiser leaves it out
    named = [dict(model.named_parameters()) for model in models]
    params: dict[str, Tensor] = {}
    for name, p in named[0].items():
        if any(n[name].requires_grad != p.requires_grad for n in named):
            raise ValueError(f"client batching: {name} is trainable for some clients of the batch only")
        params[name] = torch.stack([n[name].detach() for n in named]).requires_grad_(p.requires_grad)
    named_buffers = [dict(model.named_buffers()) for model in models]
    buffers = {name: torch.stack([b[name] for b in named_buffers]) for name in named_buffers[0]}
    trainable = [name for name, p in params.items() if p.requires_grad]
    momentum = {name: torch.zeros_like(params[name]) for name in trainable} if settings.momentum != 0 else {}
    lr = settings.lr if phase.lr is None else phase.lr

    terms = methods[0].terms if phase.terms else ()
    width = 2 + len(terms)
    hooks = methods[0].all_hooks
    per_client = {
        (i, attr): _stack_state([m.all_hooks[i] for m in methods], attr)
        for i, hook in enumerate(hooks)
        for attr in getattr(hook, "per_client", ())
    }
    per_client = {key: value for key, value in per_client.items() if value is not None}
    term_weights: list[Any] = []
    for t in range(len(terms)):
        weights = [m.terms[t].weight for m in methods]
        # equal weights stay a Python float, as the sequential loop multiplies by; per-client ones (FedDyn's
        # alpha_k) a vmapped tensor
        dtype = next(iter(params.values())).dtype
        same = len(set(weights)) == 1
        term_weights.append(weights[0] if same else torch.tensor(weights, dtype=dtype, device=x.device))
    batched_weights = {t: w for t, w in enumerate(term_weights) if isinstance(w, Tensor)}
    step_module = _Step(template, terms, num_classes, None if settings.precision == "fp32" else forward)

    def client_loss(p, b, state, w, xb, yb):  # one client's slice of everything
        weights = [w.get(t, term_weights[t]) for t in range(len(terms))]
        with _swapped(hooks, state):
            merged = {**{f"model.{k}": v for k, v in p.items()}, **{f"model.{k}": v for k, v in b.items()}}
            return functional_call(step_module, merged, (xb, yb, weights))

    batched_loss = vmap(client_loss, randomness="error")
    ids = torch.tensor(order, device=x.device)  # stacked row -> the caller's client index (sums, counts)
    for groups in _plan([schedules[k] for k in order], [starts[k] for k in order], x.device):
        for group in groups:
            first, last = group.clients[0], group.clients[-1]
            run = group.clients == tuple(range(first, last + 1))
            index = None if run else torch.tensor(group.clients, device=x.device)

            def pick(value: Any, first: int = first, last: int = last, index: Tensor | None = index) -> Any:
                """The group's rows: a view when they are consecutive, else a gathered copy (written back)."""
                if value is None:
                    return value
                if isinstance(value, Tensor):
                    return value[first : last + 1] if index is None else value.index_select(0, index)
                if isinstance(value, list):
                    return [pick(v) for v in value]
                return {key: pick(v) for key, v in value.items()}

            xb = x[group.rows.reshape(-1)]
            if settings.augment.active:
                none = torch.empty(2, 0, dtype=torch.long, device=x.device)  # a switched-off part: never read
                draws = AugmentDraws(
                    group.offsets if group.offsets is not None else none,
                    group.flips if group.flips is not None else none[0].bool(),
                    (0,),
                )
                xb = draws.apply(xb, settings.augment, 0)
            xb = xb.view(len(group.clients), group.size, *xb.shape[1:])
            yb = y[group.rows]
            group_buffers = {name: pick(b) for name, b in buffers.items()}
            losses, values = batched_loss(
                {name: pick(p) for name, p in params.items()},
                group_buffers,
                {key: pick(v) for key, v in per_client.items()},
                {t: pick(w) for t, w in batched_weights.items()},
                xb,
                yb,
            )
            found = rows = None  # fp16: which of the group's clients overflowed, and their caller indices
            if scaler is None:
                losses.sum().backward()  # each client's loss depends on its own slice only: per-client gradients
            else:
                rows = pick(ids)
                (losses * scaler.scale.index_select(0, rows)).sum().backward()
            grads = {name: params[name].grad for name in trainable if params[name].grad is not None}
            if scaler is not None:  # unscaled before the hooks read them; rows outside the group are zeros
                with torch.no_grad():
                    found = pick(scaler.unscale(grads, scaler.scale.index_select(0, ids)))
            for i, hook in enumerate(hooks):
                if type(hook).after_backward is not ClientHook.after_backward:
                    hook.after_backward_batched([m.all_hooks[i] for m in methods], grads)
            with torch.no_grad():
                stepped = list(grads)
                current = [pick(params[name]) for name in stepped]
                buffers_now = [pick(momentum[name]) for name in stepped] if momentum else []
                before = [t.clone() for t in current + buffers_now] if found is not None else []
                # momentum buffers start at zeros: buf = 0 * m + g = g, torch's first step
                sgd_step(current, [pick(grads[name]) for name in stepped], buffers_now, lr, settings)
                if found is not None and rows is not None:  # an overflowed client's step is skipped, as GradScaler's
                    for value, old in zip(current + buffers_now, before):
                        value.copy_(torch.where(found.view(-1, *([1] * (value.dim() - 1))), old, value))
                    scaler.update(rows, found)
                if index is not None:  # scattered rows stepped on copies: write them back
                    for name, value in zip(stepped, current):
                        params[name].index_copy_(0, index, value)
                    for name, value in zip(stepped, buffers_now):
                        momentum[name].index_copy_(0, index, value)
                    for name, value in group_buffers.items():
                        buffers[name].index_copy_(0, index, value)
                for name in stepped:
                    params[name].grad = None
                sums[:, :width].index_add_(0, pick(ids), values.detach().double())
            for row in group.clients:
                client = order[row]
                counts[client][:width] = [c + 1 for c in counts[client][:width]]
                contexts[client].steps += 1
    with torch.no_grad():  # the trained clients back into their own modules (their hooks read them at round end)
        for k, model in enumerate(models):
            for name, p in model.named_parameters():
                p.copy_(params[name][k])
            for name, b in model.named_buffers():
                b.copy_(buffers[name][k])
    for model_frozen in frozen:
        for p in model_frozen:
            p.requires_grad_(True)
    template.train()
