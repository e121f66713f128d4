"""Methods by name. Importing this package registers every method."""

from raytune_fl.methods import (  # noqa: F401  (registration)
    fedavg,
    fedavgm,
    fedbn,
    fedbuff,
    feddecorr,
    feddyn,
    fedgh,
    fedld,
    fednova,
    fedopt,
    fedprox,
    feduv,
    freeze,
    moon,
    qffl,
    scaffold,
    univarfl,
)
from raytune_fl.methods.base import (
    METHODS,
    Batch,
    ClientContext,
    ClientHook,
    LocalTerm,
    Method,
    MethodContext,
    MethodSpec,
    ServerAggregator,
    Stateless,
    build_method,
)

__all__ = [
    "METHODS",
    "Batch",
    "ClientContext",
    "ClientHook",
    "LocalTerm",
    "Method",
    "MethodContext",
    "MethodSpec",
    "ServerAggregator",
    "Stateless",
    "build_method",
]
