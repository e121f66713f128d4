"""A method checked the way a trial uses it: built, trained two rounds with its state carried through a checkpoint,
and trained with stacked clients (client_batch). `raytune_fl.testing.check_method` runs all of it (a method
author's test, the conformance suite); the commands run `check_plugin_methods` on every plugin method of a space
before Ray starts, and refuse one whose state would not survive a resume.

The contract (docs/how-to/own-method.md#state-across-a-resume): whatever a later round depends on is either in
the aggregator's `state_dict()` (numpy arrays, numbers, strings, lists and dicts of them), restored by its
`load_state_dict()`, or, for a client, in `ctx.new_state[hook.name]` (the server keeps it with the client's id).
Attributes that carry nothing into the next round (the last aggregation's diagnostics) are named in the
aggregator's or hook's `transient`. A trial resumes in a new process with a freshly built method and fresh
workers: anything else is lost there, so it must be lost here too.

How it is detected, so that it is hard to fool: two runs of two rounds from the same start, one uninterrupted and
one whose round 2 runs on a freshly built method and fresh workers after the state went through the checkpoint
code (engine/checkpoint.py). Every payload, client update, aggregated model and server output of both rounds must
be equal bit for bit (round 1 too: state kept outside the method object, in a module global or a class
attribute, makes a second fresh build differ), and so must every attribute of the aggregator and of the client
hooks after round 2 (a counter that would only matter at round 5 is caught now).
"""

from __future__ import annotations

import dataclasses
import inspect
import tempfile
import types
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from raytune_fl.config import ConfigError, ExperimentConfig
from raytune_fl.data import ArrayDataset, load_dataset
from raytune_fl.engine.checkpoint import STATE_FILE, load_state, save_state
from raytune_fl.engine.data import FederatedData
from raytune_fl.engine.federation import Federation
from raytune_fl.engine.local import LocalSettings
from raytune_fl.engine.pool import ClientPool, InProcessPool, TrainJob
from raytune_fl.engine.worker import ClientWorker, ModelSpec, WorkerSpec
from raytune_fl.methods import METHODS, Method, MethodSpec
from raytune_fl.methods.base import MethodContext
from raytune_fl.metrics import ROUND
from raytune_fl.plugins import error_location
from raytune_fl.testing import MethodCheckError
from raytune_fl.types import ClientUpdate, Weights
from raytune_fl.weights import read_weights

if TYPE_CHECKING:
    from raytune_fl.config import SearchSpace

CONTRACT = "docs/how-to/own-method.md#state-across-a-resume"
ClientData = tuple[np.ndarray, np.ndarray, list[np.ndarray]]  # x_train, y_train, each client's indices


# ------------------------------------------------------------------------------------------------ the method


def method_spec(method: str | MethodSpec) -> MethodSpec:
    """The registered spec of `method` (a name, or a spec that must be the one registered under its name: the
    engine builds a method by name)."""
    if isinstance(method, str):
        return METHODS.get(method)
    if not isinstance(method, MethodSpec):
        raise TypeError(f"check_method takes a method name or a MethodSpec, not {type(method).__name__}")
    if method.name not in METHODS or METHODS.get(method.name) is not method:
        raise MethodCheckError(
            f"method {method.name!r} is not registered: call register_method(SPEC) (raytune_fl.register_method) "
            "before checking it; trials build a method by its registered name"
        )
    return method


def defined_at(spec: MethodSpec) -> str:
    """Where `spec`'s build is defined, as file:line ("" where unknown)."""
    try:
        function = inspect.unwrap(spec.build)
        return f"{Path(inspect.getsourcefile(function) or '?').name}:{inspect.getsourcelines(function)[1]}"
    except (TypeError, OSError):
        return ""


def _named(spec: MethodSpec) -> str:
    where = defined_at(spec)
    return f"method {spec.name!r}" + (f" ({where})" if where else "")


