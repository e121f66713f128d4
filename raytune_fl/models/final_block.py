"""A model's final feature block: capture its input and output, and rerun it alone at a reduced width.

FedAlign runs the last block of the encoder a second time on a channel-slice of its own input. The block is

  * SimpleCNN: the last two (Conv2d, BatchNorm2d, ReLU) triples, ``encoder[18:24]``;
  * the platform's ResNet (resnet18 / resnet50): ``encoder.layer4``, a sequence of torchvision ``BasicBlock``
    (conv1-bn1-relu-conv2-bn2, + shortcut, relu) or ``Bottleneck`` (conv1-bn1-relu-conv2-bn2-relu-conv3-bn3,
    + shortcut, relu); the shortcut is the identity or ``downsample`` = (1x1 conv, BN).

Width. A layer with C channels keeps k(C, w) = max(1, round(w * C)) of them at width w in (0, 1] (Python's
``round``: plain rounding to the nearest integer, half to even; no rounding to multiples of 8). A convolution with
weight W (C_out, C_in, kh, kw) runs with W[:k(C_out), :k_in], where k_in is the channel count of its input (the
previous layer's k), keeping its stride, padding and dilation. A BatchNorm with C channels normalises with the
statistics of the current batch (training mode) and applies gamma[:k], beta[:k] and its own eps; its running
statistics are neither used nor updated. Since every layer is sliced by the same rule, an identity shortcut
(C_in = C_out) keeps matching shapes. At w = 1 the sliced block equals the block's own training-mode forward.

Slicing indexes the parameters (no copies), so the gradient of the sliced output reaches exactly the used
slices: W[:k_out, :k_in], gamma[:k], beta[:k]; the rest of each parameter gets an exact-zero gradient.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, TypeVar

import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.hooks import RemovableHandle

from raytune_fl.models.resnet import ResNet
from raytune_fl.models.simple_cnn import SimpleCNN

if TYPE_CHECKING:
    from types import TracebackType

SUPPORTED = "FedAlign supports simple_cnn (SimpleCNN) and resnet18 / resnet50 (the platform's ResNet)"

_Part = TypeVar("_Part", bound=nn.Module)


def reduced_channels(channels: int, width: float) -> int:
    """k = max(1, round(width * channels)): how many of a layer's channels width keeps."""
    if not 0.0 < width <= 1.0:
        raise ValueError(f"width must lie in (0, 1]; got {width}")
    return max(1, round(width * channels))


def _torchvision_blocks() -> tuple[type[nn.Module], type[nn.Module]]:
    # torchvision is imported lazily (as in models/resnet.py); a ResNet exists, so it is loaded already
    from torchvision.models.resnet import BasicBlock, Bottleneck

    return BasicBlock, Bottleneck


def _part(module: nn.Module, name: str, kind: type[_Part]) -> _Part:
    """The submodule ``name`` of a torchvision module, checked to be the layer kind the slicing rule handles
    (torchvision ships no type information: its attributes reach here untyped)."""
    part = getattr(module, name)
    if not isinstance(part, kind):
        raise ValueError(f"{type(module).__name__}.{name} is a {type(part).__name__}, not {kind.__name__}; {SUPPORTED}")
    return part


