"""Methods by name. Importing this package registers every method."""

from raytune_fl.methods import fedavg, fedprox, feduv, univarfl  # noqa: F401  (registration)
from raytune_fl.methods.base import METHODS, Batch, LocalTerm, Method, MethodSpec, build_method

__all__ = ["METHODS", "Batch", "LocalTerm", "Method", "MethodSpec", "build_method"]
