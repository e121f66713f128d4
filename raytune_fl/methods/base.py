"""A method = client hooks and local loss terms + a server aggregator. Composition, not a class tree.

There is one local training loop (raytune_fl.engine.local); a method never copies it. It adds
`LocalTerm`s (each contributes `weight * loss(batch)`), `ClientHook`s (SCAFFOLD's gradient
correction, Freeze, FedBN's local statistics) and picks a `ServerAggregator`.

Per-client state (SCAFFOLD's c_i, MOON's previous model, FedBN's statistics) never lives in a
worker: a hook writes it to `ctx.new_state[hook.name]`, the server keeps it with the client's id and
hands it back as `ctx.state[hook.name]` the next time that client trains, whichever worker runs it.

State across a resume (the contract; docs/how-to/own-method.md#state-across-a-resume): a trial restarted from its
checkpoint builds its method afresh, on fresh workers. What survives is the global weights, the per-client state
above and the aggregator's `state_dict()`, given back to `load_state_dict()`, all stored as numpy arrays, numbers,
strings, lists and dicts (engine/checkpoint.py). So server state (FedAvgM's velocity, SCAFFOLD's c, FedDyn's h)
lives in `state_dict()`, client state in `ctx.new_state`, and a hook's attributes are set afresh in every
`on_round_start`. An attribute that carries nothing into the next round (the last aggregation's diagnostics) is
named in `transient`. The commands refuse a plugin method that breaks this before Ray starts, and
`raytune_fl.testing.check_method` checks it in a test (testing/method_check.py does both).

Light to import (torch only for type hints): `MethodSpec` and `Param` are read by the config checks, which run
before any trial and never import torch (each method's module declares its spec, see raytune_fl.methods).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from raytune_fl.types import ClientUpdate, Weights

if TYPE_CHECKING:
    from torch import Tensor, nn


@dataclass(frozen=True)
class MethodContext:
    """What a method may depend on besides its hyperparameters."""

    num_classes: int
    lr: float = 0.01  # client learning rate (SCAFFOLD's c_i update, q-FFL's Lipschitz estimate 1/lr)
    momentum: float = 0.0  # client SGD momentum (FedNova's effective step count)
    num_clients: int = 1  # N, all clients (SCAFFOLD moves c by |S|/N)
    mean_client_size: float = 0.0  # mean training samples over all clients (FedDyn's adaptive alpha); 0: unknown
    lr_schedule: str = "constant"  # optimizer.schedule.kind: whether `lr` holds in every round


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
    # Client batching (engine/batched.py): attributes holding this client's tensors that `loss` or the gradient
    # hooks read during the round (set in on_round_start); a batch of clients stacks them along a first dimension.
    per_client: tuple[str, ...] = ()
    batchable: bool = True  # False: this hook cannot run on stacked clients (its method trains one at a time)
    # False: this hook cannot run under local DP-SGD (privacy.mechanism: local): its loss couples a batch's samples,
    # so it has no per-sample value to clip, or it reports statistics of the client's data that no noise covers
    per_sample: bool = True
    # attributes that hold nothing the next round reads (set afresh each round): the state check skips them
    transient: tuple[str, ...] = ()

    def on_round_start(self, ctx: ClientContext) -> None:
        """After the global weights are loaded, before the optimiser is built (so it may freeze parameters)."""

    def after_backward(self, ctx: ClientContext) -> None:
        """After loss.backward(), before optimizer.step(): may edit gradients."""

    def after_backward_batched(self, hooks: Sequence[ClientHook], grads: Mapping[str, Tensor]) -> None:
        """`after_backward` for stacked clients: `hooks[k]` is client k's instance, `grads[name][k]` its gradient
        (edit in place; rows of clients that sit the step out are ignored). Needed by a hook that edits gradients."""

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

    `aggregate` gets the updates sorted by client id, so float sums never depend on arrival order. Whatever a later
    round depends on is returned by `state_dict` and restored by `load_state_dict` (a resumed trial builds the
    aggregator afresh); attributes `aggregate` sets that no later round reads are named in `transient`.
    """

    transient: tuple[str, ...] = ()  # e.g. ("last_norm",): the last aggregation's diagnostics, read by `metrics`

    def aggregate(self, global_weights: Weights, updates: Sequence[ClientUpdate]) -> Weights:
        raise NotImplementedError

    def payload(self) -> dict[str, Any]:
        """Broadcast to every client with the weights (by hook name), e.g. SCAFFOLD's server control variate."""
        return {}

    def metrics(self) -> dict[str, float]:
        """Scalar diagnostics of the last aggregation, logged with the round (FedDyn's ||D/M||, FedOpt's step sizes,
        FedPAC's classifier mix). Read right after `aggregate`."""
        return {}

    def extra_models(self) -> dict[str, Weights]:
        """Models the round driver scores besides the global one, by name (FedDyn's `avg`): each is logged as
        `<name>_val_acc`, `<name>_val_loss`, `<name>_test_acc`, `<name>_test_loss`. Clients never train from them."""
        return {}

    def client_states(self) -> dict[int, dict[str, Any]]:
        """After `aggregate`: per-client state the server sets (FedPAC's mixed classifiers), by client id, then
        by hook name. The round driver merges it over what those clients' hooks kept."""
        return {}

    def state_dict(self) -> dict[str, Any]:
        """Everything later rounds depend on, for the trial checkpoint: numpy arrays, numbers, strings, lists and
        dicts of them (no tensors: engine/checkpoint.py stores only these)."""
        return {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what `state_dict` returned, into a freshly built aggregator (a resumed trial's)."""


class Stateless(ServerAggregator):
    """A pure function (global weights, updates) -> new global weights, e.g. FedAvg: no server state to keep."""

    def __init__(self, function: Callable[[Weights, Sequence[ClientUpdate]], Weights]) -> None:
        self.function = function

    def aggregate(self, global_weights: Weights, updates: Sequence[ClientUpdate]) -> Weights:
        return self.function(global_weights, updates)


PHASE_PARTS = ("all", "classifier", "body")


@dataclass(frozen=True)
class Phase:
    """One part of a client's local round: which parameters train, for how long, at which rate.

    Most methods have one phase, the whole model for the run's epochs. FedPAC has two: the classifier alone
    (body frozen, its BatchNorm in eval mode so its running statistics stay), then the body alone with its term.
    `model.classifier` is the classifier in every registered model; the body is everything else.
    """

    trains: str = "all"  # one of PHASE_PARTS
    epochs: int | None = None  # None: the run's local epochs (and a system-heterogeneity step budget applies)
    lr: float | None = None  # None: the run's client learning rate
    terms: bool = True  # add the method's local terms to the cross-entropy in this phase
    body_eval: bool = False  # the body's BatchNorm in eval mode (use, do not update, its running statistics)

    def __post_init__(self) -> None:
        if self.trains not in PHASE_PARTS:
            raise ValueError(f"phase trains {self.trains!r}: must be one of {', '.join(PHASE_PARTS)}")


@dataclass(frozen=True)
class Finetune:
    """Personalisation at evaluation: before a client's held-out samples are scored, the model it uses trains on its
    own training samples for `steps` SGD steps, or `epochs` passes (exactly one of them positive), at the run's
    learning rate, plain cross-entropy, `trains` the part that trains. FedBABU's fine-tuning; any method's under the
    config's `personalise.finetune_steps`. The fine-tuned model is scored and dropped: training never sees it."""

    steps: int = 0
    epochs: int = 0
    trains: str = "all"  # one of PHASE_PARTS

    def __post_init__(self) -> None:
        if (self.steps > 0) == (self.epochs > 0) or min(self.steps, self.epochs) < 0:
            raise ValueError(f"fine-tuning takes steps or epochs, one positive (got {self.steps}, {self.epochs})")
        if self.trains not in PHASE_PARTS:
            raise ValueError(f"fine-tuning trains {self.trains!r}: must be one of {', '.join(PHASE_PARTS)}")


@dataclass(frozen=True)
class Method:
    """What one trial runs: the local loss terms (besides cross-entropy), the client hooks, and the server rule."""

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
    phases: tuple[Phase, ...] = (Phase(),)  # the local round's parts, in order
    # personalisation at evaluation (FedBABU): each client's model fine-tuned on its own samples before it is scored
    finetune: Finetune | None = None

    def __post_init__(self) -> None:
        names = [hook.name for hook in self.all_hooks]
        if len(names) != len(set(names)):
            raise ValueError(f"method {self.name!r}: hook names must be unique, got {names}")

    @property
    def all_hooks(self) -> tuple[ClientHook, ...]:
        return (*self.terms, *self.hooks)

    def aggregate(self, global_weights: Weights, updates: Sequence[ClientUpdate]) -> Weights:
        return self.aggregator.aggregate(global_weights, sorted(updates, key=lambda u: u.client_id))


_TYPE_WORDS = {float: "a number", int: "an integer", str: "a string", bool: "true or false"}

PAPER_OR_OFFICIAL = ("paper", "official")  # `fidelity`: follow the paper or the official code where they differ
OFFICIAL_OR_PAPER = ("official", "paper")  # `form`: the official code's scale first (the default)

T = TypeVar("T")


def _number(value: Any) -> str:
    return repr(int(value)) if isinstance(value, float) and value.is_integer() else repr(value)


@dataclass(frozen=True)
class Param(Generic[T]):
    """One hyperparameter: its name, type, default, allowed values and a one-line meaning.

    Bounds: `ge`/`gt` below, `le`/`lt` above (closed or open ends). `choices`: the only values allowed.
    `special`: named values allowed besides numbers (FedUV's sigma "median"). A default of None means
    "derived from the data" (the spec's `derived` says how); None is then accepted as a value too.

    Declared once, at module level in the method's module, and read back through the declaration, never through
    its name as a string: `MU = Param(float, 0.01, "proximal weight", name="mu", ge=0)`, then `MU.of(params)`.
    """

    type: type[T]  # float, int, str or bool; a float parameter accepts ints too (YAML writes 1 for 1.0)
    default: Any
    meaning: str = ""
    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None
    choices: tuple[Any, ...] | None = None
    special: tuple[str, ...] = ()
    name: str = field(default="", kw_only=True)  # the hyperparameter's name in search-space files and MLflow

    def of(self, params: Mapping[str, Any]) -> T:
        """This hyperparameter's value in resolved `params` (a float parameter's int as a float). A special value
        (sigma "median") and a derived default's None come back as they are."""
        value = params[self.name]
        if self.type is float and isinstance(value, int) and not isinstance(value, bool):
            return float(value)  # type: ignore[return-value]
        return value

    def get(self, params: Mapping[str, Any], fallback: Any) -> T:
        """`of`, or `fallback` where `params` lacks this hyperparameter (a method of a family that does not have
        it: FedAdagrad's beta2)."""
        return self.of(params) if self.name in params else fallback

    def allowed(self) -> str:
        """What the values may be, as an error message says it: "a number in [0, 1)", "one of 'a', 'b'"."""
        if self.choices is not None:
            return f"one of {', '.join(map(repr, self.choices))}"
        low = self.ge if self.ge is not None else self.gt
        high = self.le if self.le is not None else self.lt
        words = _TYPE_WORDS[self.type]
        if low is not None and high is not None:
            left, right = "[" if self.ge is not None else "(", "]" if self.le is not None else ")"
            words += f" in {left}{_number(low)}, {_number(high)}{right}"
        elif low is not None:
            words += f" {'>=' if self.ge is not None else '>'} {_number(low)}"
        elif high is not None:
            words += f" {'<=' if self.le is not None else '<'} {_number(high)}"
        return " or ".join([*map(repr, self.special), words])

    def accepts(self, value: Any) -> bool:
        if isinstance(value, str) and value in self.special:
            return True
        if self.type is bool or isinstance(value, bool):  # bool is an int subclass: keep them apart
            return self.type is bool and isinstance(value, bool)
        if not isinstance(value, (int, float) if self.type is float else self.type):
            return False
        if self.choices is not None:
            return value in self.choices
        if isinstance(value, float) and not math.isfinite(value):
            return False
        return self._within_bounds(value)

    def _within_bounds(self, value: Any) -> bool:
        """Inside ge/gt/le/lt (the value has this parameter's type; only a number's parameter has bounds)."""
        return not (
            (self.ge is not None and value < self.ge)
            or (self.gt is not None and value <= self.gt)
            or (self.le is not None and value > self.le)
            or (self.lt is not None and value >= self.lt)
        )

    def check(self, name: str, value: Any) -> None:
        """Refuse a value this parameter does not allow; the message names the parameter and what is allowed."""
        if self.accepts(value):
            return
        allowed = self.allowed()
        if isinstance(value, float) and not math.isfinite(value):
            allowed = allowed.replace("a number", "a finite number", 1)
        raise ValueError(f"{name}: must be {allowed} (got {value!r})")


def hyperparameters(*params: Param) -> dict[str, Param]:
    """A spec's hyperparameters by their declared names, in declaration order (the order errors list them in)."""
    named: dict[str, Param] = {}
    for param in params:
        if not param.name or param.name in named:
            raise ValueError(f"hyperparameter names must be given and unique; got {[p.name for p in params]}")
        named[param.name] = param
    return named


@dataclass(frozen=True)
class MethodSpec:
    """A registered method: its typed hyperparameters, and how to build it."""

    name: str
    params: Mapping[str, Param]  # by name (`hyperparameters(...)`), each declared once: type, default, bounds, meaning
    # (resolved hyperparameters, context) -> Method: the method module's `build`, which imports its torch code
    build: Callable[[dict[str, Any], MethodContext], Method]
    summary: str = ""
    derived: Mapping[str, str] = field(default_factory=dict)  # e.g. {"lambda": "D/4"}: how a None default resolves
    # hyperparameters under which one round from a fresh state is FedAvg's (server side to 1e-5 relative: the
    # FedOpt trio declares a limit, tau = server_lr = 1e6); None: no such setting (Freeze never trains its
    # classifier; FedDyn's server step). The conformance suite checks it for every method.
    as_fedavg: Mapping[str, Any] | None = field(default_factory=dict)
    # why the method trains its clients one at a time even with resources.client_batch > 1 ("" = it vectorises;
    # tests/engine/test_client_batch.py checks this against the built method's hooks)
    sequential: str = ""
    # why the method cannot train under local DP-SGD, which clips each sample's gradient ("" = it can; the config
    # checks refuse the rest; tests/engine/test_dp_sgd.py checks this against the built method's hooks)
    per_sample: str = ""
    # asynchronous buffered aggregation (FedBuff): its built Method has a `buffer_size`, and a run has no round
    # deadline. Declared here so that the config checks know it without building the method (torch)
    asynchronous: bool = False
    # why its server cannot run under client-level DP, whose server sees only the noisy mean of the clipped client
    # deltas ("" = it reads nothing else: the conformance suite checks that the mean alone gives its round)
    central_privacy: str = ""
    # why the method runs only on an image model ("" = any model, text's too): the data checks refuse it on text
    image_model: str = ""
    # whether its clients use models of their own (Method.personalise or .finetune): True, False, or the bool
    # hyperparameter that decides it (FedPAC's `mix`). The config checks read it (tune.metric: personal_val_acc)
    personalises: bool | Param[bool] = False

    def __post_init__(self) -> None:
        wrong = [key for key, param in self.params.items() if param.name != key]
        if wrong:  # `Param.of` reads a value under the declared name
            raise ValueError(f"method {self.name!r}: hyperparameters {wrong} are not declared under their own names")

    def personalises_under(self, params: Mapping[str, Any]) -> bool:
        """Whether the method personalises under these hyperparameters (missing ones at their defaults)."""
        if isinstance(self.personalises, Param):
            return bool(self.personalises.of({**self.defaults, **params}))
        return self.personalises

    @property
    def defaults(self) -> dict[str, Any]:
        return {name: param.default for name, param in self.params.items()}

    def check_names(self, names: Iterable[str]) -> None:
        """Refuse names that are not hyperparameters of this method, listing the ones it has."""
        unknown = sorted(set(names) - set(self.params))
        if unknown:
            raise ValueError(
                f"method {self.name!r} has no hyperparameter {', '.join(unknown)}; "
                f"its hyperparameters: {', '.join(self.params) or '(none)'}"
            )

    def check(self, name: str, value: Any) -> None:
        """One hyperparameter's value: a None is allowed only where the default is derived from the data."""
        self.check_names([name])
        if value is None and name in self.derived:
            return
        self.params[name].check(name, value)

    def resolve(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """Every hyperparameter: the given values checked (names, types, bounds), the defaults for the rest."""
        self.check_names(params)
        for name, value in params.items():
            self.check(name, value)
        return {**self.defaults, **params}

    def describe(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """Hyperparameters for display: derived defaults shown as their rule instead of None."""
        return {k: self.derived.get(k, v) if v is None else v for k, v in {**self.defaults, **params}.items()}


def active(terms: Sequence[LocalTerm]) -> tuple[LocalTerm, ...]:
    """The terms with a non-zero weight: a switched-off term is not computed at all."""
    return tuple(term for term in terms if term.weight != 0.0)