def build_checked(spec: MethodSpec, params: Mapping[str, Any], context: MethodContext) -> Method:
    """`spec.build` on resolved `params`; a MethodCheckError naming the method and the line that raised."""
    try:
        resolved = spec.resolve(params)
    except ValueError as error:
        raise MethodCheckError(f"method {spec.name!r}: {error}") from None
    try:
        method = spec.build(resolved, context)
    except Exception as error:  # the author's code may raise anything
        where = error_location(error) or defined_at(spec)
        raise MethodCheckError(
            f"method {spec.name!r}: build() raised {type(error).__name__}: {_first_line(error)}"
            + (f" ({where})" if where else "")
        ) from error
    if not isinstance(method, Method):
        raise MethodCheckError(f"{_named(spec)}: build() must return a Method, not {type(method).__name__}")
    return method


def _first_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return lines[0] if lines else ""


# ------------------------------------------------------------------------------------------------ two rounds


@dataclass
class Trace:
    """What two rounds produced, round by round, and the objects that hold the method's state at the end."""

    rounds: list[dict[str, Any]] = field(default_factory=list)
    aggregator: Any = None
    hooks: tuple[Any, ...] = ()


def two_rounds(spec: WorkerSpec, data: ClientData, checkpoint: Path | None = None) -> Trace:
    """Rounds 1 and 2 of every client through the in-process pool (its client batching), from the seed-0 model.
    `checkpoint`: a folder; round 2 then runs as a resumed trial does, on a freshly built method and fresh workers,
    from the weights, client states and aggregator state written after round 1 by the checkpoint code."""
    x, y, parts = data
    context = spec.method_context(len(parts), float(np.mean([len(p) for p in parts])))
    server = build_method_for(spec.method, spec.method_params, context)
    torch.manual_seed(0)
    weights: Weights = read_weights(spec.model.build())
    worker = ClientWorker(spec, x, y, parts)
    pool: ClientPool = InProcessPool(worker)
    states: dict[int, Any] = {}
    trace = Trace()
    for round_index in (1, 2):
        if checkpoint is not None and round_index == 2:
            server, states, weights = _through_checkpoint(spec, context, server, states, weights, checkpoint)
            worker = ClientWorker(spec, x, y, parts)
            pool = InProcessPool(worker)
        payload = server.aggregator.payload()
        jobs = [TrainJob(c, round_index, weights, payload, states.get(c), None) for c in range(len(parts))]
        tickets = pool.submit_all(jobs)
        outcomes = pool.collect(tickets)
        updates: list[ClientUpdate] = [outcomes[t] for t in tickets]  # type: ignore[misc]
        for update in updates:
            if update.state is not None:
                states[update.client_id] = update.state
        weights = server.aggregate(weights, updates)
        server_states = server.aggregator.client_states()
        for client_id, state in server_states.items():  # as the round driver merges them (FedPAC's classifiers)
            states[client_id] = {**(states.get(client_id) or {}), **state}
        trace.rounds.append(_round_record(server, payload, updates, weights, server_states))
    trace.aggregator = server.aggregator
    trace.hooks = worker.method.all_hooks
    return trace


def _through_checkpoint(
    spec: WorkerSpec,
    context: MethodContext,
    server: Method,
    states: dict[int, Any],
    weights: Weights,
    checkpoint: Path,
) -> tuple[Method, dict[int, Any], Weights]:
    """What a resumed trial starts round 2 from: the state after round 1 written and read back by the checkpoint
    code, and a freshly built method that loads its aggregator's part."""
    state = {"aggregator": server.aggregator.state_dict(), "states": states, "weights": weights}
    try:
        save_state(state, checkpoint)
    except TypeError as error:  # engine/checkpoint.py: what it cannot store
        raise MethodCheckError(
            f"{_named(METHODS.get(spec.method))}: its state cannot go into a trial checkpoint: {error} "
            "(aggregator.state_dict() and ctx.new_state hold numpy arrays, numbers, strings, lists and "
            f"dicts; {CONTRACT})"
        ) from None
    saved = load_state(checkpoint)
    server = build_method_for(spec.method, spec.method_params, context)
    server.aggregator.load_state_dict(saved["aggregator"])
    return server, dict(saved["states"]), dict(saved["weights"])


