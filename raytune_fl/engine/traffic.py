"""What the clients upload each round, in bytes, counted exactly from the arrays their updates carry.

The rule (metrics.UPLOAD_BYTES says it too): a client sends its update's `delta` (the float entries of its
model minus the global model), its `buffers` (the non-float entries, BatchNorm's counters) and its method's
`extras` (SCAFFOLD's control-variate change, FedPAC's class statistics, q-FFL's loss). Its `state` is not counted:
the simulation hands it to the server only so that any worker can train any client; a real client keeps it.
Every entry counts as the update carries it, whether or not the method's server uses it (FedBN's BatchNorm
entries too). Plain numpy, no torch: the round driver calls it on every path (synchronous, FedBuff, batched
clients), in `Federation.report_round`. Counted: the arrays' bytes, not their names or any framing a transport
adds.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from raytune_fl.metrics import UPLOAD_BYTES, UPLOAD_BYTES_PER_CLIENT
from raytune_fl.types import ClientUpdate

_NUMBER_BYTES = {bool: 1, int: 8, float: 8, complex: 16}  # a Python number travels as numpy's default dtype


def payload_bytes(value: Any) -> int:
    """Bytes of the numbers in `value`: an array's (or numpy scalar's, or tensor's) `nbytes`, 8 for a Python int
    or float, text as UTF-8; summed through mappings, lists, tuples and dataclasses. None counts 0, and so does an
    object of any other kind (it carries no numbers this can see)."""
    if isinstance(value, (bytes, bytearray)):
        return len(value)
    nbytes = getattr(value, "nbytes", None)  # numpy arrays and scalars, torch tensors, memoryviews
    if isinstance(nbytes, int):
        return nbytes
    if type(value) in _NUMBER_BYTES:
        return _NUMBER_BYTES[type(value)]
    if isinstance(value, str):
        return len(value.encode())
    if isinstance(value, Mapping):
        return sum(payload_bytes(item) for item in value.values())
    if isinstance(value, (list, tuple)):
        return sum(payload_bytes(item) for item in value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return sum(payload_bytes(getattr(value, f.name)) for f in dataclasses.fields(value))
    return 0


def upload_bytes(update: ClientUpdate) -> int:
    """What one client sent back: its delta, buffers and extras (not its state: see the module's rule)."""
    # with partial sums the delta went into its worker's sum: it counts as sent, as the client's protocol sends it
    delta = payload_bytes(update.delta) if update.summed is None else update.summed.delta_bytes
    return delta + payload_bytes(update.buffers) + payload_bytes(update.extras)


def upload_metrics(updates: Sequence[ClientUpdate]) -> dict[str, float]:
    """A round's traffic over the updates it aggregated: their total, and its mean per client (absent when none
    reported: there is no client to average over)."""
    sizes = [upload_bytes(update) for update in updates]
    metrics: dict[str, float] = {UPLOAD_BYTES: sum(sizes)}
    if sizes:
        metrics[UPLOAD_BYTES_PER_CLIENT] = sum(sizes) / len(sizes)
    return metrics
