"""ResNet-18/50 for small images, with the same projector and classifier head as SimpleCNN.

The torchvision backbone (``weights=None``: trained from scratch, nothing is downloaded) gets the usual
CIFAR stem: a 3x3 stride-1 convolution instead of the 7x7 stride-2 one and no max-pool, so a 32x32 image
reaches layer4 at 4x4. The torchvision ``fc`` is dropped; the encoder ends at its global average pool and
flatten (512 features for ResNet-18, 2048 for ResNet-50). Any channel count and any image size >= 8 work
(the adaptive pool absorbs the rest; smaller images also run, on a 1x1 map from layer3 on).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from torch import Tensor, nn

from raytune_fl.models.pooling import GlobalAvgPool2d
from raytune_fl.models.registry import MODELS
from raytune_fl.models.simple_cnn import projection_head

if TYPE_CHECKING:  # torchvision is imported when a ResNet is built: it costs every process ~1 s at start-up
    import torchvision


def small_image_backbone(arch: Callable[..., torchvision.models.ResNet], in_channels: int) -> tuple[nn.Module, int]:
    """A torchvision ResNet with a 3x3 stride-1 stem, no max-pool and no fc, and its feature count."""
    backbone = arch(weights=None)
    backbone.conv1 = nn.Conv2d(in_channels, 64, kernel_size=3, stride=1, padding=1, bias=False)
    # the init torchvision gives every other convolution of the network
    nn.init.kaiming_normal_(backbone.conv1.weight, mode="fan_out", nonlinearity="relu")
    backbone.maxpool = nn.Identity()
    backbone.avgpool = GlobalAvgPool2d()  # deterministic kernels on CUDA too (models/pooling.py)
    features = backbone.fc.in_features
    backbone.fc = nn.Identity()  # forward now ends at avgpool + flatten
    return backbone, features


class ResNet(nn.Module):
    def __init__(
        self,
        arch: Callable[..., torchvision.models.ResNet],
        in_channels: int = 3,
        num_classes: int = 10,
        width: int = 256,
    ) -> None:
        super().__init__()
        self.encoder, features = small_image_backbone(arch, in_channels)  # 512 (ResNet-18) / 2048 (ResNet-50)
        self.projector = projection_head(features, width)
        self.classifier = nn.Linear(width, num_classes)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        z = self.projector(self.encoder(x))
        return self.classifier(z), z


@MODELS.register("resnet18")
def resnet18(in_channels: int, num_classes: int, image_size: tuple[int, int]) -> ResNet:
    import torchvision

    return ResNet(torchvision.models.resnet18, in_channels, num_classes)


@MODELS.register("resnet50")
def resnet50(in_channels: int, num_classes: int, image_size: tuple[int, int]) -> ResNet:
    import torchvision

    return ResNet(torchvision.models.resnet50, in_channels, num_classes)