def _round_record(
    server: Method, payload: Any, updates: list[ClientUpdate], weights: Weights, server_states: Any
) -> dict[str, Any]:
    """Everything a round produced that a later round, or a resume, could depend on: compared bit for bit."""
    return {
        "aggregator's payload()": payload,
        "updates": [
            {
                "client": u.client_id,
                "steps": u.num_steps,
                "metrics": u.metrics,
                "delta": u.delta,
                "buffers": u.buffers,
                "state": u.state,
                "extras": u.extras,
            }
            for u in updates
        ],
        "weights": weights,
        "aggregator's metrics()": server.aggregator.metrics(),
        "aggregator's client_states()": server_states,
        "aggregator's extra_models()": server.aggregator.extra_models(),
    }


def build_method_for(name: str, params: Mapping[str, Any], context: MethodContext) -> Method:
    return build_checked(METHODS.get(name), params, context)


# ------------------------------------------------------------------------------------------------ comparisons


def fingerprint(value: Any, _path: tuple[int, ...] = ()) -> Any:
    """A comparable, exact form of `value`: arrays and tensors by dtype, shape and bytes, floats by repr (a NaN
    equals itself), objects by their class and attributes, functions by name and closure; nothing compared by
    identity, so two separately built objects in the same state have the same fingerprint."""
    if value is None or isinstance(value, (bool, int, str, bytes)):
        return value
    if isinstance(value, float):
        return ("float", repr(value))
    if isinstance(value, np.generic):
        return fingerprint(value.item())
    if isinstance(value, np.ndarray):
        return ("array", value.dtype.str, value.shape, np.ascontiguousarray(value).tobytes())
    if isinstance(value, torch.Tensor):
        t = value.detach().to("cpu").contiguous()
        return ("tensor", str(t.dtype), tuple(t.shape), t.reshape(-1).view(torch.uint8).numpy().tobytes())
    if isinstance(value, torch.Generator):
        return ("torch generator", value.get_state().numpy().tobytes())
    if isinstance(value, np.random.Generator):
        return ("numpy generator", repr(value.bit_generator.state))
    if isinstance(value, (types.ModuleType, type, types.BuiltinFunctionType)):
        return ("named", getattr(value, "__qualname__", getattr(value, "__name__", "?")))
    if id(value) in _path:
        return ("cycle", type(value).__qualname__)
    path = (*_path, id(value))
    if isinstance(value, types.FunctionType):  # state in a closure counts as state
        cells = tuple(fingerprint(_cell(c), path) for c in value.__closure__ or ())
        return ("function", value.__qualname__, cells, fingerprint(value.__defaults__, path))
    if isinstance(value, types.MethodType):
        return ("method", value.__func__.__qualname__, fingerprint(value.__self__, path))
    if isinstance(value, torch.nn.Module):
        return ("module", type(value).__qualname__, fingerprint(value.state_dict(), path), _attributes(value, path))
    if isinstance(value, Mapping):
        return ("mapping", tuple(sorted((repr(k), fingerprint(v, path)) for k, v in value.items())))
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, tuple(fingerprint(v, path) for v in value))
    if isinstance(value, (set, frozenset)):
        return ("set", tuple(sorted(map(repr, value))))
    if hasattr(value, "__dict__") or hasattr(type(value), "__slots__"):
        return ("object", type(value).__qualname__, _attributes(value, path))
    return ("opaque", type(value).__qualname__)


def _cell(cell: Any) -> Any:
    try:
        return cell.cell_contents
    except ValueError:  # an empty cell
        return None


