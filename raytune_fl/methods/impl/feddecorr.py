"""FedDecorr's decorrelation term (raytune_fl.methods.feddecorr explains the method)."""

from __future__ import annotations

from torch import Tensor

from raytune_fl.methods.base import Batch, LocalTerm
from raytune_fl.methods.losses import DecorrForm, decorrelation


class Decorrelation(LocalTerm):
    name = "decorr"  # logged unweighted as term_decorr
    per_sample = False  # the columns are standardised over the batch

    def __init__(self, weight: float, form: DecorrForm, eps: float) -> None:
        super().__init__(weight)
        self.form, self.eps = form, eps

    def loss(self, batch: Batch) -> Tensor:
        return decorrelation(batch.z, self.form, self.eps)
