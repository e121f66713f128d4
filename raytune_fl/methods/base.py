"""A method = local loss terms + a server aggregator. Composition, not a class tree.

There is one local training loop (raytune_fl.engine.local); a method never copies it. It adds
`LocalTerm`s, each of which contributes `weight * loss(batch)` and may use the optional hooks.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from torch import Tensor, nn

from raytune_fl.registry import Registry
from raytune_fl.types import ClientUpdate, Weights

# (global weights, client updates) -> new global weights; pure, no transport, no torch required.
Aggregator = Callable[[Weights, Sequence[ClientUpdate]], Weights]


@dataclass(frozen=True)
class Batch:
    """What a loss term sees for one local mini-batch."""

    x: Tensor
    y: Tensor
    logits: Tensor
    z: Tensor  # the representation the classifier reads
    model: nn.Module
    num_classes: int


class LocalTerm:
    """Required: `name` and `loss`. The hooks are optional no-ops."""

    name: str = "term"

    def __init__(self, weight: float) -> None:
        self.weight = float(weight)

    def loss(self, batch: Batch) -> Tensor:  # the unweighted term; the loop multiplies by `weight`
        raise NotImplementedError

    def on_round_start(self, model: nn.Module) -> None:
        """Called after the global weights are loaded, before the first local step."""


@dataclass(frozen=True)
class Method:
    name: str
    terms: tuple[LocalTerm, ...]  # only terms with a non-zero weight: a switched-off term costs nothing
    aggregate: Aggregator


@dataclass(frozen=True)
class MethodSpec:
    """A registered method: its hyperparameters with defaults, and how to build it."""

    name: str
    defaults: Mapping[str, Any]  # None means "derived from the data", explained in `derived`
    build: Callable[[dict[str, Any], int], Method]  # (resolved hyperparameters, num_classes) -> Method
    summary: str = ""
    derived: Mapping[str, str] = field(default_factory=dict)  # e.g. {"lambda": "D/4"}: how a None default resolves

    def describe(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """Hyperparameters for display: derived defaults shown as their rule instead of None."""
        return {k: self.derived.get(k, v) if v is None else v for k, v in {**self.defaults, **params}.items()}


METHODS: Registry[MethodSpec] = Registry("method")


def active(terms: Sequence[LocalTerm]) -> tuple[LocalTerm, ...]:
    return tuple(term for term in terms if term.weight != 0.0)


def require_non_negative(params: Mapping[str, Any], *names: str) -> None:
    for name in names:
        value = params[name]
        if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0:
            raise ValueError(f"{name}: must be a number >= 0 (got {value!r})")


def build_method(name: str, params: Mapping[str, Any], num_classes: int) -> Method:
    """Resolve hyperparameters against the method's defaults; unknown names fail with the known ones."""
    spec = METHODS.get(name)
    unknown = sorted(set(params) - set(spec.defaults))
    if unknown:
        raise ValueError(
            f"method {name!r} has no hyperparameter {', '.join(unknown)}; "
            f"its hyperparameters: {', '.join(spec.defaults) or '(none)'}"
        )
    return spec.build({**spec.defaults, **params}, num_classes)