def _attributes(value: Any, path: tuple[int, ...]) -> tuple:
    names = attribute_names(value)
    if isinstance(value, torch.nn.Module):  # its parameters and buffers are in state_dict; its submodules too
        names = [n for n in names if n not in ("_parameters", "_buffers", "_modules")]
    return tuple((name, fingerprint(getattr(value, name, None), path)) for name in names)


def attribute_names(value: Any) -> list[str]:
    slots = [s for cls in type(value).__mro__ for s in getattr(cls, "__slots__", ()) if isinstance(s, str)]
    return sorted({*getattr(value, "__dict__", {}), *(s for s in slots if hasattr(value, s))} - {"__dict__"})


def changed_attributes(ours: Any, theirs: Any) -> list[str]:
    """The attributes (`Class.name`) in which two objects of one class differ, but those the class calls
    `transient` (they carry nothing into the next round)."""
    transient = set(getattr(ours, "transient", ()))
    names = sorted(set(attribute_names(ours)) | set(attribute_names(theirs)))
    return [
        f"{type(ours).__name__}.{name}"
        for name in names
        if name not in transient and fingerprint(getattr(ours, name, None)) != fingerprint(getattr(theirs, name, None))
    ]


def first_difference(straight: Trace, resumed: Trace) -> str:
    """The first output of the two runs that differs, in words ("" when they agree)."""
    for index, (a, b) in enumerate(zip(straight.rounds, resumed.rounds), 1):
        for key in a:
            if key == "updates":
                for ua, ub in zip(a[key], b[key]):
                    for part in ua:
                        if fingerprint(ua[part]) != fingerprint(ub[part]):
                            return f"round {index}: client {ua['client']}'s update ({part})"
            elif fingerprint(a[key]) != fingerprint(b[key]):
                return f"round {index}: the {key}" if key != "weights" else f"round {index}: the aggregated model"
    return ""


# ------------------------------------------------------------------------------------------------ the checks


def check_state(spec: WorkerSpec, data: ClientData) -> None:
    """The method's state survives a checkpoint: two rounds uninterrupted equal two rounds resumed after round 1,
    bit for bit, and so do the aggregator's and the hooks' attributes after them (MethodCheckError otherwise)."""
    straight = two_rounds(spec, data)
    with tempfile.TemporaryDirectory(prefix="method-check-") as folder:
        resumed = two_rounds(spec, data, Path(folder))
    differs = first_difference(straight, resumed)
    server = changed_attributes(straight.aggregator, resumed.aggregator)
    client = [name for ours, theirs in zip(straight.hooks, resumed.hooks) for name in changed_attributes(ours, theirs)]
    if not (differs or server or client):
        return
    method = METHODS.get(spec.method)
    lines = [f"{_named(method)}: its state does not survive a resume from a checkpoint"]
    if differs:
        lines.append(f"  {differs} differs between an uninterrupted run and one resumed after round 1")
    if server:
        them = "them" if len(server) > 1 else "it"
        lines.append(
            f"  server: {', '.join(server)} changed by aggregation and not restored by load_state_dict(): return "
            f"{them} from the aggregator's state_dict() and set {them} in load_state_dict() (numpy arrays and "
            f"numbers), or name {them} in the aggregator's `transient` if no later round reads {them}"
        )
    if client:
        lines.append(
            f"  client: {', '.join(client)} kept on the hook between rounds, which a resumed trial's fresh workers "
            "do not have: a client's state goes to ctx.new_state[self.name] in on_round_end and comes back as "
            "ctx.state[self.name]; set per-round attributes afresh in on_round_start (or name them in the hook's "
            "`transient`)"
        )
    if differs and not (server or client):
        lines.append(
            "  no attribute of the aggregator or hooks explains it: state kept outside them (a module-level "
            "variable, a class attribute) is lost when a trial restarts; keep it in state_dict() or ctx.new_state"
        )
    lines.append(f"  (the contract: {CONTRACT})")
    raise MethodCheckError("\n".join(lines))


