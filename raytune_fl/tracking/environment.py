"""MLflow's own environment variables, read as MLflow reads them before Ray starts.

A value MLflow would refuse at its first use (MLFLOW_ENABLE_SYSTEM_METRICS_LOGGING=maybe raises inside a run, after
the cluster is up and the parent run is open) is a ConfigError that names the variable and the values it takes.

MLflow declares each variable once, with its type (mlflow/environment_variables.py); those declarations are the
reference, so a variable MLflow adds or retypes is checked as that version reads it. MLflow is imported only when an
MLFLOW_ variable is set.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

from raytune_fl.config import ConfigError

PREFIX = "MLFLOW_"
BOOLEANS = "true, false, 1 or 0 (any case)"  # MLflow's _BooleanEnvironmentVariable


def declared() -> Iterator[Any]:
    """MLflow's declared environment variables (each with .name, .type, .get())."""
    import mlflow.environment_variables as variables

    for value in vars(variables).values():
        if isinstance(getattr(value, "name", None), str) and callable(getattr(value, "get", None)):
            if hasattr(value, "type") and hasattr(value, "default"):
                yield value


def check_mlflow_environment() -> None:
    """Refuse, naming it first, a set MLFLOW_ variable whose value MLflow cannot read as its declared type."""
    if not any(name.startswith(PREFIX) for name in os.environ):
        return  # nothing to read: MLflow stays unimported
    for variable in declared():
        if variable.name not in os.environ:
            continue
        try:
            variable.get()
        except ValueError:
            raise ConfigError(_message(variable.name, os.environ[variable.name], variable.type)) from None


def _message(name: str, value: str, kind: type) -> str:
    if kind is bool:
        takes = BOOLEANS
    elif kind in (int, float):
        takes = "a whole number" if kind is int else "a number"
    else:
        takes = f"what its {getattr(kind, '__name__', kind)} parses"
    return f"{name}={value!r}: MLflow reads this environment variable as {takes}; set such a value or unset it"
