"""The models by name. Light to import (no torch): the names are declared here, each model's module (torch) is
imported when it is first built."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from raytune_fl.registry import Registry

if TYPE_CHECKING:
    from torch import nn

# factory(in_channels, num_classes, image_size) -> module whose forward returns (logits, z)
MODELS: Registry[Callable[..., nn.Module]] = Registry(
    "model",
    homes={
        "simple_cnn": "raytune_fl.models.simple_cnn",
        "resnet18": "raytune_fl.models.resnet",
        "resnet50": "raytune_fl.models.resnet",
    },
)


def build_model(name: str, in_channels: int, num_classes: int, image_size: tuple[int, int]) -> nn.Module:
    return MODELS.get(name)(in_channels=in_channels, num_classes=num_classes, image_size=image_size)
