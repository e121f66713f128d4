"""A method = client hooks and local loss terms + a server aggregator. Composition, not a class tree.

There is one local training loop (raytune_fl.engine.local); a method never copies it. It adds
`LocalTerm`s (each contributes `weight * loss(batch)`), `ClientHook`s (SCAFFOLD's gradient
correction, Freeze, FedBN's local statistics) and picks a `ServerAggregator`.

Per-client state (SCAFFOLD's c_i, MOON's previous model, FedBN's statistics) never lives in a
worker: a hook writes it to `ctx.new_state[hook.name]`, the server keeps it with the client's id and
hands it back as `ctx.state[hook.name]` the next time that client trains, whichever worker runs it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from torch import Tensor, nn

from raytune_fl.registry import Registry
from raytune_fl.types import ClientUpdate, Weights


@dataclass(frozen=True)
class MethodContext:
    """What a method may depend on besides its hyperparameters."""

    num_classes: int
    lr: float = 0.01  # client learning rate (SCAFFOLD's c_i update, q-FFL's Lipschitz estimate 1/lr)
    momentum: float = 0.0  # client SGD momentum (FedNova's effective step count)
    num_clients: int = 1  # N, all clients (SCAFFOLD moves c by |S|/N)


@dataclass
class ClientContext:
    """One client's local round, as the hooks see it."""

    model: nn.Module
    client_id: int
    round_index: int
    x: Tensor  # the client's local training data, on the training device
    y: Tensor
    lr: float
    state: Mapping[str, Any] = field(default_factory=dict)  # this client's state from its last round, by hook name
    payload: Mapping[str, Any] = field(default_factory=dict)  # what the server broadcast this round, by hook name
    new_state: dict[str, Any] = field(default_factory=dict)  # written by hooks; the server keeps it
    extras: dict[str, Any] = field(default_factory=dict)  # written by hooks; read by the aggregator
    steps: int = 0  # optimiser steps taken so far


@dataclass(frozen=True)
class Batch:
    """What a loss term sees for one local mini-batch."""

    x: Tensor
    y: Tensor
    logits: Tensor
    z: Tensor  # the representation the classifier reads
    model: nn.Module
    num_classes: int


class ClientHook:
    """Required: a unique `name`. Every hook is an optional no-op."""

    name: str = "hook"

    def on_round_start(self, ctx: ClientContext) -> None:
        """After the global weights are loaded, before the optimiser is built (so it may freeze parameters)."""

    def after_backward(self, ctx: ClientContext) -> None:
        """After loss.backward(), before optimizer.step(): may edit gradients."""

    def on_round_end(self, ctx: ClientContext) -> None:
        """After the last local step: may write ctx.new_state[self.name] and ctx.extras[self.name]."""


class LocalTerm(ClientHook):
    """Required: `name` and `loss`. The loop adds `weight * loss(batch)` to the cross-entropy."""

    name: str = "term"

    def __init__(self, weight: float) -> None:
        self.weight = float(weight)

    def loss(self, batch: Batch) -> Tensor:  # the unweighted term; the loop multiplies by `weight`
        raise NotImplementedError


class ServerAggregator:
    """Required: `aggregate`. Optional no-op hooks: a payload broadcast with the weights, state for checkpoints.

    `aggregate` gets the updates sorted by client id, so float sums never depend on arrival order.
    """

    def aggregate(self, global_weights: Weights, updates: Sequence[ClientUpdate]) -> Weights:
        raise NotImplementedError

    def payload(self) -> dict[str, Any]:
        """Broadcast to every client with the weights (by hook name), e.g. SCAFFOLD's server control variate."""
        return {}

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        pass


class Stateless(ServerAggregator):
    """A pure function (global weights, updates) -> new global weights, e.g. FedAvg."""

    def __init__(self, function: Callable[[Weights, Sequence[ClientUpdate]], Weights]) -> None:
        self.function = function

    def aggregate(self, global_weights: Weights, updates: Sequence[ClientUpdate]) -> Weights:
        return self.function(global_weights, updates)


@dataclass(frozen=True)
class Method:
    name: str
    terms: tuple[LocalTerm, ...]  # only terms with a non-zero weight: a switched-off term costs nothing
    aggregator: ServerAggregator
    hooks: tuple[ClientHook, ...] = ()  # hooks that add no loss
    # the model a client actually uses: the global weights with its own per-client parts (FedBN: its
    # BatchNorm), given the client's state. None: every client uses the global model as it is.
    personalise: Callable[[Weights, Mapping[str, Any]], Weights] | None = None
    # asynchronous buffered aggregation (FedBuff): the round driver aggregates every `buffer_size` arrivals
    # instead of waiting for the sampled clients; None: synchronous rounds
    buffer_size: int | None = None

    def __post_init__(self) -> None:
        names = [hook.name for hook in self.all_hooks]
        if len(names) != len(set(names)):
            raise ValueError(f"method {self.name!r}: hook names must be unique, got {names}")

    @property
    def all_hooks(self) -> tuple[ClientHook, ...]:
        return (*self.terms, *self.hooks)

    def aggregate(self, global_weights: Weights, updates: Sequence[ClientUpdate]) -> Weights:
        return self.aggregator.aggregate(global_weights, sorted(updates, key=lambda u: u.client_id))


@dataclass(frozen=True)
class MethodSpec:
    """A registered method: its hyperparameters with defaults, and how to build it."""

    name: str
    defaults: Mapping[str, Any]  # None means "derived from the data", explained in `derived`
    build: Callable[[dict[str, Any], MethodContext], Method]  # (resolved hyperparameters, context) -> Method
    summary: str = ""
    derived: Mapping[str, str] = field(default_factory=dict)  # e.g. {"lambda": "D/4"}: how a None default resolves
    # hyperparameters under which one round from a fresh state is exactly FedAvg's; None: no such setting
    # (Freeze never trains its classifier). The conformance suite checks it for every method.
    as_fedavg: Mapping[str, Any] | None = field(default_factory=dict)

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


def require_choice(params: Mapping[str, Any], name: str, choices: Sequence[Any]) -> None:
    if params[name] not in choices:
        raise ValueError(f"{name}: must be one of {', '.join(map(repr, choices))} (got {params[name]!r})")


def build_method(name: str, params: Mapping[str, Any], context: MethodContext | int) -> Method:
    """Resolve hyperparameters against the method's defaults; unknown names fail with the known ones.

    `context` may be just the number of classes where nothing else matters (tests, validation).
    """
    spec = METHODS.get(name)
    unknown = sorted(set(params) - set(spec.defaults))
    if unknown:
        raise ValueError(
            f"method {name!r} has no hyperparameter {', '.join(unknown)}; "
            f"its hyperparameters: {', '.join(spec.defaults) or '(none)'}"
        )
    if isinstance(context, int):
        context = MethodContext(num_classes=context)
    return spec.build({**spec.defaults, **params}, context)
