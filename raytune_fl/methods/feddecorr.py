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
from typing import Any

from torch import Tensor

from raytune_fl.aggregators import fedavg
from raytune_fl.methods.base import (
    Batch,
    LocalTerm,
    Method,
    MethodContext,
    Stateless,
    active,
)
from raytune_fl.methods.catalog import METHODS
from raytune_fl.methods.losses import decorrelation


class Decorrelation(LocalTerm):
    name = "decorr"  # logged unweighted as term_decorr

    def __init__(self, weight: float, form: str, eps: float) -> None:
        super().__init__(weight)
        self.form, self.eps = form, eps

    def loss(self, batch: Batch) -> Tensor:
        return decorrelation(batch.z, self.form, self.eps)


def build(params: dict[str, Any], context: MethodContext) -> Method:
    terms = [Decorrelation(params["beta"], params["form"], params["eps"])]
    return Method("feddecorr", active(terms), Stateless(fedavg))


def build_stacked(base_name: str, params: dict[str, Any], context: MethodContext) -> Method:
    """`<base>_decorr` (the catalog's stacked specs): the base method with the decorrelation term added."""
    base = METHODS.get(base_name)
    method = base.build({k: params[k] for k in base.params}, context)
    term = Decorrelation(params["beta"], params["form"], params["eps"])
    return dataclasses.replace(method, name=f"{base_name}_decorr", terms=(*method.terms, *active([term])))
