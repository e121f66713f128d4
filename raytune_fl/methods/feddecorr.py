"""FedDecorr (Shi et al., ICLR 2023): FedAvg + beta * a decorrelation penalty on the representation z.

Local heterogeneity collapses z into few dimensions; the term pushes the correlations between z's columns over
each batch towards 0 (``losses.decorrelation``), reusing the cross-entropy's forward pass (z is the model's
second output). Hyperparameters: beta (the term's weight; 0 is FedAvg exactly), form ("official": the authors'
code, off-diagonal squared entries of zhat^T zhat averaged and divided by the batch size; "paper": the squared
Frobenius norm of the correlation matrix over d^2, which needs a beta about batch-size times larger), eps
(inside the standardisation's square root; 1e-8 as in the official code; 1e-5 damps the large gradients of a
nearly constant column).

The default is the official form, not the paper's: the published beta values (0.1 on CIFAR-10 and
TinyImageNet, 0.05 on CIFAR-100, batch 64) are calibrated to it. Its value grows about linearly with the batch
size, so a beta tuned at one batch size should be scaled by N/64 at another. The paper stacks the term on
FedAvg, FedProx, FedAvgM and MOON: `fedprox_decorr`, `fedavgm_decorr` and `moon_decorr` are those methods with
the term added (their own hyperparameters, and beta, form, eps; beta = 0 is the base method exactly). Batches of
one sample are skipped by the local loop (the term would be 0).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import TYPE_CHECKING, Any, cast

from raytune_fl.methods.base import (
    OFFICIAL_OR_PAPER,
    LocalTerm,
    Method,
    MethodContext,
    MethodSpec,
    Param,
    Stateless,
    active,
    hyperparameters,
)
from raytune_fl.methods.registry import register

if TYPE_CHECKING:
    from raytune_fl.methods.losses import DecorrForm

BETA = Param(float, 0.1, "weight of the decorrelation term on z", name="beta", ge=0)
FORM = Param(
    str,
    "official",
    "official code's scale or the paper's normalisation",
    name="form",
    choices=OFFICIAL_OR_PAPER,
)
EPS = Param(float, 1e-8, "added to each column's variance before the square root", name="eps", gt=0)
DECORRELATION = (BETA, FORM, EPS)  # the term's hyperparameters, on its own and stacked on another method
COUPLED = "its decorrelation term standardises z over the batch: a sample's term depends on the others"


def _term(params: dict[str, Any]) -> LocalTerm:
    from raytune_fl.methods.impl.feddecorr import Decorrelation

    form = cast("DecorrForm", FORM.of(params))  # Param.of types a choice as str; the spec's choices checked the literal
    return Decorrelation(BETA.of(params), form, EPS.of(params))


def build(params: dict[str, Any], context: MethodContext) -> Method:
    from raytune_fl.aggregators import fedavg

    return Method(SPEC.name, active([_term(params)]), Stateless(fedavg))


def build_stacked(base: MethodSpec, params: dict[str, Any], context: MethodContext) -> Method:
    """`<base>_decorr`: the base method built from its own hyperparameters, with the decorrelation term added."""
    method = base.build({name: value for name, value in params.items() if name in base.params}, context)
    return dataclasses.replace(method, name=f"{base.name}_decorr", terms=(*method.terms, *active([_term(params)])))


def stacked(base: MethodSpec) -> MethodSpec:
    """The spec of `<base>_decorr` (registered by its own module, e.g. fedprox_decorr.py): the base method's
    hyperparameters and the term's, the base's flags, and beta = 0 added to its FedAvg setting."""
    name = f"{base.name}_decorr"
    clash = sorted(set(base.params) & {param.name for param in DECORRELATION})
    if clash:
        raise ValueError(f"{name}: {base.name} already has hyperparameters named {', '.join(clash)}")
    return MethodSpec(
        name,
        hyperparameters(*base.params.values(), *DECORRELATION),
        functools.partial(build_stacked, base),
        summary=f"{base.name} + decorrelation of the representation's columns (FedDecorr stacked)",
        derived=base.derived,
        as_fedavg=None if base.as_fedavg is None else {**base.as_fedavg, BETA.name: 0.0},
        sequential=base.sequential,
        per_sample=COUPLED,
        asynchronous=base.asynchronous,
    )


SPEC = register(
    MethodSpec(
        "feddecorr",
        hyperparameters(*DECORRELATION),
        build,
        summary="FedAvg + decorrelation of the representation's columns",
        as_fedavg={BETA.name: 0.0},
        per_sample=COUPLED,
    )
)