def close(a: Any, b: Any, where: str = "", rtol: float = 1e-7, atol: float = 1e-9) -> None:
    """Equal to `rtol` relative (numbers, arrays, and containers of them); a MethodCheckError names where not."""
    if isinstance(a, Mapping):
        if set(a) != set(b):
            raise MethodCheckError(f"{where}: keys {sorted(map(str, a))} against {sorted(map(str, b))}")
        for key in a:
            close(a[key], b[key], f"{where}.{key}", rtol, atol)
    elif isinstance(a, (list, tuple)):
        if len(a) != len(b):
            raise MethodCheckError(f"{where}: {len(a)} items against {len(b)}")
        for i, (x, y) in enumerate(zip(a, b)):
            close(x, y, f"{where}[{i}]", rtol, atol)
    elif isinstance(a, (int, float, np.ndarray, np.generic)) and not isinstance(a, bool):
        try:
            np.testing.assert_allclose(np.asarray(b, dtype=float), np.asarray(a, dtype=float), rtol=rtol, atol=atol)
        except AssertionError as error:
            raise MethodCheckError(f"{where}: {_first_line(error) or 'not equal'}{_mismatch(error)}") from None
    elif dataclasses.is_dataclass(a) and not isinstance(a, type):
        close(dataclasses.asdict(a), dataclasses.asdict(b), where, rtol, atol)
    elif fingerprint(a) != fingerprint(b):
        raise MethodCheckError(f"{where}: {_short(a)} against {_short(b)}")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _mismatch(error: AssertionError) -> str:
    found = [line.strip() for line in str(error).splitlines() if line.strip().startswith("Max relative")]
    return f" ({found[0]})" if found else ""


@dataclass(frozen=True)
class Float64Model(ModelSpec):
    """The registered model in float64 (weights still travel as float32 numpy, as always): batched and sequential
    kernels sum in other orders, so a float32 comparison would part on rounding; in float64 it cannot."""

    def build(self) -> torch.nn.Module:
        return super().build().double()

    def images(self, x: torch.Tensor) -> torch.Tensor:
        return super().images(x).double()


def check_client_batch(spec: WorkerSpec, data: ClientData, batch: int) -> None:
    """Clients trained `batch` at a time (resources.client_batch) equal the sequential engine to 1e-9 relative in
    float64, through a checkpoint between the rounds. Skipped (nothing to check) for a method that declares it
    trains its clients one at a time (`MethodSpec.sequential`)."""
    method = METHODS.get(spec.method)
    if method.sequential:
        return
    model = spec.model if isinstance(spec.model, Float64Model) else Float64Model(*_model_fields(spec.model))
    one = replace(spec, model=model, client_batch=1)
    sequential = two_rounds(one, data)
    with tempfile.TemporaryDirectory(prefix="method-check-") as folder:
        batched = two_rounds(replace(one, client_batch=batch), data, Path(folder))
    try:
        for index, (a, b) in enumerate(zip(sequential.rounds, batched.rounds), 1):
            close(a, b, f"round {index}")
    except MethodCheckError as error:
        raise MethodCheckError(
            f"{_named(method)}: clients trained {batch} at a time (resources.client_batch) differ from the same "
            f"clients trained one at a time: {error}. A hook's tensors that `loss` reads must be named in "
            "`per_client`, a hook that edits gradients needs after_backward_batched, or the spec says why the "
            "method cannot batch: MethodSpec(..., sequential='why')"
        ) from None


def _model_fields(model: ModelSpec) -> tuple:
    return (model.name, model.in_channels, model.num_classes, model.image_size, False)


# ------------------------------------------------------------------------------------------------ check_method


