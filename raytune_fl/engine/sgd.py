"""The local loop's optimiser: torch.optim.SGD's update without torch.optim.Optimizer around it.

The update is torch's own functional `torch.optim.sgd.sgd` called with the arguments `SGD.step` passes it, so a
step is bit for bit torch.optim.SGD's (tests/engine/test_federation.py's frozen-engine pin and
tests/engine/test_sgd.py). What is left out is the Optimizer wrapper: its `step`, `zero_grad` and `add_param_group`
import torch._dynamo (and triton with it) on first use, about 85 MiB of private memory in every process that
trains, client actors included, none of which ever compiles anything (benchmarks/workload.py's peak PSS). No hooks,
closures, sparse or differentiable steps: the loop uses none.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

import torch
from torch import Tensor
from torch.optim.sgd import sgd


class PlainSGD:
    """SGD with momentum (dampening 0, no Nesterov) and L2 weight decay, as torch.optim.SGD(params, lr, ...)."""

    def __init__(self, params: Iterable[Tensor], lr: float, momentum: float = 0.0, weight_decay: float = 0.0) -> None:
        self.params = list(params)
        self.lr, self.momentum, self.weight_decay = lr, momentum, weight_decay
        self.momentum_buffers: dict[int, Tensor | None] = {}  # by parameter index; None until its first step

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None  # torch's set_to_none=True

    @torch.no_grad()
    def step(self) -> None:
        stepped = [i for i, p in enumerate(self.params) if p.grad is not None]
        params = [self.params[i] for i in stepped]
        grads = [grad for p in params if (grad := p.grad) is not None]  # every one: `stepped` has gradients
        buffers = [self.momentum_buffers.get(i) for i in stepped] if self.momentum != 0 else []
        sgd_step(params, grads, buffers, self.lr, self)
        if self.momentum != 0:  # sgd() put each new buffer into the list
            self.momentum_buffers.update(zip(stepped, buffers))


class _Hyper(Protocol):
    @property
    def momentum(self) -> float: ...

    @property
    def weight_decay(self) -> float: ...


def sgd_step(params: list[Tensor], grads: list[Tensor], buffers: list, lr: float, hyper: _Hyper) -> None:
    """torch.optim.SGD's update as SGD.step calls it (dampening 0, no Nesterov), in place on `params` and the
    momentum `buffers` (a None entry is created, as torch's first step does; empty list without momentum)."""
    sgd(
        params,
        grads,
        buffers,
        weight_decay=hyper.weight_decay,
        momentum=hyper.momentum,
        lr=lr,
        dampening=0.0,
        nesterov=False,
        maximize=False,
        has_sparse_grad=False,
        foreach=None,
        fused=None,
        grad_scale=None,
        found_inf=None,
    )
