"""Parts of the model each client keeps for itself: one hook that keeps any set of state_dict entries per client
(FedBN's BatchNorm, FedPer's and FedRep's head), and the model a client uses, the global weights with its own
entries over them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from torch import nn

from raytune_fl.methods.base import ClientContext, ClientHook
from raytune_fl.methods.impl.freeze import CLASSIFIER_PREFIX
from raytune_fl.types import Weights
from raytune_fl.weights import numpy_copy


class LocalEntries(ClientHook):
    """Keeps the entries `keys(model)` per client: at round start a returning client loads its own over the global
    ones it was just sent (before the optimiser is built, so it trains from them); at round end it stores them
    again. In its first round it has none and trains from the global entries. Only the client's own module is
    touched, so it runs on stacked clients too (engine/batched.py calls it per client)."""

    name = "local_entries"
    owner = "personal"  # the method, as the error names it
    part = "per-client"  # what the entries are, as the error names them

    def keys(self, model: nn.Module) -> list[str]:
        raise NotImplementedError

    def on_round_start(self, ctx: ClientContext) -> None:
        own: Mapping[str, np.ndarray] | None = ctx.state.get(self.name)
        if own is None:  # first round of this client: it starts from the global entries
            return
        keys = self.keys(ctx.model)
        if set(own) != set(keys):
            raise ValueError(f"{self.owner}: stored {self.part} entries {sorted(own)} do not match the model's {keys}")
        entries = ctx.model.state_dict()  # shares storage with the model: copy_ writes into it
        with torch.no_grad():
            for key in keys:
                entries[key].copy_(torch.from_numpy(np.array(own[key])))

    def on_round_end(self, ctx: ClientContext) -> None:
        entries = ctx.model.state_dict()
        ctx.new_state[self.name] = numpy_copy({key: entries[key] for key in self.keys(ctx.model)})


def classifier_keys(model: nn.Module) -> list[str]:
    """The state_dict keys of `model.classifier` (the head), in state_dict order."""
    classifier = getattr(model, "classifier", None)
    if not isinstance(classifier, nn.Module):
        raise ValueError(f"a personal head needs `model.classifier`; {type(model).__name__} has none")
    return [CLASSIFIER_PREFIX + key for key in classifier.state_dict()]


class LocalHead(LocalEntries):
    """The head (`model.classifier`) kept per client: FedPer's personalisation layers, FedRep's local head."""

    name = "local_head"
    part = "classifier"

    def __init__(self, owner: str, per_sample: bool = True) -> None:
        self.owner = owner
        # FedRep: its head phase takes DP-SGD steps the local privacy accountant does not count
        self.per_sample = per_sample

    def keys(self, model: nn.Module) -> list[str]:
        return classifier_keys(model)


def with_own_entries(name: str, global_weights: Weights, state: Mapping[str, Any]) -> Weights:
    """A client's model: the global weights with the entries its hook `name` kept (none yet: the global ones)."""
    return {**global_weights, **state.get(name, {})}


def with_own_head(global_weights: Weights, state: Mapping[str, Any]) -> Weights:
    """A client's model: the global body with its own head (none yet, a client never sampled: the global head)."""
    return with_own_entries(LocalHead.name, global_weights, state)
