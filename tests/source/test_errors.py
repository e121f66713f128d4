"""One exception base: every error class the package defines derives from `raytune_fl.errors.RaytuneFLError`, and
keeps its standard base (a caller catching ValueError or OSError still catches it).

Every module of the package is imported and every exception class defined in it found; warnings (a category, not
an error) and BaseExceptions that are no Exception (a study's interruption: `except Exception` must not catch it)
are the exceptions to the rule, and are named here.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import raytune_fl
from raytune_fl.errors import RaytuneFLError

NOT_ERRORS = {"raytune_fl.tune.interrupt.StudyInterrupted"}  # a KeyboardInterrupt: a stop, not an error


def defined_exceptions() -> dict[str, type[BaseException]]:
    """Every exception class defined in a module of the package, by its dotted name."""
    found: dict[str, type[BaseException]] = {}
    for module_info in pkgutil.walk_packages(raytune_fl.__path__, "raytune_fl."):
        module = importlib.import_module(module_info.name)
        for _, value in inspect.getmembers(module, inspect.isclass):
            if issubclass(value, BaseException) and value.__module__ == module.__name__:
                found[f"{value.__module__}.{value.__qualname__}"] = value
    return found


def test_every_error_of_the_package_derives_from_raytune_fl_error():
    found = defined_exceptions()
    errors = {n: c for n, c in found.items() if not issubclass(c, Warning) and n not in NOT_ERRORS}
    assert len(errors) >= 14, sorted(found)  # the scan sees the package's errors (14 and the base, 2026-11)
    assert not (outside := sorted(n for n, c in errors.items() if not issubclass(c, RaytuneFLError))), outside
    assert {n for n, c in found.items() if not issubclass(c, Exception)} == NOT_ERRORS
    assert raytune_fl.RaytuneFLError is RaytuneFLError  # public: a plugin author catches the package's errors


def test_each_error_keeps_its_standard_base():
    from raytune_fl.config import ConfigError
    from raytune_fl.data.download import ChecksumError, DownloadError
    from raytune_fl.engine.steps import NonFiniteLossError
    from raytune_fl.plugins import PluginError
    from raytune_fl.registry import UnknownNameError
    from raytune_fl.testing import MethodCheckError

    for error, base in [
        (ConfigError, ValueError),
        (PluginError, ValueError),
        (UnknownNameError, ValueError),
        (ChecksumError, ValueError),
        (DownloadError, OSError),
        (NonFiniteLossError, FloatingPointError),
        (MethodCheckError, AssertionError),
    ]:
        assert issubclass(error, base) and issubclass(error, RaytuneFLError), error
    try:
        raise ConfigError("bad field")
    except ValueError as caught:  # a caller of before catches it as it did
        assert str(caught) == "bad field" and isinstance(caught, RaytuneFLError)
    assert str(DownloadError(2, "no such file")) == "[Errno 2] no such file"  # OSError's own behaviour kept
