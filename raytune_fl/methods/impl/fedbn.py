"""FedBN's code: each client's own BatchNorm entries (raytune_fl.methods.fedbn explains the method)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm

from raytune_fl.methods.base import ClientContext, ClientHook
from raytune_fl.types import Weights
from raytune_fl.weights import numpy_copy


def batchnorm_keys(model: nn.Module) -> list[str]:
    """The state_dict keys that belong to BatchNorm modules, in state_dict order."""
    keys: list[str] = []
    for prefix, module in model.named_modules():
        if isinstance(module, _BatchNorm):
            # the module's own state_dict holds exactly its entries (affine / tracking flags respected)
            keys += [f"{prefix}.{name}" if prefix else name for name in module.state_dict()]
    return keys


class LocalBatchNorm(ClientHook):
    name = "local_bn"

    def on_round_start(self, ctx: ClientContext) -> None:
        own: Mapping[str, np.ndarray] | None = ctx.state.get(self.name)
        if own is None:  # first round of this client: it starts from the global BN entries
            return
        keys = batchnorm_keys(ctx.model)
        if set(own) != set(keys):
            raise ValueError(f"fedbn: stored BatchNorm entries {sorted(own)} do not match the model's {keys}")
        entries = ctx.model.state_dict()  # shares storage with the model: copy_ writes into it
        with torch.no_grad():
            for key in keys:
                entries[key].copy_(torch.from_numpy(np.array(own[key])))

    def on_round_end(self, ctx: ClientContext) -> None:
        entries = ctx.model.state_dict()
        ctx.new_state[self.name] = numpy_copy({key: entries[key] for key in batchnorm_keys(ctx.model)})


def with_own_batchnorm(global_weights: Weights, state: Mapping[str, Any]) -> Weights:
    """A client's model: the global weights with its own BatchNorm entries (none yet: the global ones)."""
    return {**global_weights, **state.get(LocalBatchNorm.name, {})}