class FinalBlock:
    """The final feature block of a SimpleCNN or ResNet: its layers, forward hooks, and a reduced-width rerun.

    ``layers`` are the block's modules in forward order; ``layers[0]`` receives the block input A and
    ``layers[-1]`` produces the block output B. Use ``FinalBlock.of(model)`` rather than the constructor.
    """

    def __init__(self, layers: Sequence[nn.Module]) -> None:
        if not layers:
            raise ValueError("a final block needs at least one layer")
        self.layers: tuple[nn.Module, ...] = tuple(layers)
        self.inputs: Tensor | None = None  # A of the latest forward while attached (live, not detached)
        self.outputs: Tensor | None = None  # B of the latest forward while attached (live, not detached)
        self._handles: list[RemovableHandle] = []

    # ---------------------------------------------------------------------------------------------- construction

    @classmethod
    def of(cls, model: nn.Module) -> FinalBlock:
        """The final block of a SimpleCNN (encoder[18:24]) or of the platform's ResNet (encoder.layer4)."""
        if isinstance(model, SimpleCNN):
            layers = list(model.encoder[18:24])
            expected = (nn.Conv2d, nn.BatchNorm2d, nn.ReLU) * 2
            if len(layers) != 6 or not all(isinstance(m, t) for m, t in zip(layers, expected)):
                raise ValueError("SimpleCNN.encoder[18:24] is not two (Conv2d, BatchNorm2d, ReLU) triples")
            return cls(layers)
        if isinstance(model, ResNet):
            blocks = _torchvision_blocks()
            layers = list(_part(model.encoder, "layer4", nn.Sequential))
            if not layers or not all(isinstance(m, blocks) for m in layers):
                raise ValueError("ResNet encoder.layer4 must hold torchvision BasicBlock or Bottleneck modules")
            return cls(layers)
        raise ValueError(f"{type(model).__name__} has no known final block; {SUPPORTED}")

    @property
    def in_channels(self) -> int:
        """C_in: the channel count of the block input A."""
        first = self.layers[0]
        conv = first if isinstance(first, nn.Conv2d) else _part(first, "conv1", nn.Conv2d)
        return conv.in_channels

    @property
    def out_channels(self) -> int:
        """C_out: the channel count of the block output B."""
        last = self.layers[-1]
        if isinstance(last, nn.ReLU):  # SimpleCNN: the block ends in (conv, BN, ReLU)
            return [m for m in self.layers if isinstance(m, nn.Conv2d)][-1].out_channels
        return _part(
            last, "conv3" if hasattr(last, "conv3") else "conv2", nn.Conv2d
        ).out_channels  # Bottleneck / BasicBlock

    # ---------------------------------------------------------------------------------------------- hooks

    @property
    def attached(self) -> bool:
        return bool(self._handles)

    def attach(self) -> FinalBlock:
        """Keep A and B of every forward in ``inputs`` / ``outputs``; attaching twice registers nothing new."""
        if not self._handles:
            self._handles = [
                self.layers[0].register_forward_pre_hook(self._keep_input),
                self.layers[-1].register_forward_hook(self._keep_output),
            ]
        return self

    def detach(self) -> None:
        """Remove the hooks and drop the kept tensors (they hold the autograd graph); safe to call again."""
        for handle in self._handles:
            handle.remove()
        self._handles = []
        self.inputs = self.outputs = None

    def __enter__(self) -> FinalBlock:
        return self.attach()

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.detach()

    # the hooks return None: the forward's values are left exactly as they are
    def _keep_input(self, module: nn.Module, args: tuple[Tensor, ...]) -> None:
        self.inputs = args[0]

    def _keep_output(self, module: nn.Module, args: tuple[Tensor, ...], output: Tensor) -> None:
        self.outputs = output

    # ---------------------------------------------------------------------------------------------- reduced width

    def sliced(self, a: Tensor, width: float) -> Tensor:
        """The block alone at `width` on `a` (n, k_in, H, W), k_in = reduced_channels(in_channels, width).

        The caller slices and detaches the full input: ``a = A[:, :k_in].detach()``. Returns (n, k_out, h, w)
        with k_out = reduced_channels(out_channels, width). Buffers of the model are left untouched.
        """
        expected = reduced_channels(self.in_channels, width)
        if a.dim() != 4 or a.shape[1] != expected:
            raise ValueError(
                f"expected a of shape (n, {expected}, H, W) at width {width} (C_in = {self.in_channels}); "
                f"got {tuple(a.shape)}"
            )
        x = a
        for layer in self.layers:
            x = _run(layer, x, width)
        return x


# -------------------------------------------------------------------------------------------------- slicing


def _conv(conv: nn.Conv2d, x: Tensor, width: float) -> Tensor:
    if conv.groups != 1 or conv.padding_mode != "zeros":
        raise ValueError(f"cannot slice {conv}: only groups=1 and zero padding are supported")
    k_in, k_out = x.shape[1], reduced_channels(conv.out_channels, width)
    bias = None if conv.bias is None else conv.bias[:k_out]
    return F.conv2d(x, conv.weight[:k_out, :k_in], bias, conv.stride, conv.padding, conv.dilation, 1)


def _batch_norm(bn: nn.BatchNorm2d, x: Tensor) -> Tensor:
    k = x.shape[1]
    weight = None if bn.weight is None else bn.weight[:k]
    bias = None if bn.bias is None else bn.bias[:k]
    # running stats None + training=True: batch statistics, and nothing of the model's is read or written
    return F.batch_norm(x, None, None, weight, bias, training=True, momentum=0.0, eps=bn.eps)


def _sequence(layers: nn.Sequential, x: Tensor, width: float) -> Tensor:
    for layer in layers:
        x = _run(layer, x, width)
    return x


def _run(layer: nn.Module, x: Tensor, width: float) -> Tensor:
    if isinstance(layer, nn.Conv2d):
        return _conv(layer, x, width)
    if isinstance(layer, nn.BatchNorm2d):
        return _batch_norm(layer, x)
    if isinstance(layer, nn.ReLU):
        return F.relu(x)
    basic, bottleneck = _torchvision_blocks()
    if isinstance(layer, (basic, bottleneck)):
        conv1, bn1 = _part(layer, "conv1", nn.Conv2d), _part(layer, "bn1", nn.BatchNorm2d)
        conv2, bn2 = _part(layer, "conv2", nn.Conv2d), _part(layer, "bn2", nn.BatchNorm2d)
        out = F.relu(_batch_norm(bn1, _conv(conv1, x, width)))
        out = _batch_norm(bn2, _conv(conv2, out, width))
        if isinstance(layer, bottleneck):
            conv3, bn3 = _part(layer, "conv3", nn.Conv2d), _part(layer, "bn3", nn.BatchNorm2d)
            out = _batch_norm(bn3, _conv(conv3, F.relu(out), width))
        shortcut = x if layer.downsample is None else _sequence(_part(layer, "downsample", nn.Sequential), x, width)
        return F.relu(out + shortcut)
    raise ValueError(f"cannot slice a {type(layer).__name__}; {SUPPORTED}")
