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
    model.load_state_dict({key: as_tensor(value) for key, value in weights.items()})


def read_weights(model: torch.nn.Module) -> Weights:
    return numpy_copy(model.state_dict())
