"""Checks for your own code's tests: `check_method` runs a method the way trials will (docs/how-to/own-method.md).

Light to import (no torch): the harness (method_check.py, on top of the engine) is loaded when a check runs. This
module names the public entry points; method_check does the work.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from raytune_fl.errors import RaytuneFLError

__all__ = ["MethodCheckError", "check_method"]


class MethodCheckError(AssertionError, RaytuneFLError):
    """A method that breaks the contract; the message names it, where it is defined, and what to add."""


def check_method(
    method: Any,  # a registered name, or a MethodSpec (not imported here: this module stays torch-free)
    params: Mapping[str, Any] | None = None,
    *,
    model: str = "simple_cnn",
    shape: tuple[int, int, int] = (1, 8, 8),
    classes: int = 10,
    client_batch: int = 3,
) -> None:
    """Run a registered method as trials do, in this process (no Ray), on a tiny synthetic federation (3 clients of
    20 to 40 images of `shape`, `classes` classes, client 0 with three classes only) and raise a `MethodCheckError`
    (an AssertionError) that says what to fix when it breaks the contract:

    - `build(params, context)` returns a `Method` (a raise names the line);
    - its state survives a checkpoint: two rounds uninterrupted equal, bit for bit, two rounds of which the second
      runs on a freshly built method and fresh workers from the state written after round 1 (every payload, client
      update, aggregated model and server output; and every attribute of the aggregator and the client hooks but
      those their class names in `transient`);
    - two rounds of the round driver with a resume between them report every round's metrics as an uninterrupted
      run does;
    - unless its spec says it trains clients one at a time (`sequential`), clients trained `client_batch` at a
      time equal the sequential ones (in float64, to 1e-7 relative: rounding is ~1e-16, a real difference such as
      one client's tensor read by another is many orders above).

    `method`: a registered name or `MethodSpec`; `params`: its hyperparameters (the rest at their defaults);
    `model`: a registered model name (your own, for a method that needs it) built for `shape` and `classes`.
    A few seconds on a CPU with the default tiny model.
    """
    from raytune_fl.testing import method_check  # torch: loaded when a check runs

    method_check.check_method(method, params, model=model, shape=shape, classes=classes, client_batch=client_batch)
