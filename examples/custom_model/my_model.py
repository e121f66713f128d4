"""A plugin that registers a model: a small multilayer perceptron, `tiny_mlp`.

The model contract (README, "Your own model"): the factory takes (in_channels, num_classes, image_size) and returns
an nn.Module whose forward returns (logits, z), z being the (batch, D) representation that `self.classifier`, an
nn.Linear(D, num_classes), reads. FedUV's and UniVarFL's terms regularise z and the classifier; the spectrum
diagnostic reads the classifier's weight.
"""

from __future__ import annotations

from torch import Tensor, nn

from raytune_fl import register_model


class TinyMLP(nn.Module):
    def __init__(self, in_channels: int, num_classes: int, image_size: tuple[int, int], hidden: int = 64) -> None:
        super().__init__()
        inputs = in_channels * image_size[0] * image_size[1]
        self.body = nn.Sequential(nn.Flatten(), nn.Linear(inputs, hidden), nn.ReLU(), nn.Linear(hidden, hidden))
        self.classifier = nn.Linear(hidden, num_classes)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        z = self.body(x)
        return self.classifier(z), z


def tiny_mlp(in_channels: int, num_classes: int, image_size: tuple[int, int]) -> nn.Module:
    return TinyMLP(in_channels, num_classes, image_size)


register_model("tiny_mlp", tiny_mlp)
