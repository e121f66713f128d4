"""FedBN's code: each client's own BatchNorm entries (raytune_fl.methods.fedbn explains the method), kept by the
per-client entries hook of raytune_fl.methods.impl.personal."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm

from raytune_fl.methods.impl.personal import LocalEntries, with_own_entries
from raytune_fl.types import Weights


def batchnorm_keys(model: nn.Module) -> list[str]:
    """The state_dict keys that belong to BatchNorm modules, in state_dict order."""
    keys: list[str] = []
    for prefix, module in model.named_modules():
        if isinstance(module, _BatchNorm):
            # the module's own state_dict holds exactly its entries (affine / tracking flags respected)
            keys += [f"{prefix}.{name}" if prefix else name for name in module.state_dict()]
    return keys


class LocalBatchNorm(LocalEntries):
    name = "local_bn"
    owner = "fedbn"
    part = "BatchNorm"

    def keys(self, model: nn.Module) -> list[str]:
        return batchnorm_keys(model)


def with_own_batchnorm(global_weights: Weights, state: Mapping[str, Any]) -> Weights:
    """A client's model: the global weights with its own BatchNorm entries (none yet: the global ones)."""
    return with_own_entries(LocalBatchNorm.name, global_weights, state)
