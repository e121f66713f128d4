"""Torch <-> numpy for model weights and per-client state: one place for both the engine and the methods."""

from __future__ import annotations

import warnings
from collections.abc import Mapping

import numpy as np
import torch

from raytune_fl.types import Weights


def as_tensor(array: np.ndarray) -> torch.Tensor:
    with warnings.catch_warnings():  # object-store arrays are read-only; we never write through them
        warnings.simplefilter("ignore", UserWarning)
        return torch.from_numpy(array)


def numpy_copy(tensors: Mapping[str, torch.Tensor]) -> Weights:
    """Detached CPU numpy copies: safe to keep after the tensors change, picklable through Ray."""
    return {key: _host_copy(value.detach()) for key, value in tensors.items()}


def _host_copy(tensor: torch.Tensor) -> np.ndarray:
    """A C-contiguous numpy array that shares no memory with `tensor`, copied once.

    A CPU tensor's `.numpy()` shares its memory, so it is copied; any other device's `.cpu()` is already a new
    host tensor, so copying again would only double the work (only a strided one is copied, to C order).
    """
    if tensor.device.type == "cpu":
        return tensor.numpy().copy()
    array = tensor.cpu().numpy()
    return array if array.flags.c_contiguous else array.copy()  # (np.ascontiguousarray would make 0-d arrays 1-d)


def load_weights(model: torch.nn.Module, weights: Weights) -> None:
    """`weights` into the model's own parameters and buffers, in place: the copies `model.load_state_dict` makes.

    Why not load_state_dict itself: it walks every module's loader, which costs more than the copies for a small
    model (0.70-0.76 ms against 0.47-0.52 ms a load for the simple CNN on one CPU thread, `benchmarks.client_time`),
    and a cross-device client loads the global model every round. Where anything could differ it is used: a model
    with its own loading or state-dict code (a module overriding how it loads, a hook) and weights that do not match
    the model key for key and shape for shape (its error then names the key).
    """
    targets = None if _loads_its_own_way(model) else model.state_dict(keep_vars=True)
    if (
        targets is None
        or targets.keys() != weights.keys()
        or any(tuple(target.shape) != np.shape(weights[key]) for key, target in targets.items())
    ):
        model.load_state_dict({key: as_tensor(value) for key, value in weights.items()})
        return
    with torch.no_grad(), warnings.catch_warnings():  # read-only object-store arrays: only read here
        warnings.simplefilter("ignore", UserWarning)
        for key, target in targets.items():
            target.copy_(torch.from_numpy(weights[key]))


# the loaders whose copy is a plain copy_ of a key present (BatchNorm's own adds only a default for an old
# checkpoint's missing num_batches_tracked, which a full set of keys never lacks)
_PLAIN_LOADERS = (torch.nn.Module._load_from_state_dict, torch.nn.modules.batchnorm._NormBase._load_from_state_dict)


def _loads_its_own_way(model: torch.nn.Module) -> bool:
    for module in model.modules():
        hooks = (
            module._load_state_dict_pre_hooks,
            module._load_state_dict_post_hooks,
            module._state_dict_hooks,
            module._state_dict_pre_hooks,
        )
        if type(module)._load_from_state_dict not in _PLAIN_LOADERS or any(hooks):
            return True
    return False


def read_weights(model: torch.nn.Module) -> Weights:
    return numpy_copy(model.state_dict())
