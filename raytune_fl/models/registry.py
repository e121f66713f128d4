from __future__ import annotations

from collections.abc import Callable

from torch import nn

from raytune_fl.registry import Registry

# factory(in_channels, num_classes, image_size) -> module whose forward returns (logits, z)
MODELS: Registry[Callable[..., nn.Module]] = Registry("model")


def build_model(name: str, in_channels: int, num_classes: int, image_size: tuple[int, int]) -> nn.Module:
    return MODELS.get(name)(in_channels=in_channels, num_classes=num_classes, image_size=image_size)
