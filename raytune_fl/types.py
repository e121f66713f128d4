"""Typed records that cross the client/server boundary (no string-keyed message dicts)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

# A model's state_dict as numpy arrays, in the module's own order. Numpy (not torch) because Ray's
# object store reads numpy zero-copy, and because aggregators are plain array maths.
Weights = dict[str, np.ndarray]


@dataclass(frozen=True)
class WorkerPlace:
    """Where a client was trained: which Ray node, which GPUs Ray gave the worker, which torch device it used."""

    node: str = ""  # Ray node id; empty when the clients train in the trial's own process
    gpus: str = ""  # Ray's GPU ids for the worker, comma-separated (its CUDA_VISIBLE_DEVICES); empty: none
    device: str = "cpu"
    placement_group: str = ""  # the Ray placement group the worker runs in (the trial's); empty: none
    actor: str = ""  # the Ray actor id: which of the trial's actors it was


@dataclass
class ClientUpdate:
    """What one client returns after local training in one round."""

    client_id: int
    num_samples: int  # local training samples: FedAvg's weight
    num_steps: int  # optimiser steps taken (FedNova needs it)
    delta: Weights  # local - global, floating-point entries only
    buffers: Weights  # non-float entries (BatchNorm's num_batches_tracked) as they ended locally
    metrics: dict[str, float]  # per-batch means: loss, ce, term_<name>
    state: Any = None  # per-client method state, kept by the server between rounds
    extras: dict[str, Any] = field(default_factory=dict)
    staleness: int = 0  # server versions between the model this client started from and the one it is applied to
    place: WorkerPlace | None = None  # filled by the Ray actor that trained it
    # resources.partial_sums: the delta went into its worker's sum (shared by that worker's clients); `delta` is {}
    summed: PartialSum | None = None


@dataclass(frozen=True)
class PartialSum:
    """The float entries of some clients' deltas, summed where the clients trained (resources.partial_sums), so a
    worker sends one model-sized message a round instead of one per client. aggregators/partial.py does the maths."""

    client_ids: tuple[int, ...]  # ascending
    samples: int  # sum of n_i: FedAvg's weights
    weighted: Weights  # sum_i n_i * delta_i, float64
    plain: Weights  # sum_i delta_i of the BatchNorm running statistics, float64 (batchnorm.aggregate: mean)
    delta_bytes: int  # one client's delta in bytes: what each would have sent (upload accounting)


def is_float_entry(array: np.ndarray) -> bool:
    return np.issubdtype(array.dtype, np.floating)
