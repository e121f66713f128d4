"""MOON's model-contrastive term (raytune_fl.methods.moon explains the method)."""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from raytune_fl.methods.base import Batch, ClientContext, LocalTerm
from raytune_fl.weights import load_weights, read_weights


def model_contrastive(z: Tensor, z_glob: Tensor, z_prev: Tensor, tau: float) -> Tensor:
    """MOON's l_con averaged over the batch; rows of the three (n x d) tensors are paired."""
    sim_glob = F.cosine_similarity(z, z_glob, dim=1) / tau
    sim_prev = F.cosine_similarity(z, z_prev, dim=1) / tau
    # -log(e^a / (e^a + e^b)) = log(1 + e^(b - a)) = softplus(b - a), stable for small tau
    return F.softplus(sim_prev - sim_glob).mean()


def _frozen_copy(model: nn.Module) -> nn.Module:
    twin = copy.deepcopy(model)
    for p in twin.parameters():
        p.requires_grad_(False)
        p.grad = None
    return twin.eval()


class ModelContrastiveTerm(LocalTerm):
    batchable = False  # each step runs the global and the previous model too: whole modules, not stacked tensors
    name = "contrastive"

    def __init__(self, weight: float, tau: float) -> None:
        super().__init__(weight)
        self.tau = float(tau)
        # Frozen twins of the training model, deep-copied once and reloaded every round (not per batch).
        self._source: nn.Module | None = None
        self._global: nn.Module | None = None
        self._previous: nn.Module | None = None
        self._has_previous = False

    def on_round_start(self, ctx: ClientContext) -> None:
        if self._source is not ctx.model:  # first use, or a different model object: rebuild the twins
            self._source = ctx.model
            self._global = _frozen_copy(ctx.model)
            self._previous = _frozen_copy(ctx.model)
        assert self._global is not None and self._previous is not None
        self._global.load_state_dict(ctx.model.state_dict())  # the global weights the round starts from
        previous = ctx.state.get(self.name)
        self._has_previous = previous is not None
        if previous is not None:
            load_weights(self._previous, previous)

    def loss(self, batch: Batch) -> Tensor:
        if not self._has_previous:
            # a constant zero: adds nothing to the loss nor to any gradient, and backward still works
            return batch.z.new_zeros(())
        assert self._global is not None and self._previous is not None
        with torch.no_grad():
            _, z_glob = self._global(batch.x)
            _, z_prev = self._previous(batch.x)
        return model_contrastive(batch.z, z_glob, z_prev, self.tau)

    def on_round_end(self, ctx: ClientContext) -> None:
        # this client's model after local training: next time it trains, this is its z_prev model
        ctx.new_state[self.name] = read_weights(ctx.model)
