"""raytune-fl: tune and ablate federated-learning methods on non-IID data with Ray Tune, Optuna and MLflow.

The public API for your own code (docs/how-to/plugins.md): the registration functions and the building blocks of a
method, importable from here. Loaded on first use, so that `import raytune_fl.<module>` costs no more than before.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS = {
    # registering your datasets, models and methods (from a plugin module)
    "register_dataset": "raytune_fl.register",
    "register_model": "raytune_fl.register",
    "register_method": "raytune_fl.register",
    # a method's building blocks (raytune_fl.methods.base explains each)
    "MethodSpec": "raytune_fl.methods.base",
    "Param": "raytune_fl.methods.base",
    "hyperparameters": "raytune_fl.methods.base",
    "Method": "raytune_fl.methods.base",
    "MethodContext": "raytune_fl.methods.base",
    "LocalTerm": "raytune_fl.methods.base",
    "ClientHook": "raytune_fl.methods.base",
    "ClientContext": "raytune_fl.methods.base",
    "Batch": "raytune_fl.methods.base",
    "ServerAggregator": "raytune_fl.methods.base",
    "Stateless": "raytune_fl.methods.base",
    "active": "raytune_fl.methods.base",
    "fedavg": "raytune_fl.aggregators.fedavg",  # the server rules' pure functions, to build yours from
    "weighted_mean_delta": "raytune_fl.aggregators.fedavg",
    "apply_delta": "raytune_fl.aggregators.fedavg",
    "is_running_statistic": "raytune_fl.aggregators.fedavg",
    "ClientUpdate": "raytune_fl.types",
    "Weights": "raytune_fl.types",
    # what a dataset loader may return
    "ArrayDataset": "raytune_fl.data.datasets",
    "RaytuneFLError": "raytune_fl.errors",  # the base of every error the package raises
}

__all__ = [  # what _EXPORTS lists, written out for linters and tests/test_register.py's check
    "__version__",
    "register_dataset",
    "register_model",
    "register_method",
    "MethodSpec",
    "Param",
    "hyperparameters",
    "Method",
    "MethodContext",
    "LocalTerm",
    "ClientHook",
    "ClientContext",
    "Batch",
    "ServerAggregator",
    "Stateless",
    "active",
    "fedavg",
    "weighted_mean_delta",
    "apply_delta",
    "is_running_statistic",
    "ClientUpdate",
    "Weights",
    "ArrayDataset",
    "RaytuneFLError",
]

if TYPE_CHECKING:
    from raytune_fl.aggregators.fedavg import apply_delta, fedavg, is_running_statistic, weighted_mean_delta
    from raytune_fl.data.datasets import ArrayDataset
    from raytune_fl.errors import RaytuneFLError
    from raytune_fl.methods.base import (
        Batch,
        ClientContext,
        ClientHook,
        LocalTerm,
        Method,
        MethodContext,
        MethodSpec,
        Param,
        ServerAggregator,
        Stateless,
        active,
        hyperparameters,
    )
    from raytune_fl.register import register_dataset, register_method, register_model
    from raytune_fl.types import ClientUpdate, Weights


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'raytune_fl' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
