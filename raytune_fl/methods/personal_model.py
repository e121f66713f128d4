"""A second model per client, trained in the same local steps as the global one: Ditto's v, APFL's v, pFedMe's theta.

Torch code that the three methods share (imported by their impl/ modules). The loop (engine/local.py) trains the
global model w, `ctx.model`; the personal model is a second set of tensors a `PersonalModel` term holds for the
round: loaded from the client's state at `on_round_start` (none yet: a copy of the global weights it was sent), run
on each batch by `torch.func.functional_call(batch.model, personal tensors, x)` in `loss`, stepped by its own SGD in
`after_backward`, and stored as numpy arrays in `ctx.new_state` at `on_round_end`. Its buffers (BatchNorm's running
statistics) are its own too: the personal forward in train mode updates them, never w's.

Why the personal gradient is taken inside `loss` (`torch.autograd.grad` of the personal objective alone) and the
value handed back detached: the loop's backward, its fp16 loss scale and its gradient probe then never see the
personal tensors, and w's gradient is exactly the loop's cross-entropy (Ditto's and APFL's `as_fedavg = {}`). The
step itself waits for `after_backward`, where a method may edit w's gradient too (pFedMe).

Memory: each client's personal model is client state the server keeps between rounds (numpy, one model-sized copy a
client): fine for the models here, a cost to know of for large models and many clients.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.func import functional_call

from raytune_fl.methods.base import Batch, ClientContext, LocalTerm
from raytune_fl.types import Weights
from raytune_fl.weights import numpy_copy

WEIGHTS = "weights"  # the personal model's entries in the client's state, under the term's name


class PersonalModel(LocalTerm):
    """A term holding a client's personal model for the round; subclasses say what it minimises (`objective`).

    `lr` None: the run's client learning rate of the round (`ctx.lr`)."""

    name = "personal"
    batchable = False  # a second model per client and its own step: engine/batched.py stacks only w's parameters
    per_sample = False  # its gradients are neither clipped nor noised, and the server keeps the model it trains
    # the round's gradient and the batch it came from: the next step recomputes both
    transient = ("grads", "last_x", "last_y")

    def __init__(self, lr: float | None) -> None:
        super().__init__(1.0)  # the objective's own value: reported as term_<name>, no gradient reaches w
        self.personal_lr = lr

    def on_round_start(self, ctx: ClientContext) -> None:
        self.lr = ctx.lr if self.personal_lr is None else self.personal_lr
        own: Mapping[str, Any] = ctx.state.get(self.name) or {}
        self.params, self.buffers = personal_tensors(ctx.model, own.get(WEIGHTS) if self.starts_from_state else None)
        self.grads: list[Tensor] = []
        self.last_x: Tensor | None = None
        self.last_y: Tensor | None = None

    starts_from_state = True  # False (pFedMe): the personal model starts each round at the global weights

    def objective(self, model: nn.Module, x: Tensor, y: Tensor) -> Tensor:
        """The personal model's loss on a batch (a graph to `self.params` only)."""
        raise NotImplementedError

    def trained(self) -> list[Tensor]:
        """The leaves the personal step moves (APFL adds its alpha)."""
        return list(self.params.values())

    def loss(self, batch: Batch) -> Tensor:
        value = self.objective(batch.model, batch.x, batch.y)
        self.grads = list(torch.autograd.grad(value, self.trained()))
        self.last_x, self.last_y = batch.x, batch.y
        return value.detach()

    def after_backward(self, ctx: ClientContext) -> None:
        self.step()

    def step(self) -> None:
        """Plain SGD on the personal leaves with the gradient `loss` took; the gradient is then spent."""
        with torch.no_grad():
            for leaf, grad in zip(self.trained(), self.grads):
                leaf.sub_(self.lr * grad)
        self.grads = []

    def on_round_end(self, ctx: ClientContext) -> None:
        ctx.new_state[self.name] = {WEIGHTS: numpy_copy({**self.params, **self.buffers})}

    def forward(self, model: nn.Module, x: Tensor, params: Mapping[str, Tensor]) -> Tensor:
        """The logits of `model` run with `params` and this client's own buffers."""
        logits, _ = functional_call(model, {**params, **self.buffers}, (x,))
        return logits


def personal_tensors(model: nn.Module, own: Mapping[str, np.ndarray] | None) -> tuple[dict[str, Tensor], dict]:
    """The personal parameters (leaves that require grad) and buffers, on the model's device: `own` where the client
    has them, else copies of the model's current (global) entries."""
    entries = model.state_dict()
    if own is not None and set(own) != set(entries):
        raise ValueError(f"stored personal model entries {sorted(own)} do not match the model's {sorted(entries)}")
    params, buffers = {}, {}
    for key, value in entries.items():
        source = value if own is None else torch.as_tensor(np.array(own[key]), device=value.device)
        buffers[key] = source.detach().clone()
    for name, _ in model.named_parameters():
        params[name] = buffers.pop(name).requires_grad_(True)
    return params, buffers


def squared_distance(params: Mapping[str, Tensor], anchors: Mapping[str, Tensor]) -> Tensor:
    """||params - anchors||^2 over every tensor (a graph to `params`; `anchors` detached by the caller)."""
    return torch.stack([((p - anchors[name]) ** 2).sum() for name, p in params.items()]).sum()


def cross_entropy(logits: Tensor, y: Tensor) -> Tensor:
    return F.cross_entropy(logits, y)


def own_weights(global_weights: Weights, state: Mapping[str, Any], name: str) -> Weights:
    """A client's personal model: its own entries over the global ones (none yet: the global weights)."""
    own = state.get(name) or {}
    return {**global_weights, **own.get(WEIGHTS, {})}
