"""FedUV's small CNN: 8 x (conv, BN, ReLU), average pool, a 2-layer projector, a linear classifier; and
`simple_cnn_gn`, the same layers with GroupNorm in place of BatchNorm (local DP-SGD: no statistic mixes samples).

Layer list and names follow docs/explanation/workload.md#model (161,306 parameters for 1x28x28, 10 classes).
Convolutions are unpadded as in the original; on images too small for that (8x8 digits) a 3x3
convolution whose output would vanish gets padding 1 instead, so any image size >= 1 works.
"""

from __future__ import annotations

from collections.abc import Callable

from torch import Tensor, nn

from raytune_fl.models.pooling import GlobalAvgPool2d
from raytune_fl.models.registry import MODELS

# (out_channels, kernel, stride) per conv block
_BLOCKS = ((16, 3, 1), (16, 1, 1), (32, 3, 2), (32, 3, 1), (32, 1, 1), (64, 3, 2), (64, 3, 1), (64, 1, 1))


def _out_size(size: int, kernel: int, stride: int, padding: int) -> int:
    return (size + 2 * padding - kernel) // stride + 1


GROUPS = 8  # simple_cnn_gn's groups per GroupNorm: every width here (16, 32, 64, 256) is a multiple of it

Norm = Callable[[int], nn.Module]  # channels -> a normalisation layer


def _group_norm(channels: int) -> nn.Module:
    return nn.GroupNorm(GROUPS, channels)


def projection_head(in_features: int, width: int = 256, norm: Norm = nn.BatchNorm1d) -> nn.Sequential:
    """The projector every model shares: Linear -> BN -> ReLU -> Linear -> BN -> ReLU; its output is z."""
    return nn.Sequential(
        nn.Linear(in_features, width),
        norm(width),
        nn.ReLU(),
        nn.Linear(width, width),
        norm(width),
        nn.ReLU(),
    )


class SimpleCNN(nn.Module):
    def __init__(
        self,
        in_channels: int = 1,
        num_classes: int = 10,
        image_size: tuple[int, int] = (28, 28),
        width: int = 256,
        group_norm: bool = False,
    ) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        channels, (height, wide) = in_channels, image_size
        for out, kernel, stride in _BLOCKS:
            padding = 0
            if min(_out_size(height, kernel, stride, 0), _out_size(wide, kernel, stride, 0)) < 1:
                padding = kernel // 2
            height, wide = (
                _out_size(height, kernel, stride, padding),
                _out_size(wide, kernel, stride, padding),
            )
            layers += [
                nn.Conv2d(channels, out, kernel, stride, padding, bias=False),
                _group_norm(out) if group_norm else nn.BatchNorm2d(out),
                nn.ReLU(),
            ]
            channels = out
        layers += [GlobalAvgPool2d(), nn.Flatten()]
        self.encoder = nn.Sequential(*layers)
        self.projector = projection_head(channels, width, _group_norm if group_norm else nn.BatchNorm1d)
        self.classifier = nn.Linear(width, num_classes)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        z = self.projector(self.encoder(x))
        return self.classifier(z), z


@MODELS.register("simple_cnn")
def simple_cnn(in_channels: int, num_classes: int, image_size: tuple[int, int]) -> SimpleCNN:
    return SimpleCNN(in_channels, num_classes, image_size)


@MODELS.register("simple_cnn_gn")
def simple_cnn_gn(in_channels: int, num_classes: int, image_size: tuple[int, int]) -> SimpleCNN:
    """simple_cnn with GroupNorm (8 groups) in place of every BatchNorm: each sample normalised alone, so local
    DP-SGD's per-sample gradients are well defined in train mode."""
    return SimpleCNN(in_channels, num_classes, image_size, group_norm=True)


def parameter_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