def tiny_data(
    shape: tuple[int, int, int] = (1, 8, 8), classes: int = 10, sizes: Sequence[int] = (30, 40, 20)
) -> tuple[ArrayDataset, FederatedData]:
    """Synthetic images (data/synthetic.py) over clients of `sizes` training samples (client 0 sees three classes
    only: label skew) and 8 validation samples each."""
    val = 8
    total = sum(sizes) + val * len(sizes)
    options = {"shape": shape, "classes": classes, "samples": total, "test_samples": max(30, classes)}
    dataset = load_dataset("synthetic", options=options)
    order = np.random.default_rng(0).permutation(total)
    skewed = np.flatnonzero(dataset.y_train < 3)
    first = skewed[: sizes[0]] if len(skewed) >= sizes[0] else order[: sizes[0]]
    rest = np.setdiff1d(order, first, assume_unique=True)
    rest = rest[np.random.default_rng(1).permutation(len(rest))]
    train, at = [np.sort(first)], 0
    for size in sizes[1:]:
        train.append(np.sort(rest[at : at + size]))
        at += size
    leftover = rest[at:]
    vals = [np.sort(leftover[i * val : (i + 1) * val]) for i in range(len(sizes))]
    return dataset, FederatedData(dataset, train, vals)


SETTINGS = LocalSettings(epochs=1, batch_size=16, lr=0.05, momentum=0.9, weight_decay=1e-4)


def check_method(
    method: str | MethodSpec,
    params: Mapping[str, Any] | None = None,
    *,
    model: str = "simple_cnn",
    shape: tuple[int, int, int] = (1, 8, 8),
    classes: int = 10,
    client_batch: int = 3,
) -> None:
    """See raytune_fl.testing.check_method."""
    spec = method_spec(method)
    params = dict(params or {})
    dataset, data = tiny_data(shape, classes)
    model_spec = ModelSpec(model, dataset.in_channels, dataset.num_classes, dataset.image_size)
    worker = WorkerSpec(model_spec, spec.name, params, SETTINGS, seed=0)
    client_data: ClientData = (dataset.x_train, dataset.y_train, data.train_parts)
    sizes = [len(p) for p in data.train_parts]
    build_checked(spec, params, worker.method_context(len(sizes), float(np.mean(sizes))))
    check_state(worker, client_data)
    check_resumed_federation(spec, params, model, dataset, data)
    if client_batch > 1:
        check_client_batch(worker, client_data, client_batch)


def straight_and_resumed(
    experiment: ExperimentConfig,
    method: str,
    params: Mapping[str, Any],
    directory: Path,
    checkpoint_after: int = 1,
    data: FederatedData | None = None,
) -> tuple[list[Any], list[Any], Federation]:
    """(every round's report of an uninterrupted run that wrote its checkpoint after round `checkpoint_after` into
    `directory`, the reports of the rounds after it from a new federation resumed from that checkpoint on disk, the
    resumed federation): a trial restarted from its checkpoint, in process. Writing a checkpoint only reads the
    state (engine/checkpoint.py copies it), so the first run goes on as an uninterrupted one."""
    straight: list[Any] = []
    federation = Federation(experiment, method, dict(params), data=data)

    def keep(report: Any) -> None:
        straight.append(report)
        if report[ROUND] == checkpoint_after:
            save_state(federation.state_dict(), directory)

    federation.run(keep)
    if not (directory / STATE_FILE).exists():
        raise MethodCheckError(f"the run ended before round {checkpoint_after}: nothing to resume from")
    resumed = Federation(experiment, method, dict(params), data=data)
    resumed.load_state_dict(load_state(directory))
    rest: list[Any] = []
    resumed.run(rest.append)
    return straight, rest, resumed


