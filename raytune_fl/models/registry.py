"""The models by name. Light to import (no torch): the names are declared here, each model's module (torch) is
imported when it is first built."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from raytune_fl.registry import Registry

if TYPE_CHECKING:
    from torch import nn

# factory(in_channels, num_classes, image_size) -> module whose forward returns (logits, z); on a text dataset
# in_channels is the vocabulary's size and image_size (1, L), a batch (n, L) token ids (ArrayDataset.model_inputs)
MODELS: Registry[Callable[..., nn.Module]] = Registry(
    "model",
    homes={
        "simple_cnn": "raytune_fl.models.simple_cnn",
        "simple_cnn_gn": "raytune_fl.models.simple_cnn",
        "resnet18": "raytune_fl.models.resnet",
        "resnet50": "raytune_fl.models.resnet",
        "char_lstm": "raytune_fl.models.char_lstm",
    },
)


# built-in models without BatchNorm, known without torch: local DP-SGD refuses the others in train mode
# (config/local_dp.py); a plugin's model is inspected once built
BATCHNORM_FREE: frozenset[str] = frozenset({"simple_cnn_gn", "char_lstm"})
# built-in models that read token ids (n, L) rather than images (n, C, H, W): the data checks pair them with text
TEXT_MODELS: frozenset[str] = frozenset({"char_lstm"})
# built-in models whose clients cannot train stacked (resources.client_batch > 1): why, by name
SEQUENTIAL_MODELS: dict[str, str] = {"char_lstm": "torch's vmap has no batching rule for LSTM layers"}


def build_model(
    name: str, in_channels: int, num_classes: int, image_size: tuple[int, int], text: bool = False
) -> nn.Module:
    """The model `name` for these inputs (`text`: in_channels is a vocabulary's size, image_size (1, L)). A plugin's
    model is checked against the contract the first time it is built for them in a process (the built-in ones are
    checked by tests/conformance/test_models.py)."""
    model = MODELS.get(name)(in_channels=in_channels, num_classes=num_classes, image_size=image_size)
    key = (name, in_channels, num_classes, tuple(image_size), text)
    if name in MODELS.user_names() and key not in _checked:
        check_model(name, model, in_channels, num_classes, image_size, text)
        _checked.add(key)
    return model


_checked: set[tuple[str, int, int, tuple[int, ...], bool]] = set()


def sample_batch(in_channels: int, image_size: tuple[int, int], text: bool = False) -> tuple[int, ...]:
    """The shape of a batch of two inputs: (2, C, H, W) images, or (2, L) token ids for text."""
    return (2, image_size[1]) if text else (2, in_channels, *image_size)


def check_model(
    name: str, model: object, in_channels: int, num_classes: int, image_size: tuple[int, int], text: bool = False
) -> None:
    """The model contract, with an error that names the model: an `nn.Module` whose `classifier` is an
    `nn.Linear(D, num_classes)` and whose forward returns `(logits, z)`, logits (batch, num_classes) and z the
    (batch, D) representation the classifier reads. One forward pass of two zero images (token ids 0 for `text`) in
    eval mode, without gradients: the model's weights, buffers and the random streams are left as they were."""
    import torch
    from torch import nn

    where = f"model {name!r}"
    if not isinstance(model, nn.Module):
        raise ValueError(f"{where}: its factory returned a {type(model).__name__}, not a torch.nn.Module")
    classifier = getattr(model, "classifier", None)
    if not isinstance(classifier, nn.Linear):
        raise ValueError(
            f"{where}: needs `self.classifier`, the nn.Linear(D, num_classes) that reads the representation z "
            f"(the spectrum diagnostic, FedUV's and FedLD's terms and Freeze read it); got {type(classifier).__name__}"
        )
    if classifier.out_features != num_classes:
        raise ValueError(f"{where}: classifier has {classifier.out_features} outputs for {num_classes} classes")
    was_training, shape = model.training, sample_batch(in_channels, image_size, text)
    model.eval()
    try:
        with torch.no_grad():
            output = model(torch.zeros(shape, dtype=torch.long if text else torch.float32))
    except Exception as error:
        what = " of token ids" if text else ""
        raise ValueError(f"{where}: forward failed on a {shape} batch{what}: {type(error).__name__}: {error}") from None
    finally:
        model.train(was_training)
    if not (isinstance(output, tuple | list) and len(output) == 2 and all(torch.is_tensor(t) for t in output)):
        raise ValueError(f"{where}: forward must return (logits, z), two tensors; got {type(output).__name__}")
    logits, z = output
    if tuple(logits.shape) != (2, num_classes):
        raise ValueError(f"{where}: logits of shape {tuple(logits.shape)}, expected (batch, {num_classes})")
    if z.dim() != 2 or z.shape[0] != 2 or z.shape[1] != classifier.in_features:
        raise ValueError(
            f"{where}: z of shape {tuple(z.shape)}, expected (batch, {classifier.in_features}): the representation "
            "its classifier reads, flattened"
        )
