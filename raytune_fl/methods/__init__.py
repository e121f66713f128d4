"""Methods by name, and the interface a method implements. Light to import: no torch.

`METHODS` (methods/catalog.py) holds every method's spec; a method's own module (its terms, hooks and `build`)
is imported when the method is first built.
"""

from raytune_fl.methods.base import (
    Batch,
    Builder,
    ClientContext,
    ClientHook,
    LocalTerm,
    Method,
    MethodContext,
    MethodSpec,
    Param,
    ServerAggregator,
    Stateless,
)
from raytune_fl.methods.catalog import METHODS, build_method

__all__ = [
    "METHODS",
    "Batch",
    "Builder",
    "ClientContext",
    "ClientHook",
    "LocalTerm",
    "Method",
    "MethodContext",
    "MethodSpec",
    "Param",
    "ServerAggregator",
    "Stateless",
    "build_method",
]
