"""Registering your own datasets, models and methods, from a plugin module (raytune_fl.plugins says how a plugin is
named and how it reaches every Ray worker). A registered name is used in YAML like a built-in one: validated,
searched, logged to MLflow and shown in reports. A name that a built-in has is refused.

Light to import (no torch): a plugin that registers a method imports its torch code inside its `build`, as the
built-in methods do, so that validating a search space never imports torch.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from raytune_fl.methods.base import MethodSpec

if TYPE_CHECKING:
    from pydantic import BaseModel
    from torch import nn

    from raytune_fl.data.datasets import ArrayDataset

MODEL_ARGUMENTS = {"in_channels": 1, "num_classes": 10, "image_size": (28, 28)}  # how the engine calls a factory


def _origin(entry: Any) -> str:
    return f"{getattr(entry, '__module__', '?')}.{getattr(entry, '__qualname__', type(entry).__name__)}"


def register_model(name: str, factory: Callable[..., nn.Module]) -> Callable[..., nn.Module]:
    """`factory(in_channels, num_classes, image_size)` -> an `nn.Module` whose forward returns `(logits, z)` (z: the
    (batch, D) representation its `classifier`, an `nn.Linear(D, num_classes)`, reads). Checked when a model is
    built (raytune_fl.models.registry.check_model); the signature is checked here."""
    from raytune_fl.models.registry import MODELS

    _takes(f"register_model({name!r}, ...)", factory, MODEL_ARGUMENTS, "factory(in_channels, num_classes, image_size)")
    return MODELS.add(name, factory, _origin(factory))


def register_dataset(
    name: str, loader: Callable[..., ArrayDataset | Any], options: type[BaseModel] | None = None
) -> Callable[..., Any]:
    """`loader(root)` (or `loader(root, options)`) -> an `ArrayDataset`, or a mapping with `x_train`, `y_train`,
    `x_test`, `y_test` (images (N, C, H, W) or (N, H, W), labels 0..K-1; optional `num_classes`, `class_names`),
    checked when loaded. `root` is the experiment's `root`; `options` its `dataset_options`, validated by the pydantic
    model `options` where one is given (else the mapping as written)."""
    from raytune_fl.data.datasets import DATASET_OPTIONS, DATASETS

    takes_options = callable(loader) and "options" in _parameters(loader)
    arguments = {"root": None, "options": None} if takes_options or options is not None else {"root": None}
    _takes(f"register_dataset({name!r}, ...)", loader, arguments, "loader(root) or loader(root, options)")
    DATASETS.add(name, loader, _origin(loader))
    if options is not None:
        DATASET_OPTIONS[name] = options
    else:
        DATASET_OPTIONS.pop(name, None)
    return loader


def register_method(spec: MethodSpec) -> MethodSpec:
    """A method: its hyperparameters (`Param`s) and `build(params, context) -> Method` (local terms, client hooks,
    a server aggregator). Its hyperparameters are searched and logged like a built-in method's."""
    from raytune_fl.methods.registry import METHODS

    if not isinstance(spec, MethodSpec):
        raise TypeError(f"register_method takes a MethodSpec, not {type(spec).__name__}")
    _takes(f"register_method({spec.name!r}): build", spec.build, {}, "build(params, context)", positional=({}, None))
    return METHODS.add(spec.name, spec, _origin(spec.build))


def _parameters(function: Any) -> list[str]:
    try:
        return list(inspect.signature(function).parameters)
    except ValueError:  # no signature to read (a builtin)
        return []


def _takes(what: str, function: Any, arguments: dict[str, Any], expected: str, positional: tuple = ()) -> None:
    """Refuse a callable that cannot be called with `positional` and `arguments` (by keyword) as the engine will."""
    if not callable(function):
        raise TypeError(f"{what}: expected a callable {expected}, got {type(function).__name__}")
    try:
        inspect.signature(function).bind(*positional, **arguments)
    except TypeError as error:
        raise TypeError(f"{what}: must be callable as {expected}: {error}") from None
    except ValueError:  # no signature to read (a builtin): it is called and fails there if wrong
        pass