def untimed(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Round metrics without wall times (`*_s`): what must repeat exactly."""
    return [{k: v for k, v in dict(row).items() if not k.endswith("_s")} for row in rows]


def check_resumed_federation(
    spec: MethodSpec, params: Mapping[str, Any], model: str, dataset: ArrayDataset, data: FederatedData
) -> None:
    """Two rounds of the round driver (engine/federation.py) uninterrupted against round 2 of a federation resumed
    from the checkpoint written after round 1: round 2's metrics equal (wall times aside)."""
    synthetic = {"shape": dataset.x_train.shape[1:], "classes": dataset.num_classes, "samples": len(dataset.y_train),
                 "test_samples": len(dataset.y_test)}  # fmt: skip
    experiment = ExperimentConfig.model_validate(
        {
            "dataset": "synthetic",
            "synthetic": synthetic,
            "model": model,
            "rounds": 2,
            "batch_size": SETTINGS.batch_size,
            "optimizer": {"lr": SETTINGS.lr, "momentum": SETTINGS.momentum, "weight_decay": SETTINGS.weight_decay},
            "resources": {"actors": 0},
            "diagnostics": {"every": 0},
        }
    )
    with tempfile.TemporaryDirectory(prefix="method-check-") as folder:
        straight, rest, _ = straight_and_resumed(experiment, spec.name, params, Path(folder), data=data)
    if len(rest) != len(straight) - 1:
        raise MethodCheckError(f"{_named(spec)}: resumed after round 1 of 2, it reported {len(rest)} rounds, not 1")
    for index, (a, b) in enumerate(zip(untimed(straight[1:]), untimed(rest)), 2):
        for key in sorted(set(a) | set(b)):
            if fingerprint(a.get(key)) != fingerprint(b.get(key)):
                ours, theirs = _short(a.get(key)), _short(b.get(key))
                raise MethodCheckError(
                    f"{_named(spec)}: round {index}'s {key} is {ours} uninterrupted but {theirs} "
                    f"after a resume from round 1's checkpoint: its state does not survive a resume ({CONTRACT})"
                )


# ------------------------------------------------------------------------------------------------ before Ray starts


def check_plugin_methods(space: SearchSpace, variants: Sequence[str]) -> None:
    """Every plugin method the chosen `variants` use, built and run two tiny rounds (a few samples of the space's
    own data on its own model, the variant's fixed hyperparameters) before Ray starts: a build that raises, or
    state that would not survive a trial's resume, is a ConfigError naming `variants.<name>.method`. Built-in
    methods are checked by the test suite, not here. Data or a model that cannot be loaded is left to the data
    check, which names their fields."""
    user = set(METHODS.user_names())
    chosen = [(name, space.variants[name]) for name in variants if space.variants[name].method in user]
    if not chosen:
        return
    base = space.base
    try:
        dataset = load_dataset(base.dataset, root=base.root, options=base.dataset_settings)
        channels, size = dataset.model_inputs
        model = ModelSpec(base.model, channels, dataset.num_classes, size, text=dataset.is_text)
        model.build()
    except Exception:  # said by check_data, against base.dataset, base.root or base.model
        return
    per_client, clients = 8, 3
    if len(dataset.y_train) < per_client * clients:
        return
    picked = np.random.default_rng(0).permutation(len(dataset.y_train))[: per_client * clients]
    data: ClientData = (dataset.x_train, dataset.y_train, np.split(np.sort(picked), clients))
    local_statistics = base.batchnorm.aggregate == "local"  # as the trial's workers keep them
    for name, variant in chosen:
        opt = variant.optimizer or base.optimizer
        local = LocalSettings(1, 4, opt.lr, opt.momentum, opt.weight_decay)  # two steps a client and round
        worker = WorkerSpec(
            model, variant.method, dict(variant.fixed), local, seed=base.seed, local_statistics=local_statistics
        )
        try:
            check_state(worker, data)
        except MethodCheckError as error:
            raise ConfigError(f"variants.{name}.method: {error}") from None
        except Exception as error:  # the method's hooks or aggregator failed on two tiny rounds
            where = error_location(error) or defined_at(METHODS.get(variant.method))
            raise ConfigError(
                f"variants.{name}.method: method {variant.method!r} failed in two tiny rounds before Ray starts: "
                f"{type(error).__name__}: {_first_line(error)}" + (f" ({where})" if where else "")
            ) from None
