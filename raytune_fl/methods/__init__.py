"""Methods by name, and the interface a method implements. Light to import: no torch.

Layout, one rule for every method `<name>`:

- `raytune_fl/methods/<name>.py`: the method's `SPEC` (a `MethodSpec`, registered into `METHODS` under `<name>`),
  its hyperparameters (`Param`s declared once, at module level, read back in `build` as `MU.of(params)`) and its
  `build(params, context)`. Torch-free: reading a spec (the config checks, before any trial) imports no torch.
- `raytune_fl/methods/impl/<name>.py`: the code `build` assembles (local terms, client hooks, server aggregator
  glue), imported inside `build`, when the method is first built. A method whose `build` only picks existing parts
  (FedAvg's, FedNova's, FedBuff's) has none.

A family shares one torch-free module beside its methods' own: `fedopt.py` (with `impl/fedopt.py`) declares what
`fedadagrad.py`, `fedadam.py` and `fedyogi.py` have in common; `feddecorr.py` stacks its term on another method for
`fedprox_decorr.py`, `fedavgm_decorr.py` and `moon_decorr.py`. `registry.py` declares every name with its module
(`METHODS` knows them all without importing one); `base.py` is the interface; `losses.py`, `hooks.py`,
`lipschitz.py` and `personal_model.py` (a second model per client: Ditto's, APFL's, pFedMe's) are torch code that
several methods share (imported inside `build` or by impl/); `personal.py` is the torch-free part FedPer and FedRep
share.
"""

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
)
from raytune_fl.methods.registry import METHODS, build_method

__all__ = [
    "METHODS",
    "Batch",
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
