"""A trial's resumable state on disk, loadable with torch.load(weights_only=True) (no pickle of code).

The state is a tree of dicts, lists, tuples, numbers, strings and numpy arrays (weights, per-client
and server method state). Arrays are stored as tensors and come back as numpy arrays; the typed
records that cross the client/server boundary are stored field by field and rebuilt.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import torch

from raytune_fl.engine.pool import TrainJob
from raytune_fl.types import ClientUpdate

STATE_FILE = "federation.pt"
_RECORDS = {cls.__name__: cls for cls in (ClientUpdate, TrainJob)}
_TYPE = "__record__"


def encode(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return torch.from_numpy(np.array(value, order="C", copy=True))  # keeps 0-d shapes
    if isinstance(value, np.generic):
        return value.item()
    if dataclasses.is_dataclass(value) and type(value).__name__ in _RECORDS:
        return {
            _TYPE: type(value).__name__,
            **{f.name: encode(getattr(value, f.name)) for f in dataclasses.fields(value)},
        }
    if isinstance(value, dict):
        return {k: encode(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(encode(v) for v in value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"cannot checkpoint a {type(value).__name__}: keep method state as numpy arrays and numbers")


def decode(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.numpy()
    if isinstance(value, dict):
        if _TYPE in value:
            fields = {k: decode(v) for k, v in value.items() if k != _TYPE}
            return _RECORDS[value[_TYPE]](**fields)
        return {k: decode(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(decode(v) for v in value)
    return value


def save_state(state: dict[str, Any], directory: str | Path) -> Path:
    path = Path(directory) / STATE_FILE
    torch.save(encode(state), path)
    return path


def load_state(directory: str | Path) -> dict[str, Any]:
    # weights_only: a checkpoint from shared storage cannot run code when loaded
    return decode(torch.load(Path(directory) / STATE_FILE, weights_only=True))
